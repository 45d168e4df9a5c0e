#!/usr/bin/env bash
# Per-op timing overhead on configs/tiny.yaml: runs the same training with
# profile.op_every=0 (no op timing) and =N, alternating (ABAB...) so drift of this shared
# machine hits both alike, and prints the loop wall time of each and the median ratio.
# Usage: tools/bench_op_timing.sh [EVERY=50] [STEPS=100] [PAIRS=3] [extra --set flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
every="${1:-50}"; steps="${2:-100}"; pairs="${3:-3}"; shift $(( $# > 3 ? 3 : $# )) || true
bin=build/ringstep
out=$(mktemp -d)
ratios=()
for p in $(seq "$pairs"); do
  for n in "$every" 0; do
    "$bin" train configs/tiny.yaml --set run.threads=1 --set train.steps="$steps" \
      --set train.eval_every=0 --set train.eval_batches=1 --set profile.peak_gflops=100 \
      --set profile.op_every="$n" --set profile.trace_steps=[] \
      --set run.overwrite=true --set run.out_dir="$out/$n" "$@" > "$out/$n.log"
    wall[$([ "$n" = 0 ] && echo 0 || echo 1)]=$(/usr/bin/python3 -c \
      "import json;print(json.load(open('$out/$n/summary.json'))['loop_wall_s'])")
  done
  r=$(/usr/bin/python3 -c "print(${wall[1]}/${wall[0]})")
  ratios+=("$r")
  printf 'pair %d: op_every=%s %.3f s, op_every=0 %.3f s, ratio %.4f\n' "$p" "$every" "${wall[1]}" "${wall[0]}" "$r"
done
/usr/bin/python3 -c "import statistics,sys;r=[float(x) for x in sys.argv[1:]];print('median ratio %.4f (overhead %+.2f%%)'%(statistics.median(r),100*(statistics.median(r)-1)))" "${ratios[@]}"
rm -rf "$out"
