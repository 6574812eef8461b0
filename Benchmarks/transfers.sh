#!/usr/bin/env bash
# Issue 4's transfer benchmarks, ours beside curl's in the same run, against a local nginx:
#   1. 1 GiB to disk: throughput and peak memory, bgd vs curl;
#   2. bgd's memory per extra concurrent transfer with 100 at once (16 MiB each);
#   3. bytes fetched again after kill -9 of bgd in the middle of a 1 GiB download.
# Usage: Benchmarks/transfers.sh [SIZE_MIB]   (default 1024; builds release binaries, installs nginx)
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null; }
command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
swift build -c release --product bgd >/dev/null
swift build -c release --product bgctl >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-bench-XXXX)
port=18080
trap 'kill $(cat "$work/nginx.pid" 2>/dev/null) 2>/dev/null || true; pkill -f "bgd --state-dir $work" 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$work/www" "$work/out"
head -c $((size_mib << 20)) /dev/urandom > "$work/www/big.bin"
for i in $(seq 1 100); do head -c $((16 << 20)) /dev/urandom > "$work/www/s$i.bin"; done
cat > "$work/nginx.conf" <<CONF
user root;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log $work/access.log;
    sendfile on;
    server {
        listen 127.0.0.1:$port;
        root $work/www;
        location /slow/ { alias $work/www/; limit_rate 100m; }
    }
}
CONF
chmod 755 "$work"; chmod -R a+rX "$work/www"
nginx -c "$work/nginx.conf"
url=http://127.0.0.1:$port

peak_kib() { awk '/^VmHWM/ {print $2}' /proc/"$1"/status; }
rss_kib() { awk '/^VmRSS/ {print $2}' /proc/"$1"/status; }
start_bgd() {
    : > "$work/bgd.log"
    "$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" --conditions unconstrained --durability normal "$@" 2>>"$work/bgd.log" &
    bgd=$!
    until grep -q "bgd is ready" "$work/bgd.log" 2>/dev/null && [ -S "$work/bgd.sock" ]; do sleep 0.05; done
}
now() { date +%s.%N; }
mib_per_s() { echo "scale=1; $size_mib / ($2 - $1)" | bc; }

echo "swift-background transfer benchmarks — $(nproc) cores, $(uname -r), $(curl --version | head -1 | cut -d' ' -f1-2), nginx $(nginx -v 2>&1 | cut -d/ -f2)"
echo

# 1. One big file to disk.
sync; t0=$(now)
/usr/bin/env time -f "%M" -o "$work/curl.mem" curl -s -o "$work/out/curl.bin" "$url/big.bin"
t1=$(now)
curl_rate=$(mib_per_s "$t0" "$t1"); curl_mem=$(cat "$work/curl.mem")
sync; t2=$(now)
curl_durable_rate=$(mib_per_s "$t0" "$t2")
rm -f "$work/out/curl.bin"; sync
start_bgd
idle=$(rss_kib $bgd)
t0=$(now)
"$bin/bgctl" download "$url/big.bin" --to "$work/out/bgd.bin" --socket "$work/bgd.sock" >/dev/null
t1=$(now)
bgd_rate=$(mib_per_s "$t0" "$t1"); bgd_peak=$(peak_kib $bgd)
cmp -s "$work/www/big.bin" "$work/out/bgd.bin" && same=identical || same=DIFFERENT
echo "1. ${size_mib} MiB from nginx to disk"
echo "   ours (bgd, checkpoint+fsync every 8 MiB): ${bgd_rate} MiB/s, bgd peak RSS $((bgd_peak / 1024)) MiB (idle $((idle / 1024)) MiB); file $same"
echo "   anchor (curl -o, no fsync):               ${curl_rate} MiB/s, curl peak RSS $((curl_mem / 1024)) MiB"
echo "   anchor (curl -o, then sync):             ${curl_durable_rate} MiB/s"
echo "   ratio: $(echo "scale=2; $bgd_rate / $curl_rate" | bc)× curl, $(echo "scale=2; $bgd_rate / $curl_durable_rate" | bc)× curl+sync (aim ≥ 0.9×)"
rm -f "$work/out/"*.bin
kill $bgd; wait $bgd 2>/dev/null || true

# 2. 100 at once.
rm -rf "$work/state"; : > "$work/bgd.log"
start_bgd --max-transfers 100
before=$(rss_kib $bgd)
for i in $(seq 1 100); do
    "$bin/bgctl" download "$url/slow/s$i.bin" --to "$work/out/s$i.bin" --no-wait --socket "$work/bgd.sock" >/dev/null
done
while "$bin/bgctl" transfers --limit 200 --socket "$work/bgd.sock" | grep -qE "running|waiting"; do sleep 0.2; done
peak=$(peak_kib $bgd)
ok=0; for i in $(seq 1 100); do cmp -s "$work/www/s$i.bin" "$work/out/s$i.bin" && ok=$((ok + 1)); done
echo
echo "2. 100 concurrent 16 MiB downloads (nginx limit_rate 100 MiB/s each)"
echo "   ours: peak RSS $((peak / 1024)) MiB, before $((before / 1024)) MiB: $(( (peak - before) / 100 )) KiB per extra transfer; $ok/100 files identical"
echo "   anchor: 100 curl processes ≈ 100 × ${curl_mem} KiB = $((curl_mem * 100 / 1024)) MiB (aim ≤ 1 MiB per transfer)"
rm -f "$work/out/"*.bin
kill $bgd; wait $bgd 2>/dev/null || true

# 3. kill -9 in the middle.
rm -rf "$work/state"; : > "$work/bgd.log"; : > "$work/access.log"
start_bgd
"$bin/bgctl" download "$url/slow/big.bin" --to "$work/out/k.bin" --no-wait --socket "$work/bgd.sock" >/dev/null
sleep $(echo "scale=2; $size_mib / 100 / 2" | bc)   # about half way at 100 MiB/s
kill -9 $bgd; wait $bgd 2>/dev/null || true
start_bgd
while "$bin/bgctl" transfers --socket "$work/bgd.sock" | grep -qE "running|waiting"; do sleep 0.2; done
kill $bgd; wait $bgd 2>/dev/null || true
served=$(awk '{s += $10} END {print s}' "$work/access.log")
refetched=$((served - (size_mib << 20)))
cmp -s "$work/www/big.bin" "$work/out/k.bin" && same=identical || same=DIFFERENT
echo
echo "3. kill -9 of bgd half way through ${size_mib} MiB, then restart"
echo "   ours: $((refetched / 1024)) KiB fetched again (aim ≤ 8 MiB, one checkpoint); file $same"
echo "   anchor: aria2 saves its control file every 60 s (≈ everything at this speed); curl -C - trusts the file size"
