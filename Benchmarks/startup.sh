#!/usr/bin/env bash
# BM4: how long bgd takes from exec to READY=1 (sd_notify, as systemd's Type=notify waits for
# it) with APPS registered apps and TRANSFERS pending transfers in its store, beside an empty
# store and nginx (exec to accepting on its port) measured in the same run. Bar: <= 1 s.
# Usage: Benchmarks/startup.sh [APPS] [TRANSFERS] [RUNS]   (defaults 1000 1000 7; release build)
set -euo pipefail
cd "$(dirname "$0")/.."
apps=${1:-1000}
transfers=${2:-1000}
runs=${3:-7}
command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq nginx >/dev/null; }
echo "building release bgd and bgctl…" >&2
swift build -c release --product bgd >/dev/null
swift build -c release --product bgctl >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/bgd-startup-XXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# The store: apps registered and downloads handed over through bgctl, as a user would. The
# downloads point at a closed port, so each stays pending (retrying) when bgd stops.
"$bin/bgd" --state-dir "$work/state" --socket "$work/bgd.sock" --push-port off --conditions unconstrained \
    2>"$work/seed.log" &
seed=$!
until grep -q "bgd is ready" "$work/seed.log" 2>/dev/null; do sleep 0.1; done
echo "registering $apps apps and handing over $transfers downloads…" >&2
for i in $(seq 1 "$apps"); do
    "$bin/bgctl" register "com.example.app$i" --interval 1h --quiet --socket "$work/bgd.sock" -- /bin/true >/dev/null
done
for i in $(seq 1 "$transfers"); do
    "$bin/bgctl" download "http://127.0.0.1:9/file$i" --app "com.example.app$(( (i - 1) % apps + 1 ))" --session bench --no-wait \
        --socket "$work/bgd.sock" >/dev/null
done
kill -TERM $seed
wait $seed || true
mkdir -p "$work/empty"

python3 - "$bin/bgd" "$work" "$runs" "$apps" "$transfers" <<'PY'
import os, socket, statistics, subprocess, sys, time
bgd, work, runs, apps, transfers = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]

def bgd_ready(state):
    """Seconds from exec to the READY=1 datagram on NOTIFY_SOCKET."""
    path = f"{work}/notify"
    if os.path.exists(path): os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.settimeout(30)
    env = dict(os.environ, NOTIFY_SOCKET=path)
    began = time.perf_counter()
    process = subprocess.Popen(
        [bgd, "--state-dir", state, "--socket", f"{work}/bench.sock", "--push-port", "off",
         "--conditions", "unconstrained"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            message = listener.recv(4096).decode()
            if "READY=1" in message.split("\n"):
                return time.perf_counter() - began
    finally:
        process.terminate()
        process.wait()
        listener.close()

def nginx_ready():
    """Seconds from exec to nginx accepting on its port (its own readiness: no sd_notify)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conf = f"{work}/nginx.conf"
    with open(conf, "w") as f:
        f.write(f"pid {work}/nginx.pid; error_log {work}/nginx.err; events {{}} "
                f"http {{ access_log off; server {{ listen 127.0.0.1:{port}; root {work}; }} }}")
    began = time.perf_counter()
    process = subprocess.Popen(["nginx", "-c", conf, "-g", "daemon off;"], stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return time.perf_counter() - began
            except OSError:
                time.sleep(0.001)
    finally:
        process.terminate()
        process.wait()

rows = [
    (f"bgd, {apps} apps + {transfers} pending transfers", [bgd_ready(f"{work}/state") for _ in range(runs)]),
    ("bgd, empty store", [bgd_ready(f"{work}/empty/state") for _ in range(runs)]),
    ("nginx (anchor, same run)", [nginx_ready() for _ in range(runs)]),
]
print(f"{'exec -> ready':48} {'median (ms)':>12} {'min (ms)':>10} {'max (ms)':>10}   ({runs} runs each)")
for name, times in rows:
    print(f"{name:48} {statistics.median(times) * 1000:12.0f} {min(times) * 1000:10.0f} {max(times) * 1000:10.0f}")
print(f"bar: <= 1000 ms with {apps} apps and {transfers} transfers")
PY
