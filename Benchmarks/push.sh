#!/usr/bin/env bash
# Issue 5's ingress benchmark (BM8 shape): valid background pushes accepted and durably queued
# per second by bgd's gateway, measured with h2load over HTTP/2 + TLS, beside the same gateway's
# cheapest route in the same run (a path it refuses with 404 BadPath before any work).
# Usage: Benchmarks/push.sh [REQUESTS]   (default 20000; installs nghttp2-client; release build)
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-20000}
command -v h2load >/dev/null || { apt-get update -qq && apt-get install -y -qq nghttp2-client >/dev/null; }
swift build -c release --product bgd >/dev/null
swift build -c release --product bgctl >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-push-bench-XXXX)
port=22197
trap 'kill $bgd 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" --push-port $port --durability "${BGD_DURABILITY:-normal}" --conditions unconstrained \
    --push-wakes-per-hour 1 --push-token-rate 1000000 2>"$work/bgd.log" &
bgd=$!
until grep -q "Push gateway is listening" "$work/bgd.log" 2>/dev/null; do sleep 0.05; done
ctl() { "$bin/bgctl" "$@" --socket "$work/bgd.sock"; }
"$bin/bgctl" register com.example.bench --interval never --socket "$work/bgd.sock" -- /bin/true >/dev/null
openssl ecparam -genkey -name prime256v1 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$work/key.p8"
ctl push keys add --key-id BENCH12345 --team-id TEAM123456 --topics com.example.bench "$work/key.p8" >/dev/null
token=$(ctl push token com.example.bench --create)
jwt=$(XDG_CACHE_HOME="$work/cache" "$bin/bgctl" push jwt --key "$work/key.p8" --key-id BENCH12345 --team-id TEAM123456)
printf '{"aps":{"content-available":1},"content-id":1}' > "$work/payload.json"
common=(-c 16 -m 32 -t 2 -H "authorization: bearer $jwt" -H "apns-topic: com.example.bench" -H "apns-push-type: background" -H "apns-priority: 5" -d "$work/payload.json")
rate() { awk '/^finished in/ {for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) print $(i-1)}'; }
codes() { awk '/^status codes:/ {print}'; }
ours=$(h2load -n "$requests" "${common[@]}" "https://localhost:$port/3/device/$token" 2>&1)
anchor=$(h2load -n "$requests" "${common[@]}" "https://localhost:$port/noop" 2>&1)
queued=$(sqlite3 "$work/state/bgd.sqlite" "SELECT count(*) FROM push" 2>/dev/null || echo "?")
echo "swift-background push ingress — $(nproc) cores, $(uname -r), $(h2load --version 2>&1 | head -1)"
echo "ours:   $(echo "$ours" | rate) pushes/s accepted and committed ($(echo "$ours" | codes | sed 's/status codes: //'); $queued rows in the queue)"
echo "anchor: $(echo "$anchor" | rate) req/s on the same gateway's 404 route (no auth, no store)"
echo "aim: ≥ 20,000/s and ≥ 0.5× the anchor"
