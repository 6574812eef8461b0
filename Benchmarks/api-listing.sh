#!/usr/bin/env bash
# Probe D10: `GET /v1/apps` with 200 registered apps, 100 clients at once on bgd's Unix socket
# (closed loop, keep-alive), beside nginx serving the same bytes as a static file on a Unix
# socket in the same run, through the same client. Bar: our p99 <= 100 ms.
#
#   Benchmarks/api-listing.sh [APPS] [CLIENTS] [REQUESTS]     (defaults 200 100 3000)
set -euo pipefail
cd "$(dirname "$0")/.."
apps=${1:-200} clients=${2:-100} requests=${3:-3000}
command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx >/dev/null; }
swift build -c release --product bgd >/dev/null
swift build -c release --product bgctl >/dev/null
BIN=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-bench-XXXXXX)
trap 'kill $(cat "$work"/*.pid 2>/dev/null) 2>/dev/null; sleep 0.2; rm -rf "$work"' EXIT
sock="$work/bgd.sock"

"$BIN/bgd" --state-dir "$work/state" --socket "$sock" --push-port off --conditions unconstrained >"$work/bgd.log" 2>&1 &
echo $! >"$work/bgd.pid"
for _ in $(seq 100); do "$BIN/bgctl" status --socket "$sock" >/dev/null 2>&1 && break; sleep 0.1; done
for i in $(seq "$apps"); do
    "$BIN/bgctl" register "com.example.bench$i" --socket "$sock" --interval minimum -- /bin/true >/dev/null
done
token=$(cat "$sock.operator-token")

# The anchor: the same response body, served by nginx from a file on a Unix socket.
curl -s --unix-socket "$sock" -H "Authorization: Bearer $token" http://bgd/v1/apps >"$work/apps.json"
cat >"$work/nginx.conf" <<CONF
worker_processes 1;
$( [ "$(id -u)" = 0 ] && echo "user root;" )
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    server { listen unix:$work/nginx.sock; location / { root $work; default_type application/json; } }
}
CONF
nginx -c "$work/nginx.conf" -p "$work"
for _ in $(seq 50); do [ -S "$work/nginx.sock" ] && break; sleep 0.1; done

echo "swift-background API listing — $(nproc) cores, $(uname -r); $apps apps, $clients clients, $requests requests, $(wc -c <"$work/apps.json") bytes a response"
for round in 1 2 3; do
    ours=$(python3 Benchmarks/uds_load.py "$sock" /v1/apps "$clients" "$requests" "$token")
    anchor=$(python3 Benchmarks/uds_load.py "$work/nginx.sock" /apps.json "$clients" "$requests")
    echo "round $round  bgd GET /v1/apps: $ours"
    echo "round $round  nginx static file: $anchor"
done
