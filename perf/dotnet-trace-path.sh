#!/usr/bin/env bash
# perf/dotnet-trace-path.sh : prints the path of dotnet-trace, installing it as a global tool when
# missing (for perf/work-items.sh and perf/gc-pauses.sh).
set -euo pipefail
trace_tool=$(command -v dotnet-trace || echo "$HOME/.dotnet/tools/dotnet-trace")
if [ ! -x "$trace_tool" ]; then
  dotnet tool install -g dotnet-trace >/dev/null
  trace_tool="$HOME/.dotnet/tools/dotnet-trace"
fi
echo "$trace_tool"
