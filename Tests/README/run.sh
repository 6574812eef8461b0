#!/usr/bin/env bash
# The README test: the "A five-minute tour" block of README.md, run top to bottom as it stands in
# a fresh shell (env -i: nothing of this shell's but PATH and HOME), against the bgd the tour
# says to start, in temporary state and runtime directories. Fails when a command in the tour
# fails or its output no longer says what the tour promises. Run by .ci/run after `swift test`.
#   Tests/README/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
daemon_command="swift run bgd --http 127.0.0.1:8765"
grep -qF "\`$daemon_command\`" README.md || {
    echo "README test: the tour no longer starts bgd with '$daemon_command'; update this script" >&2
    exit 1
}

work=$(mktemp -d)
daemon=""
cleanup() {
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -m 700 "$work/run"
fresh=(env -i "HOME=$HOME" "PATH=$PATH" "XDG_STATE_HOME=$work/state" "XDG_RUNTIME_DIR=$work/run")

# The tour's block: from its heading to the end of the first ```sh block after it.
python3 - README.md "$work/tour.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
tour = text[text.index("## A five-minute tour"):]
block = re.search(r"```sh\n(.*?)```", tour, re.S)
if not block:
    sys.exit("README test: no ```sh block under '## A five-minute tour'")
open(sys.argv[2], "w").write("set -euxo pipefail\n" + block.group(1))
PY

swift build --product bgd >/dev/null
"${fresh[@]}" $daemon_command > "$work/bgd.log" 2>&1 &
daemon=$!
for _ in $(seq 600); do
    grep -q "bgd is ready" "$work/bgd.log" && break
    kill -0 "$daemon" 2>/dev/null || { cat "$work/bgd.log" >&2; echo "README test: bgd did not start" >&2; exit 1; }
    sleep 0.1
done
grep -q "bgd is ready" "$work/bgd.log" || { echo "README test: bgd not ready in 60 s" >&2; exit 1; }

status=0
"${fresh[@]}" bash "$work/tour.sh" > "$work/tour.out" 2>&1 || status=$?
cat "$work/tour.out"
[ "$status" = 0 ] || { echo "README test: the tour failed (exit $status) at the last command above" >&2; exit 1; }

failures=0
expect() {  # expect PATTERN WHAT
    if grep -Eq "$1" "$work/tour.out"; then echo "ok   $2"; else echo "FAIL $2 (no /$1/ in the output)"; failures=$((failures + 1)); fi
}
expect "token" "register prints the app's token"
expect "Run 1: (newData|noData)" "simulate fetch runs the app and says how it went"
expect "com\.example\.newsfeed" "history, why and apps name the app"
expect "News \([0-9]+ items?\)" "the app run by hand shows its list with no token copied"
expect "http://127\.0\.0\.1:8765/login\?code=" "bgctl dashboard prints a login link"
[ "$failures" = 0 ] || { echo "README test: $failures check(s) failed" >&2; exit 1; }
echo "README test: the tour ran top to bottom"
