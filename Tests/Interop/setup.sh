#!/usr/bin/env bash
# Makes .build/interop/venv with off-the-shelf APNs client libraries from PyPI, for
# PushInteropTests (which say to run this when the venv is missing). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.build/interop/venv
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import aioapns" 2>/dev/null; then exit 0; fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q "aioapns==4.0"
