#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks, then configures and builds a preset
# (release by default) with every core. Usage: tools/build.sh [release|debug]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
bash tools/install_deps.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
