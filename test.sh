#!/usr/bin/env bash
# Runs every test of the solution from a clean clone, installing what the tests need, and ends
# with one line: "N passed, N failed, N skipped". Exits non-zero when anything failed.
#   ./test.sh                      everything (what CI runs through .ci/run)
#   ./test.sh --filter Farm.EndToEnd   extra arguments go to `dotnet test`
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
export DOTNET_NOLOGO=1 DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_SKIP_FIRST_TIME_EXPERIENCE=1
# Tests start their own farms; a farm of the caller's must not leak into them.
unset FARM_CONNECTION FARM_HOME

log() { echo "test.sh: $*" >&2; }

apt_updated=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    log "apt-get is not available; install $* yourself"
    return 1
  fi
  if [[ $apt_updated == 0 ]]; then
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Node.js and the packages of the Node.js tests, each pinned by its package-lock.json: the grpc-js
# interop test (tests/node-client) and the Azure Service Bus SDK against the AMQP front door
# (tests/amqp-client).
setup_node() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    log "installing Node.js"
    apt_install nodejs npm
  fi
  local client
  for client in tests/node-client tests/amqp-client; do
    log "installing the packages of $client (npm ci)"
    (cd "$client" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  done
}

# PostgreSQL for the store's integration tests: installs Debian's server if there is none, then
# starts a throwaway one (scripts/throwaway-postgres.sh) and exports FARM_TEST_POSTGRES. cleanup
# stops it and deletes it all.
source scripts/throwaway-postgres.sh

setup_postgres() {
  if ! postgres_find_bin; then
    log "installing PostgreSQL"
    apt_install postgresql
    postgres_find_bin || { log "PostgreSQL was installed but initdb is nowhere to be found"; return 1; }
  fi
  log "starting a throwaway PostgreSQL ($(basename "$(dirname "$pg_bin")")) on 127.0.0.1"
  postgres_start_throwaway farm-postgres || return 1
  export FARM_TEST_POSTGRES="Host=127.0.0.1;Port=$pg_port;Username=postgres;Password=$pg_password;Database=postgres"
}

stop_postgres() {
  postgres_stop_throwaway
}

# Sums the <Counters> of every TRX file into "passed failed skipped".
count_results() {
  local dir=$1
  local files=("$dir"/*.trx "$dir"/*/*.trx)
  local existing=()
  for f in "${files[@]}"; do [[ -f $f ]] && existing+=("$f"); done
  if [[ ${#existing[@]} == 0 ]]; then
    echo "0 0 0"
    return
  fi
  grep -ho '<Counters [^>]*>' "${existing[@]}" | awk '
    function attr(name,   m) { return match($0, name "=\"[0-9]+\"") ? substr($0, RSTART + length(name) + 2, RLENGTH - length(name) - 3) + 0 : 0 }
    { passed += attr("passed"); failed += attr("failed") + attr("error") + attr("timeout") + attr("aborted"); skipped += attr("notExecuted") }
    END { print passed + 0, failed + 0, skipped + 0 }'
}

# The partition test puts nodes in network namespaces with `ip netns`, and the repeated-send test
# cuts TCP connections with `ss -K` (both iproute2); they run as root.
setup_network_tools() {
  if ! command -v ip >/dev/null 2>&1 || ! command -v ss >/dev/null 2>&1; then
    log "installing iproute2 (ip netns, ss) for the partition and connection-cut tests"
    apt_install iproute2
  fi
}

# Prometheus for the metrics test: Debian's package (not started as a service here); the test
# runs its own server with a throwaway config and data directory.
setup_prometheus() {
  if ! command -v prometheus >/dev/null 2>&1; then
    log "installing Prometheus"
    apt_install prometheus
  fi
  FARM_TEST_PROMETHEUS=$(command -v prometheus)
  export FARM_TEST_PROMETHEUS
}

# Chromium for the dashboard's browser test: Debian's package, driven by Playwright (its NuGet
# package brings its own driver; no browser download). DejaVu so screenshots show text.
setup_chromium() {
  if ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -qi dejavu; then
    log "installing Chromium and fonts for the browser test"
    apt_install chromium fonts-dejavu-core
  fi
  FARM_TEST_CHROMIUM=$(command -v chromium)
  export FARM_TEST_CHROMIUM
}

# The containers test: podman, podman-compose and the images deploy/compose.yaml runs, built here
# from nothing by deploy/build-images.sh (no image registry needed; about 5 minutes the first
# time, seconds after). podman runs the farm's containers as root.
setup_compose() {
  if [[ $(id -u) != 0 ]]; then
    log "not root: the containers test cannot run podman here (skipped, but it fails on CI)"
    return 0
  fi
  log "building the container images (deploy/build-images.sh)"
  if deploy/build-images.sh >/dev/null; then
    export FARM_TEST_COMPOSE=1
  else
    log "deploy/build-images.sh failed (above): the containers test will fail"
  fi
}

# The power-loss test: tests/power-loss/powerloss_fs.py, a FUSE file system that drops every write
# not fsynced (Debian's python3-fusepy over libfuse2; /dev/fuse, root to mount).
setup_fuse() {
  # Importing fusepy loads libfuse.so.2: it fails without either package.
  if ! /usr/bin/python3 -c 'import fusepy' >/dev/null 2>&1; then
    log "installing python3-fusepy and libfuse2 for the power-loss test"
    apt_install python3-fusepy libfuse2
  fi
}

results=""
cleanup() {
  stop_postgres
  [[ -z $results ]] || rm -rf "$results"
}
trap cleanup EXIT

setup_node
setup_postgres
setup_prometheus
setup_network_tools
setup_fuse
setup_chromium
setup_compose

log "building (Release)"
dotnet build Farm.sln -c Release -nologo -v quiet

results="$(mktemp -d)"

log "running the tests"
test_status=0
# A test that hangs for 5 minutes fails the run (with the hanging test named) instead of stalling CI.
dotnet test Farm.sln -c Release --no-build -nologo \
  --results-directory "$results" \
  --logger "trx" \
  --logger "console;verbosity=minimal" \
  --blame-hang-timeout 5m --blame-hang-dump-type none \
  "$@" || test_status=$?

read -r passed failed skipped < <(count_results "$results")
if [[ $test_status != 0 && $failed == 0 ]]; then
  log "dotnet test failed (exit $test_status) but no test reported a failure: a test host crashed or hung; counting it as one failure"
  failed=1
fi

echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed == 0 ]]
