#!/usr/bin/env bash
# Issue 6's benchmark: wake latency of a suspended app continued by bgd vs a fresh launch, and
# how precisely expiration handlers and ends of overrunning apps meet their deadlines.
# Usage: Benchmarks/lifecycle.sh [WAKES]   (default 30; release build; about a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
wakes=${1:-30}
swift build -c release --product bgd >/dev/null
swift build -c release --product bgbench-lifecycle >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-lifecycle-bench-XXXX)
trap 'kill $bgd 2>/dev/null || true; pkill -f "bgbench-lifecycle app" 2>/dev/null || true; rm -rf "$work"' EXIT
# Short background time so the precision rounds are quick; a short suspension delay so the warm
# app is suspended again soon after each wake.
"$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" --push-port off --conditions unconstrained \
    --background-time 2s --expiration-lead 0.5s --suspension-delay 0.05s --fetch-budget 30s 2>"$work/bgd.log" &
bgd=$!
until [ -S "$work/bgd.sock" ]; do sleep 0.05; done
BENCH_EXPIRATION_LEAD=0.5 "$bin/bgbench-lifecycle" "$work/bgd.sock" "$work" "$wakes"
