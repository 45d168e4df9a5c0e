#!/bin/sh
# Fault test of comm/: runs comm_fault_driver on NP ranks under mpirun, where rank 1 dies
# (MODE=kill) or hangs (MODE=hang) at step 5, and checks that the job ends on its own within
# LIMIT seconds, with a non-zero status and a message that names rank 1.
#   comm_fault_test.sh MPIEXEC DRIVER NP MODE [LIMIT]
set -u
MPIEXEC=$1 DRIVER=$2 NP=$3 MODE=$4 LIMIT=${5:-60}
OUT=$(mktemp) ERR=$(mktemp)
trap 'rm -f "$OUT" "$ERR"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
# The watchdog timeout (5 s) only matters for MODE=hang; mpirun handles a dead process.
timeout -s KILL $((LIMIT + 30)) "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" \
  "$DRIVER" "$MODE" 5 >"$OUT" 2>"$ERR"
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "exit status $rc after ${elapsed}s"
echo "--- stdout"; cat "$OUT"
echo "--- stderr"; cat "$ERR"
fail=0
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0"; fail=1; fi
if [ "$rc" -eq 137 ] && [ "$elapsed" -gt "$LIMIT" ]; then echo "FAIL: killed by the test's timeout"; fail=1; fi
if [ "$elapsed" -gt "$LIMIT" ]; then echo "FAIL: took ${elapsed}s > ${LIMIT}s"; fail=1; fi
if grep -q "finished without noticing" "$ERR"; then echo "FAIL: a rank ran on"; fail=1; fi
case $MODE in
  kill) pattern='rank 1 .*(signal 9|Killed)|process rank 1 ' ;;
  hang) pattern='comm watchdog: .*waiting on rank 1' ;;
esac
if ! grep -Eq "$pattern" "$ERR" "$OUT"; then echo "FAIL: no message naming rank 1 ($pattern)"; fail=1; fi
[ $fail -eq 0 ] && echo "PASS"
exit $fail
