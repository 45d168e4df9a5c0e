#!/usr/bin/env bash
# Profiler overhead on configs/tiny.yaml: runs the same training with profile.enabled true
# and false, alternating (ABAB...) so drift of this shared machine hits both alike, and
# prints the loop wall time of each and the median ratio. Usage:
#   tools/bench_profiler.sh [STEPS=80] [PAIRS=3] [extra --set flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-80}"; pairs="${2:-3}"; shift $(( $# > 2 ? 2 : $# )) || true
bin=build/ringstep
out=$(mktemp -d)
ratios=()
for p in $(seq "$pairs"); do
  for enabled in true false; do
    "$bin" train configs/tiny.yaml --set run.threads=1 --set train.steps="$steps" \
      --set train.eval_every=0 --set train.eval_batches=1 --set profile.peak_gflops=100 \
      --set profile.enabled=$enabled --set profile.trace_steps=[] \
      --set run.out_dir="$out/$enabled" --set run.overwrite=true "$@" > "$out/$enabled.log"
    wall[$([ $enabled = true ] && echo 1 || echo 0)]=$(/usr/bin/python3 -c \
      "import json;print(json.load(open('$out/$enabled/summary.json'))['loop_wall_s'])")
  done
  r=$(/usr/bin/python3 -c "print(${wall[1]}/${wall[0]})")
  ratios+=("$r")
  printf 'pair %d: profiler on %.3f s, off %.3f s, on/off %.4f\n' "$p" "${wall[1]}" "${wall[0]}" "$r"
done
/usr/bin/python3 -c "import statistics,sys;r=[float(x) for x in sys.argv[1:]];print('median on/off %.4f (overhead %+.2f%%)'%(statistics.median(r),100*(statistics.median(r)-1)))" "${ratios[@]}"
rm -rf "$out"
