#!/usr/bin/env bash
# Builds the project and runs every test: installs missing Debian packages,
# configures into build/ (or $O3M_BUILD_DIR), builds, runs CTest.
# Extra arguments go to CMake's configure step, e.g. -DO3M_ASAN=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
build="${O3M_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure
