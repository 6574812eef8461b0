#!/usr/bin/env bash
# Regenerates docs/man/bgctl.1, bgd.1 and bgrelay.1 with swift-argument-parser's generate-manual
# plugin (from each command's own help), which Scripts/install.sh installs to share/man/man1.
# Run it after changing a command, an option or its help: InstallTests.theManPagesAreCurrent
# fails until the pages list every subcommand and option the binaries know.
#   Scripts/generate-manual.sh     # debug build (what `swift test` already built)
set -euo pipefail
cd "$(dirname "$0")/.."
swift package --disable-sandbox generate-manual --configuration debug --authors swift-background >&2
for product in bgctl bgd bgrelay; do
    cp ".build/plugins/GenerateManual/outputs/$product/$product.1" "docs/man/$product.1"
done
echo "docs/man/bgctl.1, bgd.1 and bgrelay.1 regenerated"
