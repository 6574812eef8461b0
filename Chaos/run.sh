#!/usr/bin/env bash
# A chaos campaign against a real bgd: real apps (FixtureApp), a real origin (nginx), real pushes
# (aioapns over HTTP/2 + TLS), seeded faults (kill -9, failpoints, SIGSTOP, app kills, a full state
# volume, a wall-clock jump, failing fsyncs), then a Jepsen-style check of what every party recorded.
#
#   Chaos/run.sh [--faults N] [--seed S] [--quick] [--keep] [--only KIND,KIND…]
#
# Exit status: 0 when every must-be-0 column is 0, 1 when one is not, 2 when something needed is
# missing (build first), 3 when the campaign itself broke (see the run directory). See Chaos/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

faults="" seed=1 quick=0 keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --faults) faults="$2"; shift 2 ;;
        --faults=*) faults="${1#*=}"; shift ;;
        --seed) seed="$2"; shift 2 ;;
        --seed=*) seed="${1#*=}"; shift ;;
        --quick) quick=1; shift ;;
        --keep) keep=1; shift ;;
        --only) only="$2"; shift 2 ;;
        --only=*) only="${1#*=}"; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
# --quick keeps a campaign under ~4 minutes: 24 faults unless --faults says otherwise, and a
# shorter settle (see nemesis.py).
[ -n "$faults" ] || faults=$([ "$quick" = 1 ] && echo 24 || echo 30)
case "$faults$seed" in *[!0-9]*) echo "run.sh: --faults and --seed are integers" >&2; exit 2 ;; esac

# CHAOS_BIN: a directory with copies of the binaries, so a long campaign is not changed under
# its feet by a rebuild.
BIN="${CHAOS_BIN:-$ROOT/.build/debug}"
for tool in bgd bgctl; do
    if [ ! -x "$BIN/$tool" ]; then
        echo "run.sh: $BIN/$tool is missing; run \`swift build\` first" >&2
        exit 2
    fi
done
# The fixture app (Tests/Fixtures/FixtureApp) is built as the product `bgd-fixture-app`.
app=""
for name in bgd-fixture-app FixtureApp; do [ -x "$BIN/$name" ] && { app="$BIN/$name"; break; }; done
if [ -z "$app" ]; then
    echo "run.sh: the fixture app ($BIN/bgd-fixture-app) is missing; run \`swift build\` first" >&2
    exit 2
fi

# apt-get update only when a plain install fails: it is slow and usually not needed.
install_pkg() {
    apt-get install -y -qq "$1" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$1" >/dev/null 2>&1; }
}
if ! command -v nginx >/dev/null 2>&1; then
    echo "run.sh: installing nginx (the origin for transfers)"
    install_pkg nginx || { echo "run.sh: cannot install nginx" >&2; exit 2; }
fi
# faketime is optional: without it the wall-clock fault is skipped (and the report says so).
command -v faketime >/dev/null 2>&1 || install_pkg faketime || echo "run.sh: faketime unavailable; the clock fault will be skipped"

bash Tests/Interop/setup.sh
PY="$ROOT/.build/interop/venv/bin/python"

RUN="$ROOT/.build/chaos/$seed-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RUN"/{www,nginx/tmp,downloads,uploads}
echo "run.sh: run directory $RUN"

nginx_pid="" nemesis_pid=""
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    # Only what this script started, by pid; nemesis.py ends bgd and the apps itself.
    if [ -n "$nemesis_pid" ] && kill -0 "$nemesis_pid" 2>/dev/null; then
        kill -TERM "$nemesis_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$nemesis_pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$nemesis_pid" 2>/dev/null || true
    fi
    if [ -n "$nginx_pid" ]; then
        kill -TERM "$nginx_pid" 2>/dev/null || true
        for _ in $(seq 25); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$nginx_pid" 2>/dev/null || true
    fi
    # nemesis.py unmounts its tmpfs; this is the safety net if it was killed first.
    if mountpoint -q "$RUN/state" 2>/dev/null; then umount "$RUN/state" 2>/dev/null || umount -l "$RUN/state" 2>/dev/null || true; fi
    if [ "$keep" = 0 ] && [ "$status" = 0 ]; then
        rm -rf "$RUN"
        echo "run.sh: clean run; removed $RUN (--keep keeps it)"
    else
        echo "run.sh: kept $RUN"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The origin's files: deterministic pseudo-random bytes from the seed, SHA-256 known in advance.
"$PY" - "$RUN/www" "$seed" <<'EOF'
import hashlib, json, random, sys
root, seed = sys.argv[1], sys.argv[2]
manifest = {}
for name, size in (("1m.bin", 1 << 20), ("8m.bin", 8 << 20), ("40m.bin", 40 << 20)):
    body = random.Random(f"chaos:{seed}:{name}").randbytes(size)
    with open(f"{root}/{name}", "wb") as handle:
        handle.write(body)
    manifest[name] = {"size": size, "sha256": hashlib.sha256(body).hexdigest()}
with open(f"{root}/manifest.json", "w") as handle:
    json.dump(manifest, handle, indent=1)
EOF

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# As root the workers would drop to nobody, who may not read a repository under /root or /work:
# keep them root (loopback only, static files).
user_line=""
[ "$(id -u)" = 0 ] && user_line="user root;"
cat > "$RUN/nginx/nginx.conf" <<EOF
$user_line
daemon off;
master_process on;
worker_processes 1;
pid $RUN/nginx/nginx.pid;
error_log $RUN/nginx/error.log notice;
events { worker_connections 256; }
http {
    access_log $RUN/nginx/access.log;
    client_body_temp_path $RUN/nginx/tmp/body;
    proxy_temp_path $RUN/nginx/tmp/proxy;
    fastcgi_temp_path $RUN/nginx/tmp/fastcgi;
    uwsgi_temp_path $RUN/nginx/tmp/uwsgi;
    scgi_temp_path $RUN/nginx/tmp/scgi;
    default_type application/octet-stream;
    sendfile on;
    server {
        listen 127.0.0.1:$port;
        root $RUN/www;
        # The apps' uploads (PUT): nginx writes a body to a temporary file and renames it into
        # place only once all of it arrived, so a file here is a whole upload.
        location /uploads/ {
            root $RUN;
            dav_methods PUT;
            client_max_body_size 256m;
        }
    }
}
EOF
# -e: nginx opens its default error log before reading the config; keep even that in the run dir.
nginx -p "$RUN/nginx" -e "$RUN/nginx/error.log" -c "$RUN/nginx/nginx.conf" &
nginx_pid=$!
origin="http://127.0.0.1:$port"
for _ in $(seq 50); do
    curl -sf -o /dev/null "$origin/1m.bin" && break
    kill -0 "$nginx_pid" 2>/dev/null || { echo "run.sh: nginx did not start:" >&2; tail -5 "$RUN/nginx/error.log" >&2; exit 3; }
    sleep 0.1
done
want=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["1m.bin"]["sha256"])' "$RUN/www/manifest.json")
got=$(curl -sf "$origin/1m.bin" | sha256sum | cut -d' ' -f1)
[ "$want" = "$got" ] || { echo "run.sh: the origin serves the wrong bytes ($got, not $want)" >&2; exit 3; }
echo "run.sh: origin $origin (nginx pid $nginx_pid)"

quick_flag=()
[ "$quick" = 1 ] && quick_flag=(--quick)
[ -n "${only:-}" ] && quick_flag+=(--only "$only")
# The fsync-eio fault's LD_PRELOAD shim (Chaos/fsync_eio.c); without a C compiler it is skipped.
shim_flag=()
if cc -shared -fPIC -O2 -o "$RUN/fsync_eio.so" "$ROOT/Chaos/fsync_eio.c" -ldl 2>"$RUN/fsync_eio.build.log"; then
    shim_flag=(--fsync-shim "$RUN/fsync_eio.so")
else
    echo "run.sh: cannot build Chaos/fsync_eio.c (see $RUN/fsync_eio.build.log); the fsync-eio fault will be skipped"
fi
# The campaign bounds itself; this outer limit only catches a hang in the harness itself.
limit=$((300 + faults * 20))
set +e
timeout --signal=TERM --kill-after=30 "$limit" \
    "$PY" "$ROOT/Chaos/nemesis.py" --run-dir "$RUN" --bin "$BIN" --app "$app" --origin "$origin" \
    --faults "$faults" --seed "$seed" "${quick_flag[@]}" "${shim_flag[@]}" &
nemesis_pid=$!
wait "$nemesis_pid"
nemesis_status=$?
nemesis_pid=""
set -e
if [ "$nemesis_status" != 0 ]; then
    echo "run.sh: nemesis.py ended with status $nemesis_status; checking what it recorded anyway" >&2
fi

set +e
"$PY" "$ROOT/Chaos/checker.py" "$RUN"
check_status=$?
set -e
if [ "$check_status" -gt 1 ]; then exit 3; fi
if [ "$nemesis_status" != 0 ] && [ "$check_status" = 0 ]; then exit 3; fi
exit "$check_status"
