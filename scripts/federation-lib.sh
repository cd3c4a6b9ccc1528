# federation-lib.sh -- start and stop a local federation; sourced by
# scripts/demo.sh, the end-to-end test and the load benchmark.
#
# fed_up WORK BIN [gen-federation options...]
#   generates the federation in WORK (config, tables, truth), makes the
#   certificates, starts o3m-pmg, every o3m-passive and o3m-active from BIN
#   with their logs in WORK/NAME.log, and waits until each is ready.
# fed_gen WORK BIN [gen-federation options...]
#   only generates and makes the certificates (fed_up's first half); sets
#   FED_CONF, FED_PASSIVE, FED_ACTIVE and FED_PMG. Start the daemons with
#   fed_start, in any order, and wait with fed_wait.
# fed_down
#   stops every daemon started by fed_up or fed_start and waits for it.
# FED_PASSIVE holds the passive party names, FED_ACTIVE and FED_PMG the
# other two; FED_CONF the config path.
# fed_start_all WORK BIN
#   starts the daemons of a federation fed_gen made (the pmg, every passive
#   party, the active party) and waits until each is ready (fed_up's second
#   half).
# fed_federate WORK BIN ROUNDS K [o3m-eval federate options...]
#   streams ROUNDS rounds of K candidates through the active party as the
#   client 'client' and prints the federated regret beside the central one
#   (the demo's run).
# FED_DEMO_GEN holds the demo's gen-federation options (d = 100, four
# passive parties of 20 columns, 1000 users, 200 items, alpha 0.5).
# A caller may define fed_extra_args NAME, printing more options for the
# daemon of party NAME (the ops test adds --metrics-listen and logging),
# and fed_wrap NAME, printing a command that runs the daemon of party NAME
# (or, for NAME client, fed_federate's driver): netns-federation.sh runs
# each in its own network namespace with `ip netns exec NS`; fed_config_of
# NAME, printing the config file of party NAME's daemon instead of FED_CONF
# (netns-federation.sh: each host's own copy, naming only its own listen);
# and fed_make_certs WORK, making WORK/certs its own way instead of one
# make-certs.sh call for loopback (scripts/netns-federation.sh gives each
# party its own host's address as an IP SAN).
# Optional environment: FED_ACTIVE_ARGS and FED_PASSIVE_ARGS, extra options
# for o3m-active and every o3m-passive (for example "--threads 2");
# FED_AP_STATE=1 gives the active party a state_dir (WORK/ap-state), so its
# rewards are durable; FED_FEDERATION_EXTRA, lines added to [federation]
# (for example the AP replicas' "replication = nats" and nats_servers);
# FED_CA_DIR, a folder whose ca.pem and ca.key become the federation's CA
# (the load benchmark's NATS nodes have certificates of that CA).

FED_PIDS=()
FED_NAMES=()

# Prints a TCP port on 127.0.0.1 reserved until the calling script exits:
# a detached holder keeps a socket bound to it with SO_REUSEADDR, never
# listening, and exits within 0.5 s of the script ($$). Another process's
# port-0 bind or outgoing connect never gets a port so held, while a daemon
# (every listener here sets SO_REUSEADDR) still binds and listens on it;
# tests/fed_proc.h says why. A port that was only free a moment ago could
# be taken by anyone before the daemon bound it.
fed_free_port() {
  python3 - "$$" <<'PY'
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
if os.fork():
    os._exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
owner = int(sys.argv[1])
while True:
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        break
    except PermissionError:
        pass
    time.sleep(0.5)
PY
}

# fed_reserve_addresses CONF: gives every party whose address is on
# 127.0.0.1 a port of fed_free_port instead of the one gen-federation
# found free (and let go) when it wrote CONF.
fed_reserve_addresses() {
  local conf=$1 n port
  for n in $(awk '/^\[party /{n=$2; sub(/\]/,"",n); print n}' "$conf"); do
    port=$(fed_free_port) || return 1
    sed -i "/^\[party $n\]\$/,/^\[/ s|^address = 127\.0\.0\.1:[0-9]*\$|address = 127.0.0.1:$port|" "$conf"
  done
}

fed_down() {
  local p
  for p in "${FED_PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${FED_PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  FED_PIDS=()
  FED_NAMES=()
}

# fed_start WORK BIN NAME BINARY: starts one daemon in the background.
fed_start() {
  local work=$1 bin=$2 name=$3 exe=$4
  local extra=()
  case "$exe" in
  o3m-active) read -ra extra <<<"${FED_ACTIVE_ARGS:-}" ;;
  o3m-passive) read -ra extra <<<"${FED_PASSIVE_ARGS:-}" ;;
  esac
  if declare -F fed_extra_args >/dev/null; then
    local more=()
    read -ra more <<<"$(fed_extra_args "$name")"
    extra+=("${more[@]}")
  fi
  local wrap=() conf=$FED_CONF
  declare -F fed_wrap >/dev/null && read -ra wrap <<<"$(fed_wrap "$name")"
  declare -F fed_config_of >/dev/null && conf=$(fed_config_of "$name")
  rm -f "$work/$name.ready"
  "${wrap[@]}" "$bin/$exe" --config "$conf" --party "$name" --ready-file "$work/$name.ready" \
    "${extra[@]}" 2>>"$work/$name.log" &
  FED_PIDS+=($!)
  FED_NAMES+=("$name")
}

# fed_wait WORK NAME: waits up to 30 s for NAME's ready file.
fed_wait() {
  local work=$1 name=$2 i
  for i in $(seq 1 300); do
    [ -s "$work/$name.ready" ] && return 0
    sleep 0.1
  done
  echo "federation: $name did not become ready; its log:" >&2
  cat "$work/$name.log" >&2
  return 1
}

# fed_names CONF: sets FED_CONF, and FED_PMG, FED_ACTIVE and FED_PASSIVE
# from the roles of CONF's parties.
fed_names() {
  FED_CONF=$1
  FED_PASSIVE=$(awk '/^\[party /{n=$2; sub(/\]/,"",n)} /^role = passive/{print n}' "$FED_CONF")
  FED_ACTIVE=$(awk '/^\[party /{n=$2; sub(/\]/,"",n)} /^role = active/{print n}' "$FED_CONF")
  FED_PMG=$(awk '/^\[party /{n=$2; sub(/\]/,"",n)} /^role = pmg/{print n}' "$FED_CONF")
}

fed_gen() {
  local work=$1 bin=$2
  shift 2
  "$bin/o3m-eval" gen-federation --out "$work" "$@" >/dev/null
  fed_names "$work/federation.conf"
  fed_reserve_addresses "$FED_CONF" || return 1
  local active=$FED_ACTIVE
  if [ -n "${FED_FEDERATION_EXTRA:-}" ]; then
    printf '%s\n' "$FED_FEDERATION_EXTRA" >"$work/federation.extra"
    sed -i "/^\[federation\]\$/r $work/federation.extra" "$FED_CONF"
  fi
  if [ "${FED_AP_STATE:-0}" = 1 ]; then
    sed -i "/^\[party $active\]\$/a state_dir = ap-state" "$FED_CONF"
  fi
  if [ -n "${FED_CA_DIR:-}" ]; then
    mkdir -p "$work/certs"
    cp "$FED_CA_DIR/ca.pem" "$FED_CA_DIR/ca.key" "$work/certs/"
  fi
  if declare -F fed_make_certs >/dev/null; then
    fed_make_certs "$work"
  else
    # shellcheck disable=SC2086
    "$FED_SCRIPTS/make-certs.sh" "$work/certs" "$FED_PMG" "$FED_ACTIVE" $FED_PASSIVE client
  fi
}

fed_start_all() {
  local work=$1 bin=$2 p
  fed_start "$work" "$bin" "$FED_PMG" o3m-pmg
  for p in $FED_PASSIVE; do fed_start "$work" "$bin" "$p" o3m-passive; done
  # FED_BEFORE_ACTIVE: a command run with the config written and before the
  # active party starts (AP replicas: the NATS setup step).
  if [ -n "${FED_BEFORE_ACTIVE:-}" ]; then "$FED_BEFORE_ACTIVE" "$work" "$bin" || return 1; fi
  fed_start "$work" "$bin" "$FED_ACTIVE" o3m-active
  for p in "$FED_PMG" $FED_PASSIVE "$FED_ACTIVE"; do fed_wait "$work" "$p" || return 1; done
}

fed_up() {
  local work=$1 bin=$2
  shift 2
  fed_gen "$work" "$bin" "$@" || return 1
  fed_start_all "$work" "$bin"
}

fed_federate() {
  local work=$1 bin=$2 rounds=$3 k=$4
  shift 4
  local wrap=()
  declare -F fed_wrap >/dev/null && read -ra wrap <<<"$(fed_wrap client)"
  "${wrap[@]}" "$bin/o3m-eval" federate --config "$work/federation.conf" \
    --truth "$work/truth.txt" --rounds "$rounds" --K "$k" \
    --cert "$work/certs/client.pem" --key "$work/certs/client.key" "$@"
}

FED_DEMO_GEN=(--parties 20,20,20,20,20 --users 1000 --items 200 --alpha 0.5)

FED_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
