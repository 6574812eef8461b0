#!/usr/bin/env bash
# Issue 17's soak: 100 apps, 100k pushes, 50k runs, 5k transfers over 90 days on a virtual clock,
# through a real bgd's store and its own pruner (defaults: 30 days kept, a pass every 6 h),
# beside the same work in a store nobody prunes; then bgctl apps --json against the soaked bgd.
# The file and RSS must level off; bgctl's p99 <= 50 ms at the end.
# Usage: Benchmarks/soak.sh [bgbench-soak options, e.g. --days 30 --apps 50]   (release build)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "building release bgbench-soak and bgctl…" >&2
swift build -c release --product bgbench-soak >/dev/null
swift build -c release --product bgctl >/dev/null
bin=$(swift build -c release --show-bin-path)
"$bin/bgbench-soak" --bgctl "$bin/bgctl" "$@"
