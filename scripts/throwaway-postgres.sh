# A throwaway PostgreSQL server for test.sh and perf/run.sh (sourced, not run): a fresh data
# directory under a temp dir, a free port on 127.0.0.1 only, fsync on (durability is what the
# tests check), password auth, enough connections for parallel test classes. Installing the
# server is the caller's (each logs and fails its own way).
#   postgres_find_bin || <install postgresql>; postgres_find_bin
#   postgres_start_throwaway PREFIX      sets pg_dir, pg_port, pg_password; non-zero on failure
#   postgres_stop_throwaway              stops it and deletes it all (safe to call when not started)

pg_dir=""
pg_bin=""
pg_port=""
pg_password=""
pg_as=()  # the command prefix that runs the server as the postgres user when we are root

postgres_find_bin() {
  local initdb
  initdb=$(command -v initdb 2>/dev/null || true)
  if [[ -z $initdb ]]; then
    # Debian keeps the server's binaries off the PATH; take the newest installed version.
    initdb=$(ls -1d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)
  fi
  [[ -n $initdb && -x $initdb ]] || return 1
  pg_bin=$(dirname "$(readlink -f "$initdb")")
}

postgres_port_is_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

postgres_start_throwaway() {
  local prefix=${1:-farm-postgres}
  # The server refuses to run as root; as root, run it as the postgres user the package created.
  if [[ $(id -u) == 0 ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    pg_as=(runuser -u postgres --)
  fi

  pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/$prefix.XXXXXX")
  chmod 755 "$pg_dir"
  mkdir "$pg_dir/data" "$pg_dir/socket"
  pg_password=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
  printf '%s\n' "$pg_password" >"$pg_dir/password"
  chmod 600 "$pg_dir/password"
  if [[ $(id -u) == 0 ]]; then chown -R postgres: "$pg_dir"; fi

  pg_port=54329
  while ! postgres_port_is_free "$pg_port"; do
    pg_port=$((pg_port + 1))
    if ((pg_port > 54429)); then echo "no free port for PostgreSQL in 54329-54429" >&2; return 1; fi
  done

  "${pg_as[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --pwfile="$pg_dir/password" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --no-locale >"$pg_dir/initdb.log" 2>&1 \
    || { cat "$pg_dir/initdb.log" >&2; return 1; }
  "${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$pg_dir/socket -c fsync=on -c max_connections=300" \
    start >/dev/null || { cat "$pg_dir/server.log" >&2; return 1; }
}

postgres_stop_throwaway() {
  [[ -n $pg_dir ]] || return 0
  if [[ -f $pg_dir/data/postmaster.pid ]]; then
    "${pg_as[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$pg_dir"
  pg_dir=""
}
