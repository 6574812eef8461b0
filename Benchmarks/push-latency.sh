#!/usr/bin/env bash
# Issue 5's latency benchmark: POST → the app's handler at a steady rate (default 1,000 pushes/s
# for 10 s) through bgd's real gateway (HTTP/2 + TLS) to one running app, beside the POST's own
# round trip in the same run. bgd wakes the app as often as it can here (the throttle is opened
# up: the figure is the wake path's latency, not the policy's hold).
# Usage: Benchmarks/push-latency.sh [RATE] [SECONDS]   (release build)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1000}
seconds=${2:-10}
swift build -c release --product bgd >/dev/null
swift build -c release --product bgctl >/dev/null
swift build -c release --product bgbench-push >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-push-latency-XXXX)
port=22198
trap 'kill $bgd 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" --push-port $port --durability "${BGD_DURABILITY:-full}" \
    --conditions unconstrained --push-wakes-per-hour 36000000 --push-token-rate $((rate * 2)) 2>"$work/bgd.log" &
bgd=$!
until grep -q "Push gateway is listening" "$work/bgd.log" 2>/dev/null; do sleep 0.05; done
app=com.example.latency
token=$("$bin/bgctl" register $app --interval never --socket "$work/bgd.sock" -- /bin/true | awk '/^token:/ {print $2}')
openssl ecparam -genkey -name prime256v1 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$work/key.p8"
"$bin/bgctl" push keys add --key-id BENCH12345 --team-id TEAM123456 --topics $app "$work/key.p8" --socket "$work/bgd.sock" >/dev/null
"$bin/bgbench-push" --socket "$work/bgd.sock" --gateway "https://localhost:$port" --certificate "$work/state/push-gateway.crt" \
    --app $app --app-token "$token" --key "$work/key.p8" --key-id BENCH12345 --team-id TEAM123456 --rate "$rate" --seconds "$seconds"
echo "(durability: ${BGD_DURABILITY:-full}; BGD_DURABILITY=normal to compare)"
