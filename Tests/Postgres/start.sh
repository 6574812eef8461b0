#!/usr/bin/env bash
# Starts a throwaway PostgreSQL on loopback for the relay's tests (PostgresRelayTests), and
# prints the URL they read from BGRELAY_TEST_POSTGRES. PostgreSQL refuses to run as root: the
# cluster is made and run by the unprivileged user `nobody`, in a temporary directory. Idempotent
# while it runs (the same directory and port answer again).
#   eval "$(Tests/Postgres/start.sh)"     # exports BGRELAY_TEST_POSTGRES
#   Tests/Postgres/start.sh --stop
#   Tests/Postgres/start.sh --restart SECONDS   # crash it (immediate stop), down SECONDS, start again
# BGRELAY_TEST_POSTGRES_PORT and BGRELAY_TEST_POSTGRES_DIR choose another server (a test that
# restarts PostgreSQL runs its own, not the one other tests share).
set -euo pipefail
port=${BGRELAY_TEST_POSTGRES_PORT:-55432}
dir=${BGRELAY_TEST_POSTGRES_DIR:-/tmp/bgrelay-postgres}
bin=$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1 || true)")
if [ ! -x "$bin/initdb" ]; then
    apt-get update -qq >&2 && apt-get install -y -qq postgresql >&2
    bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | tail -1)")
fi
as_owner=()
if [ "$(id -u)" = 0 ]; then as_owner=(setpriv --reuid=nobody --regid=nogroup --clear-groups); fi
start() {
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on" start >&2
}
if [ "${1:-}" = --stop ]; then
    [ -d "$dir/data" ] && "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >&2 || true
    exit 0
fi
if [ "${1:-}" = --restart ]; then
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >&2
    sleep "${2:-0}"
    start
    exit 0
fi
if ! "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown nobody:nogroup "$dir"
    echo bgrelay > "$dir/password"
    "${as_owner[@]}" "$bin/initdb" -D "$dir/data" -U bgrelay --pwfile="$dir/password" -A scram-sha-256 >/dev/null
    start
    PGPASSWORD=bgrelay psql -h 127.0.0.1 -p "$port" -U bgrelay -d postgres -qc "CREATE DATABASE bgrelay" >&2
fi
echo "export BGRELAY_TEST_POSTGRES=postgres://bgrelay:bgrelay@127.0.0.1:$port/bgrelay"
