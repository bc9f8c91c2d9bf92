#!/usr/bin/env bash
# Runs `single-queue --no-peer` and cuts every TCP connection to the node three times while it
# measures (`ss -K`, as a network fault or a keep-alive timeout would), then prints the run's
# summary and delivery check. A send whose answer was lost is sent again by the SDK; the check
# shows whether any message was stored twice. Needs root (ss -K) and a Release build of perf/.
#
#   perf/cut-connections.sh                 # this checkout's node
#   FARM_PERF_NODE_DLL=/other/Farm.Gateway.dll perf/cut-connections.sh   # another build's node
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp /tmp/cut-connections.XXXXXX.log)
dotnet perf/Farm.Perf/bin/Release/net10.0/Farm.Perf.dll single-queue --no-peer --warmup 5s --duration 20s \
  --out "${log%.log}.json" >"$log" 2>&1 &
run=$!
until grep -q "measure" "$log" 2>/dev/null; do
  kill -0 "$run" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.5
done
node=$(grep -oP 'pid \K[0-9]+' "$log" | head -1)
for cut in 1 2 3; do
  sleep 4
  for port in $(ss -tlnp | grep "pid=$node," | grep -oP '127\.0\.0\.1:\K[0-9]+'); do
    ss -K -t dst 127.0.0.1 dport = ":$port" >/dev/null 2>&1 || true
  done
  echo "cut $cut: every connection to node $node"
done
wait "$run" || true
grep -E "^single-queue:|FAILED|more than once|delivered again" "$log"
echo "log: $log"
