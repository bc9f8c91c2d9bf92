#!/usr/bin/env bash
# perf/work-items.sh PID [SECONDS] [FRAMES] : which code queues a running .NET process's thread-pool
# work items, and how many (perf/README, "Where thread-pool work items come from").
set -euo pipefail
pid=${1:?usage: perf/work-items.sh PID [SECONDS] [FRAMES]}
seconds=${2:-3}
frames=${3:-4}
here=$(cd "$(dirname "$0")" && pwd)
trace_tool=$("$here/dotnet-trace-path.sh")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# FrameworkEventSource keywords ThreadPool (0x2) and ThreadTransfer (0x10), verbose: one event per enqueue.
"$trace_tool" collect -p "$pid" --providers "System.Diagnostics.Eventing.FrameworkEventSource:0x12:5" \
  --duration "00:00:00:$(printf '%02d' "$seconds")" -o "$out/t.nettrace" >/dev/null
dotnet run -c Release --project "$here/Farm.WorkItems" -- "$out/t.nettrace" "$frames"
