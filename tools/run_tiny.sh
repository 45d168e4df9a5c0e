#!/usr/bin/env bash
# The main job: install, build, and train configs/tiny.yaml on 2 ranks with mpirun. Each run
# starts afresh in runs/tiny (--set run.overwrite=true, never saved in runs/tiny/config.yaml),
# deleting what the previous run wrote there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh release
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec launch/ringstep-mpirun -n "${RANKS:-2}" configs/tiny.yaml --set run.overwrite=true "$@"
