#!/usr/bin/env bash
# Compares `perf single-queue` of two whole builds (load generator, SDK and node together) in one
# script, taking turns so drift on the machine hits both sides alike:
#   perf/compare-builds.sh BASE_REV [ROUNDS]     e.g. perf/compare-builds.sh c608d2f 2
# BASE_REV is built in a temporary git worktree; the other side is this checkout as it is. Prints
# each run and the ratio (this checkout / base) of the mean received msg/s; the JSON of every run
# stays in perf/results/compare/. Whole builds, not FARM_PERF_NODE_DLL, because the wire can differ
# between the two (a node and an SDK of different revisions may not understand each other).
set -euo pipefail
base_rev=${1:?usage: perf/compare-builds.sh BASE_REV [ROUNDS]}
rounds=${2:-2}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$here/perf/results/compare"
mkdir -p "$out"
rm -f "$out"/base-*.json "$out"/this-*.json
base_dir=$(mktemp -d /tmp/farm-compare-base.XXXXXX)
trap 'git -C "$here" worktree remove --force "$base_dir" >/dev/null 2>&1 || rm -rf "$base_dir"' EXIT

git -C "$here" worktree add --detach "$base_dir" "$base_rev" >/dev/null
echo "building $base_rev and this checkout (Release)" >&2
dotnet build "$base_dir/perf/Farm.Perf" -c Release -nologo -v q >/dev/null
dotnet build "$here/perf/Farm.Perf" -c Release -nologo -v q >/dev/null

run() { # side dir round
  (cd "$2" && dotnet perf/Farm.Perf/bin/Release/net10.0/Farm.Perf.dll single-queue --no-peer --warmup 15s --duration 20s \
    --out "$out/$1-$3.json" | grep -E '^single-queue' | sed "s/^/$1 round $3: /")
}
for round in $(seq 1 "$rounds"); do
  run base "$base_dir" "$round"
  run this "$here" "$round"
done

mean() { cat "$out"/"$1"-*.json | grep -o '"msgs_per_sec": *[0-9.]*' | awk -F: '{ s += $2; n++ } END { printf "%.0f", s / n }'; }
base_mean=$(mean base)
this_mean=$(mean this)
echo "mean: base ($base_rev) $base_mean msg/s, this checkout $this_mean msg/s, ratio $(awk -v a="$this_mean" -v b="$base_mean" 'BEGIN { printf "%.3f", a / b }')"
