#!/bin/bash
# The validation rows of docs/plan.md on this host, each run checked with `ringstep plan
# --check` against a calibration (op-timed runs of configs/tiny.yaml) of its rank count and
# dtype. One rank of two threads varies by a quarter from run to run here, so the 1-rank
# rows alternate: REPS calibration runs and REPS runs of each row, one of each in turn, one
# calibration fitted to all of them (the median per op class), and the median of the rows'
# errors. The 2-rank rows run once after a 2-rank calibration, the 4-rank row (oversubscribed:
# correctness only) once against it. Prints one line per row: predicted and measured p50 step
# (ms; 0/1 Adam: the mean over its stages), the error, predicted and measured exposed
# communication (ms).
#
#   tools/plan_validate.sh [OUT_DIR] [REPS]   (default /tmp/plan_validate, 3; about 4 min idle)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$PWD/build/ringstep C=$PWD/configs/tiny.yaml D=${1:-/tmp/plan_validate} REPS=${2:-3}
[[ -x $R ]] || { echo "plan_validate: build ringstep first ($R)" >&2; exit 2; }
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "plan_validate: REPS must be a positive integer" >&2; exit 2; }
mkdir -p "$D"
base=(--set train.steps=30 --set train.eval_every=0 --set train.eval_batches=1 --set run.overwrite=true)
one() { "$R" train "$C" --set run.out_dir="$D/$1" "${base[@]}" "${@:2}" >"$D/$1.log" 2>&1; }
mpi() { mpirun --oversubscribe -np "$1" "$R" train "$C" --set run.out_dir="$D/$2" "${base[@]}" "${@:3}" >"$D/$2.log" 2>&1; }
two() { mpi 2 "$@"; }
cal() { "$R" plan --calibrate "${@:2}" --output "$D/$1.json" >/dev/null; }
row() {  # row NAME CALIBRATION RUN_DIR...: the medians over the runs
  for run in "${@:3}"; do "$R" plan --check "$D/$run" --calibration "$D/$2.json" --json; done |
    python3 -c '
import json, statistics, sys
text, rows, dec = sys.stdin.read(), [], json.JSONDecoder()
i = 0
while i < len(text):
    if text[i].isspace(): i += 1; continue
    j, i = dec.raw_decode(text, i); rows.append(j)
m = lambda k: statistics.median(r[k] for r in rows)
print("%-9s %8.1f %8.1f %+7.1f%% %8.1f %8.1f %s" % (sys.argv[1], m("step_ms"), m("measured_step_ms"),
      m("error_pct_step_ms"), m("comm_exposed_ms"), m("measured_comm_exposed_ms"),
      "(median of %d)" % len(rows) if len(rows) > 1 else ""))' "$1"
}
echo "plan_validate: 1 rank, $REPS of each in turn (load: $(cut -d' ' -f1-3 /proc/loadavg))"
bf=(--set precision.dtype=bf16)
c1=() cb1=() r1=() rc1=() rb1=()
for i in $(seq "$REPS"); do
  one cal1_$i --set profile.op_every=1 && c1+=(cal1_$i)
  one r1_fp32_$i && r1+=(r1_fp32_$i)
  one r1_rcf_$i --set recompute.policy=full && rc1+=(r1_rcf_$i)
  one calb1_$i "${bf[@]}" --set profile.op_every=1 && cb1+=(calb1_$i)
  one r1_bf16_$i "${bf[@]}" && rb1+=(r1_bf16_$i)
done
cal cal1 "${c1[@]/#/$D/}"
cal calb1 "${cb1[@]/#/$D/}"
echo "plan_validate: 2 and 4 ranks (load: $(cut -d' ' -f1-3 /proc/loadavg))"
two cal2 --set profile.op_every=1 && cal cal2 "$D/cal2"
two calb2 "${bf[@]}" --set profile.op_every=1 && cal calb2 "$D/calb2"
two r2_fp32; two r2_bf16 "${bf[@]}"; two r2_rcf --set recompute.policy=full
two r2_l01 --set comm.link.bandwidth_gbps=0.1; two r2_l1 --set comm.link.bandwidth_gbps=1
two r2_l10 --set comm.link.bandwidth_gbps=10
two r2_ob --set optimizer.name=onebit_adam --set optimizer.onebit.freeze_step=10
# 0/1 Adam through every stage in 30 steps: variance steps 1-8, 10; compressed 9; after the
# freeze at 10, syncs at intervals 1, 2, 4 (groups of 4 steps), local steps between them.
two r2_zo --set optimizer.name=zero_one_adam --set optimizer.zero_one.var_freeze_step=10 \
  --set optimizer.zero_one.local_step_scaler=4 --set optimizer.zero_one.local_step_clipper=4
mpi 4 r4_fp32
printf '%-9s %8s %8s %8s %8s %8s\n' row pred_ms meas_ms error exp_pred exp_meas
row r1_fp32 cal1 "${r1[@]}"
row r1_rcf cal1 "${rc1[@]}"
row r1_bf16 calb1 "${rb1[@]}"
for r in r2_fp32 r2_rcf r2_l01 r2_l1 r2_l10 r2_ob r2_zo; do row $r cal2 $r; done
row r2_bf16 calb2 r2_bf16
row r4_fp32 cal2 r4_fp32
echo "plan_validate: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
