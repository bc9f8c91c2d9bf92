#!/usr/bin/env bash
# Node memory and restart time with a deep queue, for two whole builds in one script:
#   perf/backlog-memory.sh BASE_REV [COUNT]      e.g. perf/backlog-memory.sh 73501ee 200000
# For each side (BASE_REV built in a temporary worktree, then this checkout): a 1-node SQLite farm,
# one queue filled with COUNT 1 KB messages (`farm send --batch 100`), the node's RSS once filled;
# then `farm down --kill`, `farm up --detach` and the first `farm peek`: the seconds that took and
# the RSS after. Prints one line per side; the issue "Bounded memory" tracks these figures.
set -euo pipefail
base_rev=${1:?usage: perf/backlog-memory.sh BASE_REV [COUNT]}
count=${2:-200000}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base_dir=$(mktemp -d /tmp/farm-backlog-base.XXXXXX)
data_root=$(mktemp -d /tmp/farm-backlog-data.XXXXXX)
trap 'git -C "$here" worktree remove --force "$base_dir" >/dev/null 2>&1 || rm -rf "$base_dir"; rm -rf "$data_root"' EXIT

git -C "$here" worktree add --detach "$base_dir" "$base_rev" >/dev/null
echo "building $base_rev and this checkout (Release)" >&2
for dir in "$base_dir" "$here"; do
  dotnet build "$dir/src/Cli" -c Release -nologo -v q >/dev/null
  dotnet build "$dir/src/Gateway" -c Release -nologo -v q >/dev/null
done

rss_mb() { awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
node_pid() { grep -o '"pid": *[0-9]*' "$1/farm.json" | head -1 | grep -o '[0-9]*$'; }

measure() { # side dir
  local farm="dotnet $2/src/Cli/bin/Release/net10.0/farm.dll" data="$data_root/$1" connection empty filled after start restart
  export FARM_NODE_DLL="$2/src/Gateway/bin/Release/net10.0/Farm.Gateway.dll"
  connection=$($farm up --detach --port 0 --data "$data" 2>/dev/null)
  export FARM_CONNECTION="$connection"
  $farm queue create deep >/dev/null
  empty=$(rss_mb "$(node_pid "$data")")
  $farm send deep --count "$count" --size 1024 --batch 100 >/dev/null
  filled=$(rss_mb "$(node_pid "$data")")
  $farm down --kill --data "$data" >/dev/null 2>&1
  start=$(date +%s.%N)
  connection=$($farm up --detach --port 0 --data "$data" 2>/dev/null)
  FARM_CONNECTION="$connection" $farm peek deep --count 1 >/dev/null
  restart=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  after=$(rss_mb "$(node_pid "$data")")
  $farm down --kill --data "$data" >/dev/null 2>&1
  echo "$1: $count x 1 KB queued: node RSS empty $empty MB, filled $filled MB; kill + up + first peek ${restart} s, RSS after $after MB"
}
measure "base ($base_rev)" "$base_dir"
measure "this checkout" "$here"
