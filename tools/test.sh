#!/usr/bin/env bash
# Every test: install, build the release preset, run ctest (unit tests and the multi-rank
# tests under mpirun with 2, 3 and 4 ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh --test
bash tools/build.sh release
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --preset release -j "$(nproc)" "$@"
