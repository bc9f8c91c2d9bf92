#!/usr/bin/env bash
# perf/gc-pauses.sh PID [SECONDS] [--each] : how often a running .NET process collects, by
# generation, and how long each collection paused it (perf/README, "GC pauses of a node").
set -euo pipefail
pid=${1:?usage: perf/gc-pauses.sh PID [SECONDS] [--each]}
seconds=${2:-30}
each=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
trace_tool=$("$here/dotnet-trace-path.sh")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The runtime's GC keyword at the informational level: a start, end, suspension and restart per collection.
"$trace_tool" collect -p "$pid" --clrevents gc --clreventlevel informational \
  --duration "$(date -u -d "@$seconds" +00:%H:%M:%S)" -o "$out/t.nettrace" >/dev/null
dotnet run -c Release --project "$here/Farm.GcPauses" -- "$out/t.nettrace" $each
