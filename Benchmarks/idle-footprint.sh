#!/usr/bin/env bash
# BM11: bgd idle with 50 registered apps (next wake >= 10 min away) versus cron and a Swift
# program that only awaits one Task.sleep of an hour, measured in the same run: resident memory,
# wakeups (context switches, all threads) per minute, and bgd's voluntary switches per thread.
# Two bgds side by side: one with only its socket, one with the push gateway and the dashboard
# listening too. Bar (issue 17): <= 1 wakeup a minute (cron's), <= 20 MB.
# A fourth bgd serves the dashboard with one tab open (`curl -N` on /events): what its
# keep-alive comment (every 30 s while a tab is open) costs.
# A third bgd runs with BGD_KEEP_CODE_PAGES=1 — without giving its code pages back once quiet
# (Sources/BackgroundDaemon/Runtime/IdleCodePages.swift) — for the RSS that costs; the memory
# columns split RSS into what the process alone holds (anonymous and dirty pages) and its
# proportional share of everything (PSS).
# The Swift anchor is the floor of any Swift Concurrency process on Linux that lets libdispatch
# run its tasks: libdispatch's worker-pool monitor (a 1 s timer on its manager thread, started
# with the first worker thread) wakes it every second. bgd avoids it (Sources/bgd/main.swift);
# BGD_DISPATCH=1 in the environment brings it back, to compare.
# Usage: Benchmarks/idle-footprint.sh [SECONDS]   (default 600; needs a release build, made here)
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-600}
command -v cron >/dev/null || { apt-get update -qq && apt-get install -y -qq cron >/dev/null; }
swift build -c release --product bgd >/dev/null
swift build -c release --product bgctl >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-bench-XXXX)
trap 'kill $bgd $listening $keeping $tabbed $tab $cronpid $probe 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/probe.swift" <<'SWIFT'
@main struct Probe { static func main() async throws { try await Task.sleep(for: .seconds(86400)) } }
SWIFT
swiftc -O -parse-as-library "$work/probe.swift" -o "$work/probe"
"$work/probe" &
probe=$!

"$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" --push-port off 2>"$work/bgd.log" &
bgd=$!
"$bin/bgd" --state-dir "$work/state2" --socket "$work/bgd2.sock" --push-port 0 --http 127.0.0.1:0 \
    2>"$work/bgd2.log" &
listening=$!
BGD_KEEP_CODE_PAGES=1 "$bin/bgd" --state-dir "$work/state3" --socket "$work/bgd3.sock" --push-port off 2>"$work/bgd3.log" &
keeping=$!
tabport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/bgd" --state-dir "$work/state4" --socket "$work/bgd4.sock" --push-port off --http "127.0.0.1:$tabport" \
    2>"$work/bgd4.log" &
tabbed=$!
until grep -q "bgd is ready" "$work/bgd.log" 2>/dev/null && grep -q "bgd is ready" "$work/bgd2.log" 2>/dev/null \
    && grep -q "bgd is ready" "$work/bgd3.log" 2>/dev/null && grep -q "bgd is ready" "$work/bgd4.log" 2>/dev/null; do
    sleep 0.1
done
curl -sN -H "Authorization: Bearer $(cat "$work/state4/dashboard-token")" "http://127.0.0.1:$tabport/events" \
    > "$work/tab.out" &
tab=$!
for i in $(seq 1 50); do
    for sock in "$work/bgd.sock" "$work/bgd2.sock" "$work/bgd3.sock" "$work/bgd4.sock"; do
        "$bin/bgctl" register "com.example.app$i" --interval 1h --quiet --socket "$sock" -- /bin/true >/dev/null
    done
done
cron -f -L 0 &
cronpid=$!
sleep 35  # let them settle after start-up (and give their code pages back: 30 s after the last registration)

rss() { awk '/^VmRSS/ {print $2}' /proc/"$1"/status; }
# "tid name voluntary-switches" for each thread, sorted by tid (for join).
thread_switches() {
    for t in /proc/"$1"/task/*; do
        echo "$(basename "$t") $(tr -d ' ' < "$t/comm") $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")"
    done | sort
}
per_minute() { echo "scale=1; $1 * 60 / $window" | bc; }
if command -v perf >/dev/null && perf stat -e context-switches -p $$ -- true >/dev/null 2>&1; then
    # perf counts every thread's switches, those that exit during the window too.
    count() { perf stat -x, -e context-switches -p "$1" -- sleep "$window" 2>&1 | awk -F, '/context-switches/ {print $1}'; }
    count $bgd > "$work/bgd.count" &
    p1=$!
    count $listening > "$work/bgd2.count" &
    p4=$!
    count $tabbed > "$work/bgd4.count" &
    p5=$!
    count $cronpid > "$work/cron.count" &
    p2=$!
    count $probe > "$work/probe.count" &
    p3=$!
    threads_before=$(thread_switches $bgd)
    wait $p1 $p2 $p3 $p4 $p5
    threads_after=$(thread_switches $bgd)
    bw=$(cat "$work/bgd.count"); cw=$(cat "$work/cron.count"); pw=$(cat "$work/probe.count"); how="perf context-switches"
    lw=$(cat "$work/bgd2.count"); tw=$(cat "$work/bgd4.count")
    [[ "$bw" =~ ^[0-9]+$ ]] || bw=0
    [[ "$lw" =~ ^[0-9]+$ ]] || lw=0
    [[ "$tw" =~ ^[0-9]+$ ]] || tw=0
    [[ "$cw" =~ ^[0-9]+$ ]] || cw=0
    [[ "$pw" =~ ^[0-9]+$ ]] || pw=0
else
    # Without perf: voluntary switches summed over the threads alive at both ends (undercounts
    # threads that come and go).
    switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s}'; }
    b0=$(switches $bgd); c0=$(switches $cronpid); p0=$(switches $probe); l0=$(switches $listening)
    t0=$(switches $tabbed)
    threads_before=$(thread_switches $bgd)
    sleep "$window"
    threads_after=$(thread_switches $bgd)
    bw=$(( $(switches $bgd) - b0 )); lw=$(( $(switches $listening) - l0 )); cw=$(( $(switches $cronpid) - c0 )); pw=$(( $(switches $probe) - p0 ))
    tw=$(( $(switches $tabbed) - t0 ))
    how="voluntary switches of live threads"
fi
mb() { awk -v f="$2" '$1 == f":" {printf "%.1f", $2 / 1024}' /proc/"$1"/smaps_rollup; }
row() {  # row LABEL PID WAKEUPS
    printf '%-30s %8.1f %8s %8s %8s %14s\n' "$1" "$(echo "$(rss $2) / 1024" | bc -l)" "$(mb $2 Pss)" \
        "$(mb $2 Anonymous)" "$(mb $2 Private_Dirty)" "$3"
}
printf '%-30s %8s %8s %8s %8s %14s\n' "daemon (idle ${window}s)" "RSS MB" "PSS MB" "anon MB" "dirty MB" "wakeups / min"
row "bgd, 50 apps" $bgd "$(per_minute $bw)"
row "bgd + gateway + dashboard" $listening "$(per_minute $lw)"
row "bgd + dashboard, a tab open" $tabbed "$(per_minute $tw)"
row "bgd keeping its code pages" $keeping "-"
row "cron (anchor, same run)" $cronpid "$(per_minute $cw)"
row "Swift, one Task.sleep (floor)" $probe "$(per_minute $pw)"
echo "the first bgd's threads (name: voluntary switches per minute; threads that came or went are left out):"
join <(echo "$threads_before") <(echo "$threads_after") \
    | awk -v w="$window" '{ d = $5 - $3; if (d > 0) printf "  %-7s %-22s %6.1f\n", $1, $2, d * 60 / w }' | sort -k3 -rn
echo "(wakeups counted as $how; the open tab heard $(grep -c '^: keep-alive' "$work/tab.out") keep-alives)"
echo "threads in bgd: $(ls /proc/$bgd/task | wc -l); $(nproc) cores; $(uname -r)"
if command -v strace >/dev/null; then
    echo "what the first bgd asked of the kernel in 60 s more (strace -f -c; nothing listed: no syscalls at all):"
    timeout -s INT 60 strace -f -c -p "$bgd" 2>&1 | grep -v "^strace: Process" || true
fi
