#!/bin/bash
# The validation rows of docs/plan.md on this host: calibrations of configs/tiny.yaml
# (op-timed) at 1 and 2 ranks, fp32 and bf16, then each row run and checked against the
# calibration of its rank count and dtype with `ringstep plan --check`. Prints one line per row: predicted and measured
# p50 step (ms), the error, predicted and measured exposed communication (ms).
#
#   tools/plan_validate.sh [OUT_DIR]     (default /tmp/plan_validate; about 2 min idle)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$PWD/build/ringstep C=$PWD/configs/tiny.yaml D=${1:-/tmp/plan_validate}
[[ -x $R ]] || { echo "plan_validate: build ringstep first ($R)" >&2; exit 2; }
mkdir -p "$D"
base=(--set train.steps=30 --set train.eval_every=0 --set train.eval_batches=1 --set run.overwrite=true)
one() { "$R" train "$C" --set run.out_dir="$D/$1" "${base[@]}" "${@:2}" >"$D/$1.log" 2>&1; }
two() { mpirun --oversubscribe -np 2 "$R" train "$C" --set run.out_dir="$D/$1" "${base[@]}" "${@:2}" >"$D/$1.log" 2>&1; }
row() {  # row NAME CALIBRATION
  "$R" plan --check "$D/$1" --calibration "$D/$2.json" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%-9s %8.1f %8.1f %+7.1f%% %8.1f %8.1f" % (sys.argv[1], j["step_ms"], j["measured_step_ms"],
      j["error_pct_step_ms"], j["comm_exposed_ms"], j["measured_comm_exposed_ms"]))' "$1"
}
echo "plan_validate: calibrating (load: $(cut -d' ' -f1-3 /proc/loadavg))"
one cal1 --set profile.op_every=1 && "$R" plan --calibrate "$D/cal1" --output "$D/cal1.json" >/dev/null
two cal2 --set profile.op_every=1 && "$R" plan --calibrate "$D/cal2" --output "$D/cal2.json" >/dev/null
bf=(--set precision.dtype=bf16 --set profile.op_every=1)
one calb1 "${bf[@]}" && "$R" plan --calibrate "$D/calb1" --output "$D/calb1.json" >/dev/null
two calb2 "${bf[@]}" && "$R" plan --calibrate "$D/calb2" --output "$D/calb2.json" >/dev/null
echo "plan_validate: running the rows"
one r1_fp32; one r1_bf16 --set precision.dtype=bf16; one r1_rcf --set recompute.policy=full
two r2_fp32; two r2_bf16 --set precision.dtype=bf16; two r2_rcf --set recompute.policy=full
two r2_l01 --set comm.link.bandwidth_gbps=0.1; two r2_l1 --set comm.link.bandwidth_gbps=1
two r2_l10 --set comm.link.bandwidth_gbps=10
two r2_ob --set optimizer.name=onebit_adam --set optimizer.onebit.freeze_step=10
printf '%-9s %8s %8s %8s %8s %8s\n' row pred_ms meas_ms error exp_pred exp_meas
for r in r1_fp32 r1_rcf; do row $r cal1; done
row r1_bf16 calb1
for r in r2_fp32 r2_rcf r2_l01 r2_l1 r2_l10 r2_ob; do row $r cal2; done
row r2_bf16 calb2
echo "plan_validate: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
