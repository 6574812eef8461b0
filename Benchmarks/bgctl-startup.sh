#!/usr/bin/env bash
# How long a bgctl command takes as a whole process, beside curl doing the same request in the
# same run: `bgctl --version` against `curl --version` (a process that starts and prints), and
# `bgctl apps --json` against `curl --unix-socket … /v1/apps` with the operator token (the same
# listing of APPS apps from the same bgd, as bytes). Every bgctl command pays its start: the Swift runtime, the
# argument parser and the linked libraries. Medians of RUNS alternated runs, wall and CPU.
# Usage: Benchmarks/bgctl-startup.sh [APPS] [RUNS]   (defaults 100 41; release build)
set -euo pipefail
cd "$(dirname "$0")/.."
apps=${1:-100}
runs=${2:-41}
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
for product in bgd bgctl; do
    echo "building release $product…" >&2
    swift build -c release --product "$product" >/dev/null
done
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgctl-startup-XXXX)
# bgd is the one background job; its state goes with the directory.
trap 'kill %1 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" --push-port off --app-cgroups off \
    --conditions unconstrained 2>"$work/bgd.log" &
until grep -q "bgd is ready" "$work/bgd.log" 2>/dev/null; do sleep 0.1; done
for i in $(seq 1 "$apps"); do
    "$bin/bgctl" register "com.example.app$i" --interval never --quiet --socket "$work/bgd.sock" -- /bin/true >/dev/null
done

python3 - "$bin/bgctl" "$work/bgd.sock" "$runs" "$apps" <<'PY'
import os, resource, statistics, subprocess, sys, time
bgctl, sock, runs, apps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# bgctl sends the operator token bgd keeps beside its socket; curl is given the same.
token = open(sock + ".operator-token").read().strip()
pairs = {
    "start and print its version": ([bgctl, "--version"], ["curl", "--version"]),
    f"list {apps} apps as JSON": (
        [bgctl, "apps", "--json", "--socket", sock],
        ["curl", "-sf", "--unix-socket", sock, "-H", f"Authorization: Bearer {token}", "http://localhost/v1/apps"]),
}

def once(argv):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{argv[0]} exited {done.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000

for name, (ours, anchor) in pairs.items():
    once(ours); once(anchor)  # warm the page cache
    ours_runs, anchor_runs = [], []
    for _ in range(runs):
        ours_runs.append(once(ours))
        anchor_runs.append(once(anchor))
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    print(f"{name}: bgctl wall {med(ours_runs, 0):.1f} ms, cpu {med(ours_runs, 1):.1f} ms | "
          f"curl wall {med(anchor_runs, 0):.1f} ms, cpu {med(anchor_runs, 1):.1f} ms | "
          f"ratio (wall) {med(ours_runs, 0) / med(anchor_runs, 0):.1f}x")
PY
