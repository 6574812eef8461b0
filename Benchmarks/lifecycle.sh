#!/usr/bin/env bash
# Issues 6 and 14's benchmark: wake latency of a suspended app woken by bgd vs a fresh launch,
# how precisely expiration handlers and ends of overrunning apps meet their deadlines, and the CPU
# time recorded per run against /proc. Two passes: apps in cgroups (frozen/thawed; needs root or
# a delegated cgroup), then `--app-cgroups off` (SIGSTOP/SIGCONT) for the warm wakes and CPU.
# Usage: Benchmarks/lifecycle.sh [WAKES]   (default 30; release build; about two minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
wakes=${1:-30}
swift build -c release --product bgd >/dev/null
swift build -c release --product bgbench-lifecycle >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-lifecycle-bench-XXXX)
bgd=
trap 'kill $bgd 2>/dev/null || true; pkill -f "bgbench-lifecycle app" 2>/dev/null || true; rm -rf "$work"' EXIT
# Short background time so the precision rounds are quick; a short suspension delay so the warm
# app is suspended again soon after each wake.
pass() {  # pass NAME APP-CGROUPS BENCH_ONLY
    mkdir -p "$work/$1"
    "$bin/bgd" --state-dir "$work/$1/state" --socket "$work/$1/bgd.sock" --push-port off --conditions unconstrained \
        --background-time 2s --expiration-lead 0.5s --suspension-delay 0.05s --fetch-budget 30s --app-cgroups "$2" 2>"$work/$1/bgd.log" &
    bgd=$!
    until [ -S "$work/$1/bgd.sock" ]; do sleep 0.05; done
    BENCH_ONLY=$3 BENCH_EXPIRATION_LEAD=0.5 "$bin/bgbench-lifecycle" "$work/$1/bgd.sock" "$work/$1" "$wakes"
    kill "$bgd"; wait "$bgd" 2>/dev/null || true
}
pass cgroups on warm,cold,precision,cpu
echo
pass signals off warm,cpu
