#!/usr/bin/env bash
# Runs Farm's performance scenarios with what they need stood up around them:
#   perf/run.sh [SCENARIO...]      default: the set below, about 17 minutes on 2 cores
# SCENARIO: single-queue (Farm vs RabbitMQ classic, then again vs quorum, side by side in one run), topics (queue vs topic, 1,000
# subscriptions, ordering on vs off), failover (20 SIGKILLs of a 3-node farm), deep-backlog
# (10,000,000 messages; long); the sweeps (each about 1-2 minutes, several configurations on one
# farm): settlement, batch-sizes, prefetch, concurrency, latency, routing; many-queues (15,000 queues
# at 1 msg/s; about 6 minutes), chain (15 queues forwarding, at 25/75/125 msg/s per queue; about 3
# minutes), failover-stop (20 SIGSTOPs of an owner; about 7 minutes), failover-postgres (20 SIGKILLs
# of a 3-node farm on PostgreSQL, which the script installs from Debian's packages when missing and
# starts as a throwaway server on loopback), forwarding (a backlog drained through ForwardTo, on one
# node and across nodes; about 2 minutes); or all (about an hour with deep-backlog). Each writes
# perf/results/<scenario>.json.
# With no SCENARIO: single-queue topics settlement batch-sizes concurrency latency routing chain.
#
# It builds perf/Farm.Perf (Release), states the machine and measures the disk's fsync rate
# (perf/results/machine.json, and "machine" in every result), installs RabbitMQ from Debian's
# packages when it is missing, and starts a throwaway RabbitMQ of its own on loopback (its own
# data, log and config under a temporary directory, free ports, a unique node name, its own epmd),
# which it stops and deletes on exit. A RabbitMQ service the package install started is stopped.
#
# Extra options for a scenario: SINGLE_QUEUE_ARGS, TOPICS_ARGS, FAILOVER_ARGS, DEEP_BACKLOG_ARGS,
# SETTLEMENT_ARGS, BATCH_SIZES_ARGS, PREFETCH_ARGS, CONCURRENCY_ARGS, LATENCY_ARGS, ROUTING_ARGS,
# MANY_QUEUES_ARGS, CHAIN_ARGS, FAILOVER_STOP_ARGS, FAILOVER_POSTGRES_ARGS, FORWARDING_ARGS,
# e.g. SINGLE_QUEUE_ARGS="--peer-queue-type quorum" perf/run.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
results="$here/perf/results"
known=(single-queue topics failover deep-backlog)
known+=(settlement batch-sizes prefetch concurrency latency routing)
# What runs with no arguments: within 20 minutes on 2 cores (see perf/README.md).
defaults=(single-queue topics)
defaults+=(settlement batch-sizes concurrency latency routing chain)
# Long ones (each measures one target of issue 14): by name, or with all.
extra=(many-queues chain failover-stop failover-postgres forwarding)
known+=("${extra[@]}")
known=($(printf '%s\n' "${known[@]}" | awk '!seen[$0]++'))

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=("${defaults[@]}")
elif [ "${scenarios[*]}" = all ]; then
  scenarios=("${known[@]}")
fi
for s in "${scenarios[@]}"; do
  case " ${known[*]} " in
    *" $s "*) ;;
    *) echo "perf/run.sh: unknown scenario '$s' (known: ${known[*]}, all)" >&2; exit 2 ;;
  esac
done
# single-queue measures Farm against both of RabbitMQ's durable queue types in the same run, one
# after the other (single-queue.json: classic, single-queue-quorum.json: quorum), so the report's
# "best RabbitMQ configuration" is always one measured beside this Farm, in the same hour.
# SINGLE_QUEUE_ARGS naming a --peer-queue-type runs just that one.
if [[ " ${scenarios[*]} " == *" single-queue "* && "${SINGLE_QUEUE_ARGS:-}" != *--peer-queue-type* ]]; then
  expanded=()
  for s in "${scenarios[@]}"; do
    expanded+=("$s")
    [ "$s" = single-queue ] && expanded+=(single-queue-quorum)
  done
  scenarios=("${expanded[@]}")
fi

log() { echo "run.sh: $(date -u +%H:%M:%S) $*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/farm-perf-run.XXXXXX")
rabbit_pid=""
# pg_dir, pg_bin, pg_port, pg_as and the functions that start and stop a throwaway server.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/throwaway-postgres.sh"
epmd_pid=""
epmd_before=" $(pgrep -x epmd 2>/dev/null | tr '\n' ' ' || true)"

cleanup() {
  local status=$?
  if [ -n "$rabbit_pid" ] && kill -0 "$rabbit_pid" 2>/dev/null; then
    log "stopping RabbitMQ (pid $rabbit_pid)"
    # SIGTERM makes the Erlang VM shut the node down cleanly; give it 30 s, then kill it.
    kill -TERM "$rabbit_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$rabbit_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$rabbit_pid" 2>/dev/null || true
    wait "$rabbit_pid" 2>/dev/null || true
  fi
  # The Erlang VM is the wrapper script's child: if the wrapper had to be killed, so is the VM.
  local beam_pid
  beam_pid=$(cat "$work/rabbitmq/rabbitmq.pid" 2>/dev/null || true)
  if [ -n "$beam_pid" ] && kill -0 "$beam_pid" 2>/dev/null; then
    kill -KILL "$beam_pid" 2>/dev/null || true
  fi
  if [ -n "$epmd_pid" ] && kill -0 "$epmd_pid" 2>/dev/null; then
    kill -TERM "$epmd_pid" 2>/dev/null || true
    wait "$epmd_pid" 2>/dev/null || true
  fi
  # RabbitMQ's boot also makes sure an epmd runs on the default port (a helper VM that does not
  # see ERL_EPMD_PORT starts "epmd -daemon"); one that appeared during this run is this run's.
  local pid
  for pid in $(pgrep -x epmd 2>/dev/null || true); do
    case " $epmd_before " in *" $pid "*) continue ;; esac
    [ "$pid" = "$epmd_pid" ] && continue
    grep -q -- '-daemon' "/proc/$pid/cmdline" 2>/dev/null && kill -TERM "$pid" 2>/dev/null || true
  done
  if [ -n "$pg_dir" ]; then
    log "stopping PostgreSQL"
    postgres_stop_throwaway
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the machine -------------------------------------------------------------------------------
cores=$(nproc)
mem_kib=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
mem_gib=$(awk -v k="$mem_kib" 'BEGIN { printf "%.1f", k / 1048576 }')
disk_source=$(df -P "$work" | awk 'NR == 2 { print $1 }')
disk_fs=$(df -PT "$work" | awk 'NR == 2 { print $2 }')
disk_size=$(df -Ph "$work" | awk 'NR == 2 { print $2 }')
disk="$disk_source ($disk_fs, $disk_size) under ${TMPDIR:-/tmp}"

# The fsync probe: 2,000 appends of 1 KiB, each written with O_DSYNC (a write and its fdatasync),
# in the temporary directory where the nodes and RabbitMQ keep their data. ANCHORS.md quotes the
# same figure ("1 KB append + fdatasync").
probe="$work/fsync-probe"
start_ns=$(date +%s%N)
dd if=/dev/zero of="$probe" bs=1k count=2000 oflag=dsync status=none
end_ns=$(date +%s%N)
rm -f "$probe"
fsync_per_sec=$(awk -v n=2000 -v ns=$((end_ns - start_ns)) 'BEGIN { printf "%.0f", n / (ns / 1e9) }')
log "machine: $cores cores, $mem_gib GiB, disk $disk; 1 KiB append + fdatasync: $fsync_per_sec/s"
mkdir -p "$results"
cat > "$results/machine.json" <<EOF
{
  "cores": $cores,
  "memory_gib": $mem_gib,
  "disk": "$disk",
  "fsync_per_sec": $fsync_per_sec,
  "fsync_probe": "dd if=/dev/zero bs=1k count=2000 oflag=dsync (1 KiB append + fdatasync each)",
  "timestamp": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
EOF
# Farm.Perf copies these into the "machine" of every result it writes.
export FARM_PERF_FSYNC_PER_SEC="$fsync_per_sec" FARM_PERF_DISK="$disk"

# --- RabbitMQ ----------------------------------------------------------------------------------
needs_rabbitmq=false
for s in "${scenarios[@]}"; do [ "$s" = single-queue ] && needs_rabbitmq=true; done

rabbitmq_service_active() {
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl is-active --quiet rabbitmq-server 2>/dev/null
  else
    service rabbitmq-server status >/dev/null 2>&1
  fi
}

install_rabbitmq() {
  if [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    return
  fi
  log "installing RabbitMQ from Debian's packages"
  if [ "$(id -u)" -ne 0 ]; then
    echo "perf/run.sh: rabbitmq-server is not installed and this is not root; install it (apt-get install rabbitmq-server) or run as root" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  # The package starts its own service where services start (systemd): it would share the CPU
  # with the run, so it is stopped. This script never uses it.
  if rabbitmq_service_active; then
    log "the package started the distro's rabbitmq-server service; stopping it (this script runs its own)"
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      systemctl stop rabbitmq-server
    else
      service rabbitmq-server stop
    fi
  fi
}

# A port nothing listens on (a connect to it fails); the broker would not start on a taken one.
free_port() {
  local port
  while true; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

start_rabbitmq() {
  if rabbitmq_service_active; then
    log "WARNING: a rabbitmq-server service is running on this machine (not started by this script); it shares the CPU with the run"
  fi
  local dir="$work/rabbitmq"
  mkdir -p "$dir/mnesia" "$dir/log" "$dir/home"
  rabbit_port=$(free_port)
  local dist_port epmd_port node
  dist_port=$(free_port)
  epmd_port=$(free_port)
  node="farm-perf-$$-$RANDOM@localhost"
  cat > "$dir/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$rabbit_port
log.console = false
log.file.level = warning
EOF
  echo "[]." > "$dir/enabled_plugins"
  : > "$dir/rabbitmq-env.conf"
  # Its own epmd on its own port, so nothing outlives the run and no other Erlang node is touched.
  epmd -port "$epmd_port" -address 127.0.0.1 >"$dir/epmd.log" 2>&1 &
  epmd_pid=$!
  log "starting RabbitMQ $node on 127.0.0.1:$rabbit_port (data and logs in $dir)"
  # HOME: the Erlang cookie is created there, not in root's home. The env file replaces
  # /etc/rabbitmq/rabbitmq-env.conf, so nothing of the distro's configuration applies.
  env -u NOTIFY_SOCKET HOME="$dir/home" \
    RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
    RABBITMQ_NODENAME="$node" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$rabbit_port" \
    RABBITMQ_DIST_PORT="$dist_port" \
    ERL_EPMD_PORT="$epmd_port" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" \
    RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_PID_FILE="$dir/rabbitmq.pid" \
    /usr/lib/rabbitmq/bin/rabbitmq-server >"$dir/stdout.log" 2>&1 &
  rabbit_pid=$!
  local deadline=$((SECONDS + 90))
  until (exec 3<>"/dev/tcp/127.0.0.1/$rabbit_port") 2>/dev/null; do
    if ! kill -0 "$rabbit_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      log "RabbitMQ did not come up; its output:"
      tail -n 40 "$dir/stdout.log" "$dir"/log/*.log >&2 2>/dev/null || true
      exit 1
    fi
    sleep 0.5
  done
  log "RabbitMQ answers on 127.0.0.1:$rabbit_port"
}

# --- PostgreSQL (failover-postgres) -------------------------------------------------------------
needs_postgres=false
for s in "${scenarios[@]}"; do [ "$s" = failover-postgres ] && needs_postgres=true; done

# A throwaway server of its own (its data under a temporary directory, a free port, loopback only,
# fsync on), and an empty farm database in it: the farm's nodes run on it with --store postgres.
start_postgres() {
  if ! postgres_find_bin; then
    if [ "$(id -u)" != 0 ]; then
      echo "perf/run.sh: PostgreSQL is not installed and this is not root; install it (apt-get install postgresql) or run as root" >&2
      exit 1
    fi
    log "installing PostgreSQL from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    postgres_find_bin || { echo "perf/run.sh: PostgreSQL was installed but initdb is nowhere to be found" >&2; exit 1; }
  fi
  postgres_start_throwaway farm-perf-postgres || exit 1
  "${pg_as[@]}" "$pg_bin/psql" -h "$pg_dir/socket" -p "$pg_port" -U postgres -qc "CREATE DATABASE farm_perf" >/dev/null
  pg_farm="Host=127.0.0.1;Port=$pg_port;Username=postgres;Password=$pg_password;Database=farm_perf"
  log "PostgreSQL $(basename "$(dirname "$pg_bin")") answers on 127.0.0.1:$pg_port (farm database farm_perf)"
}

# --- run ---------------------------------------------------------------------------------------
log "building perf/Farm.Perf (Release)"
dotnet build "$here/perf/Farm.Perf" -c Release -nologo -v quiet >/dev/null
perf_dll="$here/perf/Farm.Perf/bin/Release/net10.0/Farm.Perf.dll"

if $needs_rabbitmq; then
  install_rabbitmq
  start_rabbitmq
fi
if $needs_postgres; then
  start_postgres
fi

failed=()
for s in "${scenarios[@]}"; do
  case "$s" in
    single-queue) args=(--peer rabbitmq --peer-uri "amqp://guest:guest@127.0.0.1:$rabbit_port/" ${SINGLE_QUEUE_ARGS:-}) ;;
    single-queue-quorum) args=(--peer rabbitmq --peer-uri "amqp://guest:guest@127.0.0.1:$rabbit_port/" --peer-queue-type quorum
      --out perf/results/single-queue-quorum.json ${SINGLE_QUEUE_ARGS:-}) ;;
    topics) args=(${TOPICS_ARGS:-}) ;;
    failover) args=(${FAILOVER_ARGS:-}) ;;
    deep-backlog) args=(${DEEP_BACKLOG_ARGS:-}) ;;
    many-queues) args=(${MANY_QUEUES_ARGS:-}) ;;
    chain) args=(${CHAIN_ARGS:-}) ;;
    forwarding) args=(${FORWARDING_ARGS:-}) ;;
    failover-stop) args=(--signal stop ${FAILOVER_STOP_ARGS:-}) ;;
    failover-postgres) args=(--farm-connection "$pg_farm" ${FAILOVER_POSTGRES_ARGS:-}) ;;
    settlement) args=(${SETTLEMENT_ARGS:-}) ;;
    batch-sizes) args=(${BATCH_SIZES_ARGS:-}) ;;
    prefetch) args=(${PREFETCH_ARGS:-}) ;;
    concurrency) args=(${CONCURRENCY_ARGS:-}) ;;
    latency) args=(${LATENCY_ARGS:-}) ;;
    routing) args=(${ROUTING_ARGS:-}) ;;
  esac
  command=${s%-stop}
  command=${command%-postgres}
  command=${command%-quorum}
  log "scenario $s: dotnet perf/Farm.Perf/bin/Release/net10.0/Farm.Perf.dll $command $(printf '%s ' "${args[@]}" | sed 's/Password=[^;]*/Password=***/g')"
  started=$SECONDS
  if (cd "$here" && dotnet "$perf_dll" "$command" "${args[@]}"); then
    log "scenario $s done in $((SECONDS - started)) s"
  else
    log "scenario $s FAILED (exit $?) after $((SECONDS - started)) s"
    failed+=("$s")
  fi
done

# The report is made from every result there is, this run's and earlier ones' (each row names its run).
(cd "$here" && dotnet "$perf_dll" report) || log "perf/REPORT.md could not be written"

# From the script's start: the build, RabbitMQ's install and start, every scenario and the report.
log "$(printf '%s ' "${scenarios[@]}")took $((SECONDS / 60)) min $((SECONDS % 60)) s"
if [ ${#failed[@]} -gt 0 ]; then
  log "failed: ${failed[*]}"
  exit 1
fi
log "results in perf/results/, summary in perf/REPORT.md"
