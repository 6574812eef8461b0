#!/usr/bin/env bash
# The dashboard in a real headless browser (Chromium + chromedriver from Debian, Selenium from
# PyPI) and /metrics through a Prometheus text-format parser (prometheus_client), against a real
# bgd. Screenshots go to .build/artifacts/dashboard/. Run by .ci/run after `swift test`.
# Usage: Tests/Dashboard/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
fi
venv=.build/dashboard-venv
if ! "$venv/bin/python" -c "import selenium, prometheus_client" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "selenium>=4.20" "prometheus_client>=0.20"
fi
swift build --product bgd >/dev/null
swift build --product bgctl >/dev/null
swift build --product bgd-fixture-app >/dev/null
bin=$(swift build --show-bin-path)
artifacts=.build/artifacts/dashboard
mkdir -p "$artifacts"
BGD_BIN="$bin" ARTIFACTS="$artifacts" "$venv/bin/python" Tests/Dashboard/test_dashboard.py
