#!/usr/bin/env bash
# Issue 19's figures, side by side in one run (release builds, h2load over HTTP/2 + TLS):
#   1. valid pushes/s accepted by bgd's own gateway (the single-node anchor), by one bgrelay node
#      on SQLite (a device on HTTP/2, then one on lines as bgd holds it), one node on PostgreSQL,
#      and three nodes sharing that PostgreSQL — each with a device connected that acknowledges
#      every push;
#   2. provider POST → device acknowledgement through the relay at a constant 1,000/s (on one
#      SQLite node, with the device on HTTP/2 and on lines; and the push accepted by one
#      PostgreSQL node, the device on another): p50 / p99 / p99.9 from the relay's own
#      accepted/ended timestamps;
#      and provider POST → the app's handler through a real bgd on one SQLite node;
#   3. the relay's memory per idle device uplink (each its own TCP + TLS connection), from its
#      RSS before and after 1,000 more, once 200 are connected (bgbench-relay, a light device
#      simulator);
#   4. the floor under 3: the same 1,000 on TLS + HTTP/2 served by SwiftNIO alone;
#   5. under that: lines straight on TLS, and on plain TCP (what the socket and channel cost).
# Usage: Benchmarks/relay.sh [--idle-only | --e2e-only] [REQUESTS] [IDLE]   (default 20000 and 1000; installs nghttp2-client,
# starts PostgreSQL with Tests/Postgres/start.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n "$(ulimit -Hn)"  # a thousand TLS connections each side
# --idle-only: steps 3-5 alone (the memory per idle device, ~5 min).
idle_only=""
if [ "${1:-}" = --idle-only ]; then idle_only=1; shift; fi
# --e2e-only: step 2b alone (provider POST → the app's handler through a relay, ~1 min).
e2e_only=""
if [ "${1:-}" = --e2e-only ]; then e2e_only=1; shift; fi
requests=${1:-20000}
idle=${2:-1000}
command -v h2load >/dev/null || { apt-get update -qq && apt-get install -y -qq nghttp2-client >/dev/null; }
[ -n "$e2e_only" ] || eval "$(bash Tests/Postgres/start.sh)"
for product in bgd bgctl bgrelay bgbench-relay bgbench-uplink-floor bgbench-push; do swift build -c release --product $product >/dev/null; done
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgrelay-bench-XXXX)
pids=()
devices=()
cleanup() {
    for fd in "${devices[@]}"; do exec {fd}>&- 2>/dev/null || true; done
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
app=com.example.bench
openssl ecparam -genkey -name prime256v1 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$work/key.p8"
jwt=$(XDG_CACHE_HOME="$work/cache" "$bin/bgctl" push jwt --key "$work/key.p8" --key-id BENCH12345 --team-id TEAM123456)
printf '{"aps":{"content-available":1},"content-id":1}' > "$work/payload.json"
h2() { h2load "$@" -H "authorization: bearer $jwt" -H "apns-topic: $app" -H "apns-push-type: background" \
    -H "apns-priority: 5" -d "$work/payload.json" 2>&1; }
rate() { awk '/^finished in/ {for (i = 1; i <= NF; i++) if ($i ~ /req\/s/) print $(i-1)}'; }
codes() { awk '/^status codes:/ {sub(/status codes: /, ""); print}'; }
makedb() {
    local name="bench_$1_$$"
    PGPASSWORD=bgrelay psql -h 127.0.0.1 -p 55432 -U bgrelay -d postgres -qc "CREATE DATABASE $name" >/dev/null
    echo "${BGRELAY_TEST_POSTGRES%/*}/$name"
}

# Starts a relay node: relay NAME [bgrelay options]; sets provider_port and uplink_port.
relay() {
    local name=$1; shift
    mkdir -p "$work/$name"
    [ -f "$work/cert/push-gateway.crt" ] && cp "$work/cert/"push-gateway.* "$work/$name/"
    "$bin/bgrelay" --state-dir "$work/$name" --port 0 --uplink-port 0 --device-rate 1000000 --provider-rate 1000000 --enrollment-rate 1000000 --node "$name" "$@" \
        > "$work/$name.out" 2>&1 &
    pids+=($!)
    until grep -q "^bgrelay: providers on" "$work/$name.out" 2>/dev/null; do sleep 0.05; done
    provider_port=$(sed -n 's/^bgrelay: providers on [^:]*:\([0-9]*\),.*/\1/p' "$work/$name.out")
    uplink_port=$(sed -n 's/.*devices on [^:]*:\([0-9]*\)$/\1/p' "$work/$name.out")
    if [ ! -f "$work/cert/push-gateway.crt" ]; then mkdir -p "$work/cert"; cp "$work/$name/"push-gateway.* "$work/cert/"; fi
}
# Connects a device that acknowledges every push, for token $2, to the uplink at port $1; as an
# HTTP/2 stream, or with $3 = line-device as lines straight on TLS (bgd's uplink).
device() {
    local fifo="$work/device.$1.in"
    mkfifo "$fifo"
    "$bin/bgbench-relay" "${3:-device}" "https://localhost:$1" "$work/cert/push-gateway.crt" "$2" < "$fifo" > "$work/device.$1.out" 2>&1 &
    pids+=($!)
    exec {fd}> "$fifo"
    devices+=($fd)
    until grep -q ready "$work/device.$1.out" 2>/dev/null; do sleep 0.05; done
}
token=$(printf 'be%.0s' $(seq 32))
common=(-n "$requests" -c 16 -m 32 -t 2)

echo "swift-background push relay — $(nproc) cores, $(uname -r), $(h2load --version 2>&1 | head -1), PostgreSQL $(psql --version 2>/dev/null | awk '{print $3}')"

# The p50 / p99 / p99.9 of latencies in ms, one a line on standard input.
cat > "$work/latency.py" <<'PY'
import sys, statistics
d = sorted(float(x) for x in sys.stdin.read().split())
q = lambda p: d[min(len(d) - 1, int(p * len(d)))]
print(f"p50 {q(0.5):.2f}, p99 {q(0.99):.2f}, p99.9 {q(0.999):.2f} ms ({len(d)} pushes delivered)" if d else "no delivery")
PY

if [ -z "$idle_only" ] && [ -z "$e2e_only" ]; then
# 1. Throughput.
"$bin/bgd" --state-dir "$work/bgd" --socket "$work/bgd.sock" --push-port 0 --durability normal --conditions unconstrained \
    --push-wakes-per-hour 1 --push-token-rate 1000000 2> "$work/bgd.log" &
pids+=($!)
until grep -q "Push gateway is listening" "$work/bgd.log" 2>/dev/null; do sleep 0.05; done
bgd_port=$(sed -n 's/.*port=\([0-9]*\).*Push gateway is listening.*/\1/p' "$work/bgd.log" | head -1)
ctl() { "$bin/bgctl" "$@" --socket "$work/bgd.sock"; }
"$bin/bgctl" register $app --interval never --socket "$work/bgd.sock" -- /bin/true >/dev/null
ctl push keys add --key-id BENCH12345 --team-id TEAM123456 --topics $app "$work/key.p8" >/dev/null
bgd_token=$(ctl push token $app --create)
gateway=$(h2 "${common[@]}" "https://localhost:$bgd_port/3/device/$bgd_token")
echo "bgd's own gateway (anchor):        $(echo "$gateway" | rate) pushes/s ($(echo "$gateway" | codes))"

relay sqlite
"$bin/bgrelay" keys add --state-dir "$work/sqlite" --key-id BENCH12345 --team-id TEAM123456 --topics $app "$work/key.p8" >/dev/null
device "$uplink_port" "$token"
one=$(h2 "${common[@]}" "https://localhost:$provider_port/3/device/$token")
sqlite_uplink=$uplink_port
echo "bgrelay, 1 node, SQLite:           $(echo "$one" | rate) pushes/s ($(echo "$one" | codes))"
# The same with the device on lines (what bgd holds): its session has no task of its own between
# bursts, so this row is where a costlier round would show.
relay sqlite-lines
"$bin/bgrelay" keys add --state-dir "$work/sqlite-lines" --key-id BENCH12345 --team-id TEAM123456 --topics $app "$work/key.p8" >/dev/null
device "$uplink_port" "$token" line-device
lines=$(h2 "${common[@]}" "https://localhost:$provider_port/3/device/$token")
echo "bgrelay, 1 node, SQLite, lines:    $(echo "$lines" | rate) pushes/s ($(echo "$lines" | codes))"

db1=$(makedb one)
relay pg1 --database "$db1"
"$bin/bgrelay" keys add --database "$db1" --key-id BENCH12345 --team-id TEAM123456 --topics $app "$work/key.p8" >/dev/null
device "$uplink_port" "$token"
pg=$(h2 "${common[@]}" "https://localhost:$provider_port/3/device/$token")
echo "bgrelay, 1 node, PostgreSQL:       $(echo "$pg" | rate) pushes/s ($(echo "$pg" | codes))"

db3=$(makedb three)
ports=()
for n in a b c; do relay "pg3$n" --database "$db3"; ports+=("$provider_port"); done
"$bin/bgrelay" keys add --database "$db3" --key-id BENCH12345 --team-id TEAM123456 --topics $app "$work/key.p8" >/dev/null
device "$uplink_port" "$token"
start=$(date +%s.%N)
for port in "${ports[@]}"; do
    h2 -n $((requests / 3)) -c 6 -m 32 -t 1 "https://localhost:$port/3/device/$token" > "$work/h2.$port" &
done
wait_h2() { for port in "${ports[@]}"; do while ! grep -q "^finished in" "$work/h2.$port" 2>/dev/null; do sleep 0.05; done; done; }
wait_h2
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
ok=$(cat "$work"/h2.* | awk '/^status codes:/ {sum += $3} END {print sum}')
echo "bgrelay, 3 nodes, one PostgreSQL:  $(echo "scale=0; $ok / $elapsed" | bc) pushes/s ($ok × 2xx in ${elapsed%???????} s, 3 h2load at once)"

# 2. Latency at 1,000/s, POST to one node → acknowledgement by the device: on the SQLite node,
#    and through PostgreSQL (accepted by node a, the device on node c, LISTEN/NOTIFY between).
paced() {  # paced PORT: 10,000 pushes at 1,000/s
    h2load -n 10000 -c 10 --rps 100 -m 1 -t 1 -H "authorization: bearer $jwt" -H "apns-topic: $app" \
        -H "apns-push-type: background" -H "apns-priority: 5" -d "$work/payload.json" \
        "https://localhost:$1/3/device/$token" > "$work/latency.h2" 2>&1
}
pg3() { PGPASSWORD=bgrelay psql -h 127.0.0.1 -p 55432 -U bgrelay -d "${db3##*/}" -tAc "$1"; }
for node in sqlite sqlite-lines; do
    sqlite_db="$work/$node/relay.sqlite"
    sqlite3 -cmd ".timeout 10000" "$sqlite_db" "DELETE FROM push"
    paced "$(sed -n 's/^bgrelay: providers on [^:]*:\([0-9]*\),.*/\1/p' "$work/$node.out")"
    for _ in $(seq 100); do [ "$(sqlite3 -cmd ".timeout 10000" "$sqlite_db" "SELECT count(*) FROM push WHERE state = 'pending'")" = 0 ] && break; sleep 0.1; done
    echo "POST → device ack at 1,000/s, 1 node, SQLite$([ $node = sqlite-lines ] && echo ", lines" || echo "       ") (ms): $(sqlite3 -cmd ".timeout 10000" "$sqlite_db" \
        "SELECT (julianday(endedAt) - julianday(acceptedAt)) * 86400000 FROM push WHERE state = 'delivered'" | python3 "$work/latency.py")"
done
pg3 "TRUNCATE relay_push" >/dev/null
paced "${ports[0]}"
for _ in $(seq 300); do [ "$(pg3 "SELECT count(*) FROM relay_push WHERE state = 'pending'")" = 0 ] && break; sleep 0.1; done
echo "POST → device ack at 1,000/s, 2 of 3 nodes, PostgreSQL (ms): $(pg3 \
    "SELECT extract(epoch FROM ended_at - accepted_at) * 1000 FROM relay_push WHERE state = 'delivered'" | python3 "$work/latency.py")"
fi

if [ -z "$idle_only" ]; then
# 2b. End to end, as the issue asks: provider POST to a relay node → the app's handler, at a
#     constant 1,000/s — a real bgd holding its uplink to a fresh SQLite node (lines on TLS, as it
#     does), one running app (bgbench-push, as Benchmarks/push-latency.sh runs it against bgd's
#     own gateway; bgd wakes the app as often as it can, so pushes that arrive while a wake runs
#     are coalesced into the newest, as the policy intends).
relay e2e
"$bin/bgrelay" keys add --state-dir "$work/e2e" --key-id BENCH12345 --team-id TEAM123456 --topics $app "$work/key.p8" >/dev/null
"$bin/bgd" --state-dir "$work/bgd-e2e" --socket "$work/bgd-e2e.sock" --push-port 0 --durability full \
    --conditions unconstrained --push-wakes-per-hour 36000000 --push-token-rate 2000 \
    --push-relay "https://localhost:$uplink_port" --push-relay-ca "$work/cert/push-gateway.crt" 2> "$work/bgd-e2e.log" &
pids+=($!)
until grep -q "Push gateway is listening" "$work/bgd-e2e.log" 2>/dev/null; do sleep 0.05; done
e2e_token=$("$bin/bgctl" register $app --interval never --socket "$work/bgd-e2e.sock" -- /bin/true | awk '/^token:/ {print $2}')
echo "POST → app handler through the relay at 1,000/s (bgd on lines, 1 SQLite node):"
"$bin/bgbench-push" --socket "$work/bgd-e2e.sock" --gateway "https://localhost:$provider_port" \
    --certificate "$work/cert/push-gateway.crt" --app $app --app-token "$e2e_token" --key "$work/key.p8" \
    --key-id BENCH12345 --team-id TEAM123456 --rate 1000 --seconds 10 | sed 's/^/    /'
# Where it went: the relay's accepted → bgd's acknowledgement (bgd committed it), from its store.
echo "    relay accepted → bgd's acknowledgement: $(sqlite3 -cmd ".timeout 10000" "$work/e2e/relay.sqlite" \
    "SELECT (julianday(endedAt) - julianday(acceptedAt)) * 86400000 FROM push WHERE state = 'delivered'" | python3 "$work/latency.py")"
fi
[ -z "$e2e_only" ] || exit 0

# 3. Idle uplinks: the relay's memory per device connection — the marginal cost, as a node
#    holding thousands pays it: 200 devices connect first and stay (the code their handshakes
#    and sessions run is paged in once per process, ~1.8 MB: over the first 1,000 it would add
#    ~2-4 KB to each), then 1,000 more; RSS is read once each batch has sat idle past the store
#    calls' limit (10 s: a bounded call's timer outlives the call until then).
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
settle=12
# Holds N connections with COMMAND... until hold_fd closes: hold NAME N COMMAND...
hold() {
    local name=$1 count=$2; shift 2
    mkfifo "$work/$name.in"
    "$@" "$count" < "$work/$name.in" > "$work/$name.idle" 2>&1 &
    pids+=($!)
    exec {hold_fd}> "$work/$name.in"
    held+=($hold_fd)
    until grep -q "^ready" "$work/$name.idle" 2>/dev/null; do
        sleep 0.2
        if grep -q -i error "$work/$name.idle"; then cat "$work/$name.idle"; exit 1; fi
    done
}
# Sets before/after (KB) around $idle connections held by COMMAND... on server pid $1, after a
# warm-up of 200: measure PID NAME COMMAND...
measure() {
    local pid=$1 name=$2; shift 2
    held=()
    hold "$name.warm" 200 "$@"
    sleep $settle
    before=$(rss "$pid")
    hold "$name" "$idle" "$@"
    sleep $settle
    after=$(rss "$pid")
}
release() { for fd in "${held[@]}"; do exec {fd}>&-; done; }
per() { echo "$(( (after - before) * 1024 / idle ))"; }
relay idle --max-devices-per-address 100000  # every simulated device is on loopback
measure "${pids[-1]}" idle "$bin/bgbench-relay" idle "https://localhost:$uplink_port" "$work/cert/push-gateway.crt"
connected=$( (curl -s --cacert "$work/cert/push-gateway.crt" "https://localhost:$uplink_port/metrics" || true) | awk '/^bgrelay_connected_devices/ {print $2}')
echo "idle uplinks, HTTP/2 streams: $connected devices connected to one node; relay RSS ${before} KB → ${after} KB: $(per) bytes per idle connection (aim ≤ 20 KB)"
release
# The same relay, a fresh node, devices holding the uplink as bgd does: lines straight on TLS.
relay idle-lines --max-devices-per-address 100000
measure "${pids[-1]}" idle-lines "$bin/bgbench-relay" lines "https://localhost:$uplink_port" "$work/cert/push-gateway.crt"
connected=$( (curl -s --cacert "$work/cert/push-gateway.crt" "https://localhost:$uplink_port/metrics" || true) | awk '/^bgrelay_connected_devices/ {print $2}')
echo "idle uplinks, lines on TLS (bgd's): $connected devices connected to one node; relay RSS ${before} KB → ${after} KB: $(per) bytes per idle connection (aim ≤ 20 KB)"
release

# 4. The floor under that: the same devices on TLS + HTTP/2 served by SwiftNIO alone (no
#    Hummingbird, no task per connection; bgbench-uplink-floor, its buffers as the relay's), with
#    HPACK's table as usual and as small as the server may ask. Measured the same way.
floor() {  # floor MODE: starts bgbench-uplink-floor; sets floor_pid and floor_port
    "$bin/bgbench-uplink-floor" "$work/cert/push-gateway.crt" "$work/cert/push-gateway.key" "$1" > "$work/floor.$1.out" 2>&1 &
    floor_pid=$!
    pids+=($floor_pid)
    until grep -q "^port" "$work/floor.$1.out" 2>/dev/null; do sleep 0.05; done
    floor_port=$(awk '/^port/ {print $2}' "$work/floor.$1.out")
}
for table in 4096 0; do
    floor $table
    measure "$floor_pid" "floor.$table" "$bin/bgbench-relay" idle "https://localhost:$floor_port" "$work/cert/push-gateway.crt"
    echo "floor (SwiftNIO TLS + HTTP/2 alone, header table $table): RSS ${before} KB → ${after} KB: $(per) bytes per idle connection"
    release
    kill "$floor_pid" 2>/dev/null || true
done

# 5. What is under HTTP/2: the same number of connections speaking lines straight on TLS, and on
#    plain TCP (Benchmarks/uplink_idle.py holds them) — the socket and channel, TLS, and what
#    HTTP/2 adds are the differences.
for mode in line tcp; do
    floor $mode
    ca=(); [ "$mode" = line ] && ca=("$work/cert/push-gateway.crt")
    measure "$floor_pid" "floor.$mode" python3 "$(dirname "$0")/uplink_idle.py" "$floor_port" "${ca[@]}"
    echo "floor (SwiftNIO, lines on $([ "$mode" = line ] && echo TLS || echo plain TCP), no HTTP): RSS ${before} KB → ${after} KB: $(per) bytes per idle connection"
    release
    kill "$floor_pid" 2>/dev/null || true
done
