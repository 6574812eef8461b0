#!/usr/bin/env bash
# Builds the push validator's libFuzzer target (-sanitize=fuzzer,address) from the pure sources it
# covers and runs it for SECONDS (default 60) from a small seed corpus. Not part of `swift test`.
# Usage: Fuzz/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
out=.build/fuzz
mkdir -p "$out/corpus"
# One module: the policy files' `import BackgroundModel` is dropped from copies.
mkdir -p "$out/src"
for file in Sources/BackgroundPolicy/Push/*.swift; do grep -v '^import BackgroundModel$' "$file" > "$out/src/$(basename "$file")"; done
sources=$(find Sources/BackgroundModel -name '*.swift'; ls "$out"/src/*.swift)
swiftc -sanitize=fuzzer,address -parse-as-library -O $sources Fuzz/PushValidatorFuzz.swift -o "$out/push-validator"
token=$(printf 'ab%.0s' $(seq 1 32))
printf 'POST /3/device/%s\napns-topic: com.example.a\napns-push-type: background\napns-priority: 5\n\n{"aps":{"content-available":1},"content-id":42}' "$token" > "$out/corpus/silent"
printf 'POST /3/device/%s\nauthorization: bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ.eyJpc3MiOiJURUFNMTIzNDU2IiwiaWF0IjoxNzY3NjAzNjAwfQ.AAAA\napns-topic: a\n\n{"aps":{"alert":"x"}}' "$token" > "$out/corpus/alert"
"$out/push-validator" "$out/corpus" -max_total_time="$seconds" -max_len=6000 -print_final_stats=1
