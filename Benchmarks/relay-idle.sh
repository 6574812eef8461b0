#!/usr/bin/env bash
# BM21: an idle bgrelay holding one device — a real bgd connected over the uplink, its app's
# device token registered in the relay's store — against nginx idle (master + one worker, the
# anchor for an idle server) and the same relay with BGRELAY_DISPATCH=1 (Swift's default
# executor: its store on GRDB's async API, its naps on Task.sleep, its signals on a dispatch
# source, as before session 22) and with BGRELAY_KEEP_CODE_PAGES=1 (its code pages kept once
# quiet, as before session 23), all in the same run. Wakeups are context switches of every
# thread per minute, resident memory in MB. bgd's own keep-alive on the uplink (an empty line
# every 270 s) is in the relay's count, as it would be in production: each is a round, so the
# relay faults some code back for it and gives it back 30 s later.
# Usage: Benchmarks/relay-idle.sh [SECONDS]   (default 300; release builds, made here)
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-300}
command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx >/dev/null; }
for product in bgd bgctl bgrelay; do swift build -c release --product $product >/dev/null; done
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgrelay-idle-XXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

# A relay named $1 (environment in $2: "" or BGRELAY_DISPATCH=1) with a bgd connected to it; its
# pid in $relay.
relay_with_device() {
    local name=$1 environment=$2
    env $environment "$bin/bgrelay" --state-dir "$work/$name" --port 0 --uplink-port 0 >"$work/$name.out" 2>&1 &
    relay=$!
    pids+=($relay)
    until grep -q "bgrelay: providers on" "$work/$name.out" 2>/dev/null; do sleep 0.1; done
    local uplink
    uplink=$(sed -n 's/.*devices on [^:]*:\([0-9]*\).*/\1/p' "$work/$name.out")
    "$bin/bgd" --state-dir "$work/$name-bgd" --socket "$work/$name.sock" --push-port off \
        --push-relay "https://localhost:$uplink" --push-relay-ca "$work/$name/push-gateway.crt" >"$work/$name-bgd.log" 2>&1 &
    pids+=($!)
    until grep -q "bgd is ready" "$work/$name-bgd.log" 2>/dev/null; do sleep 0.1; done
    "$bin/bgctl" register com.example.idle --interval 1h --quiet --socket "$work/$name.sock" -- /bin/true >/dev/null
    "$bin/bgctl" push token com.example.idle --create --socket "$work/$name.sock" >/dev/null
    until "$bin/bgctl" push relay status --socket "$work/$name.sock" 2>/dev/null | grep -q "connected to"; do sleep 0.2; done
}
relay_with_device quiet ""
quiet=$relay
relay_with_device dispatch BGRELAY_DISPATCH=1
dispatch=$relay
relay_with_device kept BGRELAY_KEEP_CODE_PAGES=1
kept=$relay

mkdir -p "$work/nginx/logs"
nginx_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    server { listen 127.0.0.1:$nginx_port; return 204; }
}
EOF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -g "daemon off;" &
nginx_master=$!
pids+=($nginx_master)
sleep 35  # let everything settle after start-up

# Voluntary and involuntary switches of every thread of a process and its children (nginx's worker).
switches() {
    local all=("$1" $(pgrep -P "$1" || true)) total=0
    for pid in "${all[@]}"; do
        total=$((total + $(cat /proc/"$pid"/task/*/status 2>/dev/null \
            | awk '/ctxt_switches/ {s += $2} END {print s + 0}')))
    done
    echo $total
}
rss() {
    local all=("$1" $(pgrep -P "$1" || true)) total=0
    for pid in "${all[@]}"; do total=$((total + $(awk '/^VmRSS/ {print $2}' /proc/"$pid"/status))); done
    echo "scale=1; $total / 1024" | bc
}
before=("$(switches $quiet)" "$(switches $dispatch)" "$(switches $nginx_master)" "$(switches $kept)")
sleep "$window"
after=("$(switches $quiet)" "$(switches $dispatch)" "$(switches $nginx_master)" "$(switches $kept)")
per_minute() { echo "scale=1; ($2 - $1) * 60 / $window" | bc; }
printf '%-44s %8s %14s\n' "idle ${window}s" "RSS MB" "wakeups / min"
printf '%-44s %8s %14s\n' "bgrelay holding one device" "$(rss $quiet)" "$(per_minute "${before[0]}" "${after[0]}")"
printf '%-44s %8s %14s\n' "bgrelay, BGRELAY_DISPATCH=1 (as before)" "$(rss $dispatch)" \
    "$(per_minute "${before[1]}" "${after[1]}")"
printf '%-44s %8s %14s\n' "bgrelay, BGRELAY_KEEP_CODE_PAGES=1" "$(rss $kept)" \
    "$(per_minute "${before[3]}" "${after[3]}")"
printf '%-44s %8s %14s\n' "nginx, master + 1 worker (anchor)" "$(rss $nginx_master)" \
    "$(per_minute "${before[2]}" "${after[2]}")"
echo "(context switches, voluntary and involuntary, of the threads alive at both ends; $(nproc) cores)"
