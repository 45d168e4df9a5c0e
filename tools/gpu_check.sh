#!/usr/bin/env bash
# The GPU check of issue 12, in one call on a bare GPU machine (nvcc, CMake, PyTorch; none
# of our Debian packages): unpack the carried .debs (gpu_deps/, from
# tools/fetch_gpu_deps.sh), configure and build the CUDA build against ONLY that copy, run
# the CUDA tests (then again under compute-sanitizer when it works), the trainer on cuda
# (configs/tiny.yaml's first 10 fp32 losses against the CPU run; configs/gpt2-124m.yaml's
# tokens/s, MFU and step breakdown), the forward + backward benchmark and PyTorch eager on
# the same GPU, and print a short table last. Full logs go to $OUT (the run tool's folder) or
# /tmp/gpu_check. docs/gpu.md says how to call it and what each row means.
#
#   tools/gpu_check.sh            on the GPU machine
#   tools/gpu_check.sh --rehearse here, without a GPU: same unpack/configure/build steps
#                                 into build-rehearse/; the tests then skip.
#   tools/gpu_check.sh --rehearse --configure-only   stops after the configure check.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REHEARSE=0
CONFIGURE_ONLY=0
[[ "${1:-}" == "--rehearse" ]] && REHEARSE=1
[[ "${2:-}" == "--configure-only" ]] && CONFIGURE_ONLY=1
LOGS=${OUT:-/tmp/gpu_check}
mkdir -p "$LOGS"
DEPS=/tmp/ringstep_deps
BUILD=$ROOT/build-gpu
[[ $REHEARSE == 1 ]] && BUILD=$ROOT/build-rehearse
JOBS=$(nproc)
[[ $REHEARSE == 1 ]] && JOBS=1
START=$(date +%s)
ROWS=()

# row NAME STATUS DETAIL: one line of the final table.
row() { ROWS+=("$(printf '%-22s %-6s %s' "$1" "$2" "$3")"); }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

# --- 1. unpack the carried packages ---------------------------------------------------
t=$(date +%s)
rm -rf "$DEPS" && mkdir -p "$DEPS"
n=0
for f in gpu_deps/*.deb; do dpkg -x "$f" "$DEPS" && n=$((n + 1)); done
P=$DEPS/usr
LIB=$P/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$LIB:$LIB/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$P  # relocated Open MPI finds its plugins and help files here
# `ringstep train` without mpirun is an MPI singleton: isolated, it starts no orted daemon
# (which needs ssh or rsh, absent on a bare machine: rehearsed with PATH emptied).
export OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# pkg-config sees no .pc file: FindMPI would take a system Open MPI's (here) or the
# unpacked one's, whose prefix=/usr is wrong; it uses the MPI_* hints below instead.
mkdir -p "$DEPS/no-pkgconfig"
export PKG_CONFIG_LIBDIR=$DEPS/no-pkgconfig PKG_CONFIG_PATH=
row unpack "$([[ $n -gt 0 ]] && echo ok || echo FAIL)" "$n .debs into $DEPS ($(elapsed $t))"

# --- 2. configure against the unpacked copy only --------------------------------------
t=$(date +%s)
GENCODE="-gencode=arch=compute_90a,code=sm_90a"  # the H200 only: a third of the nvcc time
[[ $REHEARSE == 1 ]] && GENCODE="-gencode=arch=compute_80,code=sm_80;-gencode=arch=compute_90a,code=sm_90a;-gencode=arch=compute_90,code=compute_90"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
rm -f "$BUILD/CMakeCache.txt"
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DRINGSTEP_CUDA=ON \
  -DRINGSTEP_BLAS=OFF -DCMAKE_PREFIX_PATH="$P" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DRINGSTEP_CUDA_GENCODE="$GENCODE" \
  -DEigen3_DIR="$P/share/eigen3/cmake" -Dyaml-cpp_DIR="$LIB/cmake/yaml-cpp" \
  -DGTest_DIR="$LIB/cmake/GTest" -Dnlohmann_json_DIR="$P/share/cmake/nlohmann_json" \
  -DCLI11_DIR="$P/share/cmake/CLI11" \
  -DXXHASH_INCLUDE_DIR="$P/include" -DXXHASH_LIBRARY="$LIB/libxxhash.so" \
  -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_SKIP_MPICXX=ON \
  -DMPI_CXX_HEADER_DIR="$LIB/openmpi/include" -DMPI_CXX_LIB_NAMES=mpi \
  -DMPI_mpi_LIBRARY="$LIB/openmpi/lib/libmpi.so" -DMPIEXEC_EXECUTABLE="$P/bin/mpiexec" \
  >"$LOGS/configure.log" 2>&1
cfg=$?
# Every dependency must resolve into $DEPS, never to a system copy.
leaks=$(grep -E '^(Eigen3_DIR|yaml-cpp_DIR|GTest_DIR|nlohmann_json_DIR|CLI11_DIR|XXHASH_[A-Z_]*|MPI_[a-z_]*_LIBRARY|MPI_CXX_[A-Z_]*(INCLUDE|HEADER|LINK)[A-Z_]*):' \
  "$BUILD/CMakeCache.txt" 2>/dev/null | grep -E '/usr/(include|lib)' | grep -v "$DEPS" || true)
if [[ $cfg -ne 0 ]]; then
  row configure FAIL "see configure.log"; tail -30 "$LOGS/configure.log"
elif [[ -n $leaks ]]; then
  row configure FAIL "resolved outside $DEPS: $leaks"
else
  row configure ok "all dependencies from $DEPS ($(elapsed $t))"
fi

if [[ $CONFIGURE_ONLY == 1 ]]; then for r in "${ROWS[@]}"; do echo "$r"; done; exit 0; fi

# --- 3. build -----------------------------------------------------------------------
t=$(date +%s)
cmake --build "$BUILD" -j "$JOBS" --target ringstep_cuda_tests ringstep_cuda_bench ringstep \
  >"$LOGS/build.log" 2>&1
bld=$?
warn=$(grep -ci "warning" "$LOGS/build.log")
row build "$([[ $bld -eq 0 ]] && echo ok || echo FAIL)" "cuda tests + bench + ringstep, $warn warnings ($(elapsed $t))"
[[ $bld -ne 0 ]] && tail -40 "$LOGS/build.log"

# Shared libraries the test binary loads from outside the unpacked copy: on a bare machine
# these must be the system's own (libc, libstdc++, libgomp, ...) or CUDA's.
if [[ $bld -eq 0 ]]; then
  outside=$(ldd "$BUILD/tests/ringstep_cuda_tests" | awk '/=>/ {print $3}' | grep -v "^$DEPS" |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libgomp|libpthread|libdl|librt|libz|libudev|libcap|libcuda|libcudart|libcublas|libcublasLt)\.so' || true)
  row libs "$([[ -z $outside ]] && echo ok || echo WARN)" \
    "$([[ -z $outside ]] && echo "all non-system libraries from $DEPS" || echo "from elsewhere:" $outside)"
fi

# --- 4. tests -----------------------------------------------------------------------
if [[ $bld -eq 0 ]]; then
  t=$(date +%s)
  timeout 180 "$BUILD/tests/ringstep_cuda_tests" --gtest_output="xml:$LOGS/cuda_tests.xml" \
    >"$LOGS/cuda_tests.log" 2>&1
  rc=$?
  # GoogleTest's own summary lines (each test also has a per-test line: not counted).
  passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$LOGS/cuda_tests.log" || echo 0)
  skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= tests?, listed below)' "$LOGS/cuda_tests.log" || echo 0)
  failed=$(grep -oP '^ *\K[0-9]+(?= FAILED TESTS?)' "$LOGS/cuda_tests.log" || echo 0)
  row cuda_tests "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" \
    "$passed passed, $skipped skipped, $failed failed ($(elapsed $t))"
  grep -E '^\[  FAILED  \]|Failure|rel|error' "$LOGS/cuda_tests.log" | head -40

  if command -v compute-sanitizer >/dev/null && [[ $REHEARSE == 0 ]]; then
    t=$(date +%s)
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$BUILD/tests/ringstep_cuda_tests" --gtest_filter='*CudaBackendOps*:CudaOps*:CudaOptim*' \
      >"$LOGS/memcheck.log" 2>&1
    rc=$?
    errs=$(grep -m1 -o 'ERROR SUMMARY: [0-9]* error' "$LOGS/memcheck.log")
    row memcheck "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "rc=$rc ${errs:-no summary} ($(elapsed $t))"
    [[ $rc -ne 0 ]] && tail -30 "$LOGS/memcheck.log"
  else
    row memcheck skip "compute-sanitizer absent (or rehearsal)"
  fi

  # --- 5. the trainer on cuda: tiny's losses against the CPU, GPT-2 124M's speed --------
  if [[ $REHEARSE == 0 ]]; then
    t=$(date +%s)
    # tiny DEVICE: configs/tiny.yaml for 10 steps, each loss in steps.jsonl (a fixed peak:
    # no SGEMM measurement on the CPU).
    tiny() {
      timeout 120 "$BUILD/ringstep" train configs/tiny.yaml --set run.device="$1" \
        --set train.steps=10 --set profile.log_every=1 --set train.eval_every=0 \
        --set train.eval_batches=1 --set 'profile.trace_steps=[]' --set run.overwrite=true \
        --set profile.peak_gflops=100 --set run.out_dir="$LOGS/tiny_$1" >"$LOGS/tiny_$1.log" 2>&1
    }
    if tiny cpu && tiny cuda; then
      cmp=$(python3 tools/gpu_check_report.py losses "$LOGS/tiny_cpu" "$LOGS/tiny_cuda" 1e-4)
      row tiny_cuda_vs_cpu "${cmp%% *}" "${cmp#* } ($(elapsed $t))"
    else
      row tiny_cuda_vs_cpu FAIL "a run failed: see tiny_cpu.log, tiny_cuda.log"
      tail -5 "$LOGS/tiny_cpu.log" "$LOGS/tiny_cuda.log"
    fi

    t=$(date +%s)
    timeout 240 "$BUILD/ringstep" train configs/gpt2-124m.yaml --set run.out_dir="$LOGS/gpt2" \
      >"$LOGS/gpt2.log" 2>&1
    rc=$?
    if [[ $rc -eq 0 ]]; then
      sp=$(python3 tools/gpu_check_report.py speed "$LOGS/gpt2")
      row trainer_gpt2 ok "${sp%%|*} ($(elapsed $t))"
      row trainer_phases ok "${sp#*|}"
    else
      row trainer_gpt2 FAIL "rc=$rc, see gpt2.log"
      tail -20 "$LOGS/gpt2.log"
    fi
  fi

  # --- 6. benchmark: forward + backward of GPT-2 124M, bf16, on the GPU ---------------
  if [[ $REHEARSE == 0 ]]; then
    t=$(date +%s)
    timeout 180 "$BUILD/bench/ringstep_cuda_bench" >"$LOGS/bench.log" 2>&1
    rc=$?
    row bench "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$(grep -m1 '^RESULT' "$LOGS/bench.log" | cut -c8-) ($(elapsed $t))"
    grep -v '^RESULT' "$LOGS/bench.log" | tail -20
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
      t=$(date +%s)
      timeout 180 python3 tools/torch_gpt2_bench.py >"$LOGS/torch.log" 2>&1
      rc=$?
      row torch_eager "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$(grep -m1 '^RESULT' "$LOGS/torch.log" | cut -c8-) ($(elapsed $t))"
      [[ $rc -ne 0 ]] && tail -20 "$LOGS/torch.log"
      # The whole training step, AdamW included, as the trainer's tokens/s counts it.
      t=$(date +%s)
      timeout 180 python3 tools/torch_gpt2_bench.py 16 10 adamw >"$LOGS/torch_adamw.log" 2>&1
      rc=$?
      row torch_eager_adamw "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$(grep -m1 '^RESULT' "$LOGS/torch_adamw.log" | cut -c8-) ($(elapsed $t))"
      [[ $rc -ne 0 ]] && tail -20 "$LOGS/torch_adamw.log"
      if [[ -f $LOGS/gpt2/summary.json && $rc -eq 0 ]]; then
        vs=$(python3 tools/gpu_check_report.py versus "$LOGS/gpt2" "$LOGS/torch_adamw.log")
        row trainer_vs_torch "${vs%% *}" "${vs#* }"
      fi
    fi
  fi
fi

# --- the table (last, so the run tool's output tail shows it) ------------------------
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
echo "== ringstep gpu_check ($(elapsed $START) total) =="
for r in "${ROWS[@]}"; do echo "$r"; done
