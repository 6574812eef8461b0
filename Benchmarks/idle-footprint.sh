#!/usr/bin/env bash
# BM11: bgd idle with 50 registered apps (next wake >= 10 min away) versus cron, measured in the
# same run: resident memory, and wakeups (voluntary context switches, all threads) per minute.
# Usage: Benchmarks/idle-footprint.sh [SECONDS]   (default 60; needs a release build, made here)
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-60}
command -v cron >/dev/null || { apt-get update -qq && apt-get install -y -qq cron >/dev/null; }
swift build -c release --product bgd >/dev/null
swift build -c release --product bgctl >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-bench-XXXX)
trap 'kill $bgd $cronpid 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" 2>"$work/bgd.log" &
bgd=$!
until grep -q "bgd is ready" "$work/bgd.log" 2>/dev/null; do sleep 0.1; done
for i in $(seq 1 50); do
    "$bin/bgctl" register "com.example.app$i" --interval 1h --quiet --socket "$work/bgd.sock" -- /bin/true >/dev/null
done
cron -f -L 0 &
cronpid=$!
sleep 5  # let both settle after start-up

rss() { awk '/^VmRSS/ {print $2}' /proc/"$1"/status; }
per_minute() { echo "scale=1; $1 * 60 / $window" | bc; }
if command -v perf >/dev/null && perf stat -e context-switches -p $$ -- true >/dev/null 2>&1; then
    # perf counts every thread's switches, those that exit during the window too.
    count() { perf stat -x, -e context-switches -p "$1" -- sleep "$window" 2>&1 | awk -F, '/context-switches/ {print $1}'; }
    count $bgd > "$work/bgd.count" &
    p1=$!
    count $cronpid > "$work/cron.count" &
    p2=$!
    wait $p1 $p2
    bw=$(cat "$work/bgd.count"); cw=$(cat "$work/cron.count"); how="perf context-switches"
    [[ "$bw" =~ ^[0-9]+$ ]] || bw=0
    [[ "$cw" =~ ^[0-9]+$ ]] || cw=0
else
    # Without perf: voluntary switches summed over the threads alive at both ends (undercounts
    # threads that come and go).
    switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s}'; }
    b0=$(switches $bgd); c0=$(switches $cronpid)
    sleep "$window"
    bw=$(( $(switches $bgd) - b0 )); cw=$(( $(switches $cronpid) - c0 )); how="voluntary switches of live threads"
fi
printf '%-28s %10s %18s\n' "daemon (idle ${window}s)" "RSS (MB)" "wakeups / min"
printf '%-28s %10.1f %18s\n' "bgd, 50 apps" "$(echo "$(rss $bgd) / 1024" | bc -l)" "$(per_minute $bw)"
printf '%-28s %10.1f %18s\n' "cron (anchor, same run)" "$(echo "$(rss $cronpid) / 1024" | bc -l)" "$(per_minute $cw)"
echo "(wakeups counted as $how)"
echo "threads in bgd: $(ls /proc/$bgd/task | wc -l); $(nproc) cores; $(uname -r)"
