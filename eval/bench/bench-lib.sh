# bench-lib.sh -- what the federation load benchmarks share; sourced, from the
# repository's root, by eval/bench/run-load.sh and eval/bench/soak.sh.
#
# bench_fed_up TAG [FED_UP_ARGS...]
#   builds the daemons, o3m-bench-load and o3m-cli (RelWithDebInfo, in
#   $O3M_BUILD_DIR, default build/) the first time, makes a fresh
#   /tmp/o3m-TAG.XXXXXX the first time (emptied on later calls), starts a
#   local federation with mutual TLS on loopback there (M = 5 parties of 20
#   columns, d = 100, 1000 users, $BENCH_ITEMS items (default 200),
#   max_candidates $BENCH_MAX_CANDIDATES (default 64), then FED_UP_ARGS, for example
#   --aggregation per-party) and arranges for the federation to be stopped
#   and the folder removed when the script exits. Stop it with fed_down
#   before calling again. Sets bin (the binaries' folder) and work (the
#   federation's folder, with FED_CONF and certs/).
. scripts/federation-lib.sh

bench_fed_up() {
  local tag="$1"
  shift
  if [ -z "${bin:-}" ]; then
    local build="${O3M_BUILD_DIR:-build}"
    bin="$build/bin"
    [[ "$build" = /* ]] || bin="$(pwd)/$build/bin"
    scripts/setup-deps.sh
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j"$(nproc)" --target o3m-pmg o3m-passive o3m-active o3m-eval \
      o3m-bench-load o3m-cli >/dev/null
  fi
  if [ -z "${work:-}" ]; then
    work=$(mktemp -d "/tmp/o3m-$tag.XXXXXX")
    trap 'fed_down; rm -rf "$work"' EXIT
  else
    rm -rf "${work:?}"/*
  fi
  fed_up "$work" "$bin" --parties 20,20,20,20,20 --users 1000 --items "${BENCH_ITEMS:-200}" \
    --max-candidates "${BENCH_MAX_CANDIDATES:-64}" "$@"
}

# nats_up NAME [plain]: a 3-node nats-server cluster with JetStream on
# loopback (free ports, a store per node under $nats_dir/nN), for AP
# replicas, run as a deployment runs it: $NATS_CONF (default
# deploy/nats/o3m-nats.conf), mutual TLS for clients and routes, the active
# party's certificate (subject CN=NAME) admitted as the replicas' user.
# The CA, the nodes' certificates and the administrative one (o3m-admin,
# the user that creates the stream and the bucket: nats_setup) are made in
# $nats_dir/certs; the federation then takes that CA (FED_CA_DIR). With a
# second argument "plain" the nodes run the insecure way instead (plain
# text, no credentials; the replicas' nats_tls = off), to measure what TLS
# costs.
# nats_down stops it. NATS_URLS is the servers' list for nats_servers.
NATS_PIDS=()
nats_up() {
  local i ports=() cports=() routes certs="$nats_dir/certs"
  scripts/make-certs.sh --dns nats "$certs" n0 n1 n2
  scripts/make-certs.sh "$certs" o3m-admin
  for i in 1 2 3; do
    ports+=($(fed_free_port))
    cports+=($(fed_free_port))
  done
  NATS_URLS=""
  for i in 0 1 2; do NATS_URLS="$NATS_URLS${NATS_URLS:+,}nats://127.0.0.1:${ports[$i]}"; done
  for i in 0 1 2; do
    routes=""
    for j in 0 1 2; do
      [ "$j" = "$i" ] || routes="$routes${routes:+,}nats://127.0.0.1:${cports[$j]}"
    done
    if [ "${2:-}" = plain ]; then
      nats-server -js -sd "$nats_dir/n$i" -n "n$i" -a 127.0.0.1 -p "${ports[$i]}" \
        --cluster_name o3m --cluster "nats://127.0.0.1:${cports[$i]}" --routes "$routes" \
        >"$nats_dir/n$i.log" 2>&1 &
    else
      O3M_NATS_CA="$certs/ca.pem" O3M_NATS_CERT="$certs/n$i.pem" O3M_NATS_KEY="$certs/n$i.key" \
        O3M_NATS_CLUSTER="127.0.0.1:${cports[$i]}" O3M_NATS_REPLICAS="CN=$1" O3M_NATS_ADMIN=CN=o3m-admin \
        nats-server -c "${NATS_CONF:-deploy/nats/o3m-nats.conf}" -sd "$nats_dir/n$i" -n "n$i" -a 127.0.0.1 \
        -p "${ports[$i]}" --routes "$routes" >"$nats_dir/n$i.log" 2>&1 &
    fi
    NATS_PIDS+=($!)
  done
  sleep 1
}
# nats_setup WORK BIN: the administrative step before any replica starts
# (fed_up's FED_BEFORE_ACTIVE): o3m-cli nats-setup with the o3m-admin
# certificate creates the stream and the bucket, append-only. The o3m-cli
# is the first of BIN and $NATS_SETUP_BINS (folders) that has the command;
# with none, the step is skipped (a build before it, whose replicas create
# the stream themselves).
nats_setup() {
  local d cli= tls=()
  for d in "$2" ${NATS_SETUP_BINS:-}; do
    if "$d/o3m-cli" --help 2>&1 | grep -q nats-setup; then cli="$d/o3m-cli"; break; fi
  done
  [ -n "$cli" ] || return 0
  [ -n "${plain:-}" ] || tls=(--cert "$nats_dir/certs/o3m-admin.pem" --key "$nats_dir/certs/o3m-admin.key")
  "$cli" --config "$FED_CONF" "${tls[@]}" nats-setup >"$1/nats-setup.out" || return 1
}
nats_down() {
  local p
  for p in "${NATS_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${NATS_PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  NATS_PIDS=()
}
# replicas_fed_up ENTRY NAME: for an attack script's ENTRY of
# O3M_ATTACK_BINS (DIR, or DIR:CONF with CONF the NATS config that build
# ran with; default this tree's deploy/nats/o3m-nats.conf): sets bin and
# NATS_CONF, brings up a 3-node JetStream cluster (nats_up, in nats_dir,
# made once) and the bench federation NAME (M = 5, d = 100) with AP
# replica r1 (the setup step first), and arms the trap that stops them.
replicas_fed_up() {
  local dir=${1%%:*}
  NATS_CONF=deploy/nats/o3m-nats.conf
  [ "$1" = "$dir" ] || NATS_CONF=${1#*:}
  bin=$(cd "$dir" && pwd)
  echo "== binaries $bin, NATS config $NATS_CONF"
  [ -n "${nats_dir:-}" ] || nats_dir=$(mktemp -d "/tmp/o3m-$2.XXXXXX")
  rm -rf "${nats_dir:?}"/*
  nats_up shop
  FED_CA_DIR="$nats_dir/certs" FED_FEDERATION_EXTRA="replication = nats
nats_servers = $NATS_URLS
nats_replicas = 3" FED_AP_STATE=1 FED_ACTIVE_ARGS="--replica r1" FED_BEFORE_ACTIVE=nats_setup \
    bench_fed_up "$2" --aggregation secure
  trap 'nats_down; fed_down; rm -rf "${work:-/nonexistent}" ${nats_dir:+"$nats_dir"}' EXIT
}
# replica_start NAME PORT: starts one more AP replica NAME of the
# federation on PORT (its pid is ${FED_PIDS[-1]}); 0 when ready within
# 30 s, 1 when it exited or did not become ready.
replica_start() {
  FED_ACTIVE_ARGS="--replica $1 --listen 127.0.0.1:$2" fed_start "$work" "$bin" "$FED_ACTIVE" o3m-active
  local pid=${FED_PIDS[-1]} i
  for i in $(seq 1 300); do
    [ -s "$work/$FED_ACTIVE.ready" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
