#!/usr/bin/env bash
# The one GPU check (issues 12 and 31), for one `run` call on a bare H200 machine (nvcc,
# CMake, PyTorch, no internet, none of our Debian packages: they travel as .debs in
# gpu_deps/, from tools/fetch_gpu_deps.sh, and are unpacked with dpkg -x into a scratch
# prefix that CMake alone is pointed at). docs/gpu.md, "The GPU check", says how to call it,
# what each row means and which files it leaves.
#
#   tools/gpu_check.sh                 every stage, on the GPU machine
#   tools/gpu_check.sh --only A,B      just those stages (reusing build-gpu/ and the scratch
#                                      dir of an earlier call; a stage whose input is missing
#                                      says so and skips)
#   tools/gpu_check.sh --list          the stages and their budgets
#   tools/gpu_check.sh --rehearse      the whole script here, without a GPU: CPU stand-ins
#                                      where they mean something, `skip (rehearse: ...)` else
#
# Each stage runs under `timeout` with its budget from the table below (clipped to what is
# left of the overall budget); its row is printed, appended to $OUT/table.txt and written
# into $OUT/results.json the moment it ends, and $OUT/logs.tar.gz is rewritten, so a call
# killed midway still brings back every finished stage. The whole table is printed again
# at the end. Never `set -e`: a failed stage must not stop the later ones.
set -uo pipefail

# ---- the stages: name, budget in seconds, what it needs, what it does ---------------------
# Budgets add up to at most BUDGET_LIMIT (checked at start: exit 2 otherwise). One `run`
# call has about 540 s usable; the 420 s leave room for timeout's kill grace and the tar.
BUDGET_LIMIT=420
STAGE_TABLE='
unpack         10  debs      dpkg -x gpu_deps/*.deb into the scratch prefix
configure      30  deps      cmake build-gpu/ (sm_90a only) against that prefix alone
build          75  cache     ringstep_cuda_tests ringstep ringstep_cuda_bench, -j nproc
cuda_tests     30  testbin   ringstep_cuda_tests: CUDA ops (and 1-bit sign kernels) vs their CPU twins
memcheck       35  testbin   compute-sanitizer --tool memcheck on the op tests
tiny           20  ringstep  configs/tiny.yaml fp32: first 10 losses, cuda vs cpu
gpt2           45  ringstep  configs/gpt2-124m.yaml bf16 T 1024: tok/s, MFU, phases, memory
cuda_bench     15  benchbin  ringstep_cuda_bench: GPT-2 124M forward + backward; attention fp32, bf16, fp16
nccl           15  ncclbin   nccl_mpitest: device ring vs ncclAllReduce, 1-bit exchange vs host, 1 rank; 2 on one GPU
staged         35  ringstep  2 ranks on the GPU via MPI staging: = 1 rank x 2B; exposed comm, overlap on/off
nccl_train     20  ringstep  comm.backend nccl: 1 rank = no comm (tiny fp32); 2 NCCL ranks on one GPU
torch_eager    25  -         PyTorch eager: same model, B, T, bf16 autocast, clip + AdamW
torch_compile  60  -         PyTorch torch.compile (SDPA), same step; steady state only
compare         5  -         ringstep / eager, / compile; MFU vs 50%; memory vs PyTorch
'
MAX_OUT_FILES=6          # the device tool brings back 8; the check writes 3
TINY_TOL=1e-4            # absolute, nats/token, on each of tiny's first 10 fp32 losses
GPT2_STEPS=20            # configs/gpt2-124m.yaml says 30; 20 fit the budget (2 excluded)
MEMCHECK_FILTER='*CudaBackendOps.*:CudaOps.*:CudaOptim.*:CudaDevice.*:*FlashKernels.*'
# The plain-C++ halves of the CUDA checks: the rehearsal's stand-in for cuda_tests.
REHEARSE_TEST_FILTER='SignCodeGpu.*:DeviceSignAllreduce.*:GemmPlan.*:AttentionLayout.*:AdamWMath.*:GpuPeak.*:Runtime.*:StepTimerOnDevice.*:FlashTiling.*:*FlashTwin*:Gpt.UploadsEachMicroBatchsTokensOnceFromOnePinnedBuffer:*ActivationsOnCuda*'

NAMES=() BUDGETS=() NEEDS=() WHAT=()
while read -r n b nd w; do
  [[ -z ${n:-} ]] && continue
  NAMES+=("$n") BUDGETS+=("$b") NEEDS+=("$nd") WHAT+=("$w")
done <<<"$STAGE_TABLE"

cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
SELF=$ROOT/tools/gpu_check.sh
# Python never sees the unpacked libraries (PyTorch brings its own).
PY=(env -u LD_LIBRARY_PATH -u OPAL_PREFIX python3)
REPORT=("${PY[@]}" "$ROOT/tools/gpu_check_report.py")

# ---- settings (environment overrides, for reruns and for testing the script) --------------
WORK=${GPU_CHECK_WORK:-/tmp/gpu_check_work}           # logs, run dirs: never under $OUT
OUTDIR=${OUT:-/tmp/gpu_check_out}                     # what the device tool brings back
DEPS=${GPU_CHECK_DEPS:-$WORK/deps}                     # the unpacked .debs
TINY_CONFIG=${GPU_CHECK_TINY_CONFIG:-configs/tiny.yaml}
GPT2_CONFIG=${GPU_CHECK_GPT2_CONFIG:-configs/gpt2-124m.yaml}
COMPILE_MODE=${GPU_CHECK_COMPILE:-regional}           # regional | full (docs/gpu.md)
REHEARSE=${GPU_CHECK_REHEARSE:-0}
CPU_BUILD=${GPU_CHECK_CPU_BUILD:-$ROOT/build}         # rehearsal: an existing CPU build
GENCODE="-gencode=arch=compute_90a,code=sm_90a"       # the H200 only: a third of nvcc's time

setup_paths() {
  if [[ $REHEARSE == 1 ]]; then
    BUILD=$ROOT/build-rehearse
    RINGSTEP=$CPU_BUILD/ringstep
    TESTBIN=$CPU_BUILD/tests/ringstep_tests
    NICE=(nice -n 10)
    JOBS=1
  else
    BUILD=$ROOT/build-gpu
    RINGSTEP=$BUILD/ringstep
    TESTBIN=$BUILD/tests/ringstep_cuda_tests
    NICE=()
    JOBS=$(nproc)
  fi
  BENCHBIN=$BUILD/bench/ringstep_cuda_bench
  NCCLBIN=$BUILD/tests/nccl_mpitest
  [[ $REHEARSE == 1 ]] && NCCLBIN=$CPU_BUILD/tests/nccl_mpitest
  P=$DEPS/usr
  LIB=$P/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$LIB:$LIB/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OPAL_PREFIX=$P  # the relocated Open MPI finds its plugins and help files here
  # `ringstep train` without mpirun is an MPI singleton; isolated, it starts no orted
  # daemon (which needs ssh or rsh, absent on a bare machine).
  export OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # No .pc files: FindMPI would take a system Open MPI's or the unpacked one's (whose
  # prefix=/usr is wrong); it takes the MPI_* hints of the configure stage instead.
  export PKG_CONFIG_LIBDIR=$DEPS/no-pkgconfig PKG_CONFIG_PATH=
  export PYTHONUNBUFFERED=1
}

# ===== inside one stage (a child process under timeout; stdout+stderr = logs/NAME.log) =====

# result STATUS DETAIL: the stage's row. hl TEXT: a line printed under the row.
result() { printf '%s\t%s\n' "$1" "$2" >"$WORK/result/$STAGE"; }
hl() { printf '%s\n' "$*" >>"$WORK/highlights/$STAGE"; }
# report CMD ARGS: gpu_check_report.py, the stage's numbers to metrics/STAGE.json; its
# STATUS<TAB>DETAIL line becomes the row unless the caller adds to it.
report() { "${REPORT[@]}" "$@" --metrics-out "$WORK/metrics/$STAGE.json"; }
from_report() {  # from_report PREFIX CMD ARGS: the report's line as the row, PREFIX first
  local prefix=$1 line st detail
  shift
  line=$(report "$@")
  st=${line%%$'\t'*}
  detail=${line#*$'\t'}
  case $st in
    ok | FAIL | WARN | skip) result "$st" "${prefix}${detail}" ;;
    *) result FAIL "${prefix}gpu_check_report.py $1 gave no verdict: ${line:0:120}" ;;
  esac
}
deb_extract() {  # dpkg -x, or ar + tar where dpkg is missing
  if command -v dpkg >/dev/null; then dpkg -x "$1" "$2"; return; fi
  local m
  m=$(ar t "$1" | grep '^data\.tar') || return 1
  case $m in
    *.xz) ar p "$1" "$m" | tar -xJ -C "$2" ;;
    *.zst) ar p "$1" "$m" | tar --zstd -x -C "$2" ;;
    *.gz) ar p "$1" "$m" | tar -xz -C "$2" ;;
    *) ar p "$1" "$m" | tar -x -C "$2" ;;
  esac
}
# mem_start FILE / mem_stop: nvidia-smi's memory.used every 100 ms in the background (the
# device has only our process on it); MEMBASE is the reading before.
MEMPID='' MEMBASE=0
mem_start() {
  MEMFILE=$1
  : >"$MEMFILE"
  command -v nvidia-smi >/dev/null && [[ $REHEARSE == 0 ]] || return 0
  MEMBASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -n 1)
  [[ $MEMBASE =~ ^[0-9]+$ ]] || MEMBASE=0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 >"$MEMFILE" 2>/dev/null &
  MEMPID=$!
}
mem_stop() {
  [[ -n $MEMPID ]] || return 0
  kill "$MEMPID" 2>/dev/null
  wait "$MEMPID" 2>/dev/null
  MEMPID=''
}

stage_unpack() {
  local debs=(gpu_deps/*.deb) n=0 bad=() f
  if [[ ! -e ${debs[0]} ]]; then
    result FAIL "no gpu_deps/*.deb: run tools/fetch_gpu_deps.sh here and carry gpu_deps"
    return
  fi
  rm -rf "$DEPS" && mkdir -p "$DEPS/no-pkgconfig"
  for f in "${debs[@]}"; do
    if deb_extract "$f" "$DEPS"; then n=$((n + 1)); else bad+=("$(basename "$f")"); fi
  done
  if [[ ${#bad[@]} -gt 0 || ! -d $LIB ]]; then
    result FAIL "$n of ${#debs[@]} .debs unpacked into $DEPS; failed: ${bad[*]:-none}"
  else
    result ok "${#debs[@]} .debs into $DEPS ($(du -sh "$DEPS" | cut -f1))"
  fi
}

# nccl_root: prints the NCCL_ROOT for CMake when PyTorch's wheel (nvidia-nccl-*) has NCCL,
# nothing otherwise (CMake then looks in the CUDA toolkit). Called by the configure stage.
nccl_root() {
  # The wheel's folder holding include/nccl.h (nvidia/nccl, or under nvidia/cu13 in newer
  # layouts), found by walking the nvidia namespace package.
  local wheel
  wheel=$("${PY[@]}" -c '
import os, nvidia
for base in nvidia.__path__:
    for root, _, files in os.walk(base):
        if "nccl.h" in files and os.path.basename(root) == "include":
            print(os.path.dirname(root)); raise SystemExit' 2>/dev/null)
  # CMake gets a folder with NCCL's headers and libnccl alone, so that the binaries'
  # RUNPATH cannot reach the wheel's other CUDA libraries (cuBLAS, ...) before the toolkit's.
  if [[ -n $wheel && -e $wheel/lib/libnccl.so.2 ]]; then
    mkdir -p "$WORK/nccl/lib" && ln -sfn "$wheel/include" "$WORK/nccl/include" &&
      ln -sf "$wheel/lib/libnccl.so.2" "$WORK/nccl/lib/libnccl.so.2" && echo "$WORK/nccl"
  fi
}

stage_configure() {
  local gen=() leaks nccl
  command -v ninja >/dev/null && gen=(-G Ninja)
  nccl=$(nccl_root)
  mkdir -p "$BUILD" && rm -f "$BUILD/CMakeCache.txt"
  "${NICE[@]}" cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DRINGSTEP_CUDA=ON -DRINGSTEP_BLAS=OFF -DCMAKE_PREFIX_PATH="$P" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DRINGSTEP_CUDA_GENCODE="$GENCODE" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DEigen3_DIR="$P/share/eigen3/cmake" -Dyaml-cpp_DIR="$LIB/cmake/yaml-cpp" \
    -DGTest_DIR="$LIB/cmake/GTest" -Dnlohmann_json_DIR="$P/share/cmake/nlohmann_json" \
    -DCLI11_DIR="$P/share/cmake/CLI11" \
    -DXXHASH_INCLUDE_DIR="$P/include" -DXXHASH_LIBRARY="$LIB/libxxhash.so" \
    -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_SKIP_MPICXX=ON \
    -DMPI_CXX_HEADER_DIR="$LIB/openmpi/include" -DMPI_CXX_LIB_NAMES=mpi \
    -DMPI_mpi_LIBRARY="$LIB/openmpi/lib/libmpi.so" -DMPIEXEC_EXECUTABLE="$P/bin/mpiexec" \
    ${nccl:+-DNCCL_ROOT="$nccl"} \
    >"$WORK/logs/configure_cmake.log" 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    result FAIL "cmake rc=$rc: $(grep -m1 -E 'CMake Error|error' "$WORK/logs/configure_cmake.log" | cut -c1-120)"
    tail -n 15 "$WORK/logs/configure_cmake.log" | while read -r l; do hl "$l"; done
    return
  fi
  # Every third-party dependency must resolve into $DEPS, never to a system copy.
  leaks=$(grep -E '^(Eigen3_DIR|yaml-cpp_DIR|GTest_DIR|nlohmann_json_DIR|CLI11_DIR|XXHASH_[A-Z_]*|MPI_[a-z_]*_LIBRARY|MPI_CXX_[A-Z_]*(INCLUDE|HEADER|LINK)[A-Z_]*):' \
    "$BUILD/CMakeCache.txt" | grep -E '/usr/(include|lib|share)' | grep -v "$DEPS" | tr '\n' ' ')
  if [[ -n $leaks ]]; then
    result FAIL "resolved outside $DEPS: $leaks"
  else
    local nvcc
    nvcc=$(grep -ho 'CMAKE_CUDA_COMPILER_VERSION "[0-9.]*"' "$BUILD"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -n 1 | grep -o '[0-9.]*')
    result ok "$(basename "$BUILD")/, nvcc ${nvcc:-?}, ${GENCODE#-gencode=}, $(grep -o 'CUDA backend [A-Z]*' "$WORK/logs/configure_cmake.log" | head -n 1), $(grep -o 'NCCL [A-Z]*' "$WORK/logs/configure_cmake.log" | head -n 1); every dependency from $DEPS"
  fi
}

# Third-party headers a build read from /usr/include (none may: they come from $DEPS).
header_leaks() {
  ninja -C "$BUILD" -t deps 2>/dev/null |
    grep -E '^ +/usr/(include/(eigen3|yaml-cpp|nlohmann|CLI/|gtest|xxhash|x86_64-linux-gnu/openmpi|openmpi)|lib/x86_64-linux-gnu/openmpi)' |
    sort -u | head -n 5 | tr -s ' \n' ' '
}

stage_build() {
  local targets=(ringstep_cuda_tests ringstep ringstep_cuda_bench nccl_mpitest) keep=(-k 0) rc warn built=() missing=() t
  [[ -f $BUILD/build.ninja ]] || keep=(-k)
  if [[ $REHEARSE == 1 ]]; then
    # No GPU here: compile the CUDA objects (sm_90a, the carried headers) and one object
    # that reads yaml-cpp, check the targets are in the graph, link nothing.
    local objs graph
    objs=$(ninja -C "$BUILD" -t targets all 2>/dev/null | cut -d: -f1 |
      grep -E 'ringstep_core\.dir/core/(cuda/[^/]*\.cu|config\.cpp)\.o$' | tr '\n' ' ')
    graph=$(ninja -C "$BUILD" -t targets all 2>/dev/null | cut -d: -f1)
    for t in "${targets[@]}"; do grep -qx "$t" <<<"$graph" || missing+=("$t"); done
    # shellcheck disable=SC2086
    "${NICE[@]}" ninja -C "$BUILD" -j "$JOBS" $objs >"$WORK/logs/build_ninja.log" 2>&1
    rc=$?
    warn=$(grep -c 'warning' "$WORK/logs/build_ninja.log")
    local now hdr
    now=$(grep -c '^\[[0-9]*/[0-9]*\] Building' "$WORK/logs/build_ninja.log")
    hdr=$(header_leaks)
    if [[ $rc -ne 0 ]]; then
      result FAIL "rehearse: compiling $(wc -w <<<"$objs") objects failed (rc=$rc)"
      grep -m10 -E 'error' "$WORK/logs/build_ninja.log" | while read -r l; do hl "$l"; done
    elif [[ ${#missing[@]} -gt 0 || -n $hdr ]]; then
      result FAIL "rehearse: targets not in the graph: ${missing[*]:-none}; headers from /usr/include: ${hdr:-none}"
    else
      result ok "(rehearse: no GPU) $(wc -w <<<"$objs") objects (the 6 .cu for sm_90a + config.cpp; $now compiled now), $warn warnings, no header from /usr/include; the ${#targets[@]} targets are in the graph, not linked"
    fi
    return
  fi
  local t0
  t0=$(date +%s)
  cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" -- "${keep[@]}" \
    >"$WORK/logs/build_ninja.log" 2>&1
  rc=$?
  warn=$(grep -c 'warning' "$WORK/logs/build_ninja.log")
  local bins=("$TESTBIN" "$RINGSTEP" "$BENCHBIN" "$NCCLBIN")
  for t in "${bins[@]}"; do
    if [[ -x $t && $(stat -c %Y "$t") -ge $((t0 - 1)) ]] || [[ -x $t && $rc -eq 0 ]]; then
      built+=("$(basename "$t")")
    else
      missing+=("$(basename "$t")")
    fi
  done
  # Shared libraries from outside the unpacked copy: on a bare machine these must be the
  # system's own (libc, libstdc++, libgomp, ...) or CUDA's.
  local outside='' b
  for b in "${bins[@]}"; do
    [[ -x $b ]] || continue
    outside+=$(ldd "$b" 2>/dev/null | awk '/=>/ {print $3}' | grep -v "^$DEPS" |
      grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libgomp|libpthread|libdl|librt|libz|libudev|libcap|libcuda|libcudart|libcublas|libcublasLt|libnvJitLink|libmvec|libnccl)\.so' | tr '\n' ' ')
  done
  outside=$(tr ' ' '\n' <<<"$outside" | sort -u | tr '\n' ' ' | sed 's/^ *//')
  local hdr
  hdr=$(header_leaks)
  if [[ $rc -ne 0 ]]; then
    result FAIL "rc=$rc; built: ${built[*]:-none}; NOT (re)built: ${missing[*]:-none}; $warn warnings"
    grep -E 'error|FAILED:' "$WORK/logs/build_ninja.log" | head -n 15 | while read -r l; do hl "$l"; done
  elif [[ -n $outside || -n $hdr ]]; then
    result WARN "built ${built[*]}, $warn warnings; libraries not from $DEPS: ${outside:-none}; headers from /usr/include: ${hdr:-none}"
  else
    result ok "built ${built[*]} (-j $JOBS), $warn warnings; every non-system library and header from $DEPS"
  fi
}

stage_cuda_tests() {
  local xml=$WORK/logs/cuda_tests.xml log=$WORK/logs/cuda_tests_gtest.log prefix='' args=()
  rm -f "$xml"
  if [[ $REHEARSE == 1 ]]; then
    prefix="(rehearse: no GPU; the CPU twins) "
    args=(--gtest_filter="$REHEARSE_TEST_FILTER")
  fi
  "${NICE[@]}" "$TESTBIN" "${args[@]}" --gtest_output="xml:$xml" >"$log" 2>&1
  local rc=$?
  from_report "$prefix" gtest "$log" "$xml"
  # Every failing test with its first message lines, under the row.
  "${REPORT[@]}" failures "$WORK/metrics/$STAGE.json" 15 | while read -r l; do hl "$l"; done
  # Which MLP products took cuBLASLt's GELU epilogue and which ran the two ops.
  grep -E '^\[gelu-epilogue\]' "$log" | sort -u | while read -r l; do hl "$l"; done
  if [[ $rc -ne 0 && $(cut -f1 "$WORK/result/$STAGE") == ok ]]; then
    result FAIL "${prefix}gtest rc=$rc though no test failed (a crash after the last test?)"
  fi
  # On the GPU, a test that skipped for want of a device (some pass without one, host-only
  # checks) means the device was not seen: the stage fails.
  if [[ $REHEARSE == 0 && $(cut -f1 "$WORK/result/$STAGE") == ok ]] &&
    grep -q 'no CUDA device (cudaGetDeviceCount' "$log"; then
    result FAIL "CUDA tests skipped for want of a device: $(cut -f2 "$WORK/result/$STAGE")"
  fi
}

stage_memcheck() {
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [[ $REHEARSE == 1 ]]; then
    result skip "(rehearse: no GPU) compute-sanitizer ${cs:-not here}"
    return
  fi
  if [[ -z $cs ]]; then
    result skip "(compute-sanitizer not found) not on PATH nor in /usr/local/cuda/bin"
    return
  fi
  "$cs" --tool memcheck --error-exitcode 9 --print-limit 20 \
    "$TESTBIN" --gtest_filter="$MEMCHECK_FILTER" >"$WORK/logs/memcheck_sanitizer.log" 2>&1
  local rc=$?
  from_report "" memcheck "$WORK/logs/memcheck_sanitizer.log" "$rc"
  if [[ $(cut -f1 "$WORK/result/$STAGE") != ok ]]; then
    grep -E '^========= (Invalid|Program hit|Error|  at )|ERROR SUMMARY|not supported|^\[  FAILED' \
      "$WORK/logs/memcheck_sanitizer.log" | head -n 12 | while read -r l; do hl "$l"; done
  fi
}

# tiny_run LABEL DEVICE: configs/tiny.yaml for 10 steps, each loss in steps.jsonl (a fixed
# peak: no SGEMM measurement on the CPU; one evaluation batch at the end).
tiny_run() {
  "${NICE[@]}" "$RINGSTEP" train "$TINY_CONFIG" --set run.device="$2" --set train.steps=10 \
    --set profile.log_every=1 --set train.eval_every=0 --set train.eval_batches=1 \
    --set 'profile.trace_steps=[]' --set run.overwrite=true --set profile.peak_gflops=100 \
    --set run.out_dir="$WORK/runs/tiny_$1" >"$WORK/logs/tiny_$1.log" 2>&1
}

stage_tiny() {
  local other=cuda prefix=''
  if [[ $REHEARSE == 1 ]]; then other=cpu prefix='(rehearse: cpu vs cpu) '; fi
  rm -rf "$WORK/runs/tiny_cpu" "$WORK/runs/tiny_cuda"
  tiny_run cpu cpu
  local rc1=$?
  tiny_run cuda "$other"
  local rc2=$?
  if [[ $rc1 -ne 0 || $rc2 -ne 0 ]]; then
    result FAIL "${prefix}ringstep train $TINY_CONFIG: cpu rc=$rc1, cuda rc=$rc2"
    [[ $rc1 -ne 0 ]] && tail -n 3 "$WORK/logs/tiny_cpu.log" | sed 's/^/cpu: /' | while read -r l; do hl "$l"; done
    [[ $rc2 -ne 0 ]] && tail -n 3 "$WORK/logs/tiny_cuda.log" | sed 's/^/cuda: /' | while read -r l; do hl "$l"; done
    return
  fi
  from_report "$prefix" losses "$WORK/runs/tiny_cpu" "$WORK/runs/tiny_cuda" "$TINY_TOL"
}

stage_gpt2() {
  local extra=() prefix=''
  if [[ $REHEARSE == 1 ]]; then
    # The same config file on the CPU, shrunk: its keys, bf16 and the parsing are exercised.
    prefix='(rehearse: cpu, shrunk gpt2 config) '
    extra=(--set run.device=cpu --set model.vocab_size=256 --set model.seq_len=64
      --set model.d_model=64 --set model.n_layers=2 --set model.n_heads=2
      --set train.micro_batch=2 --set profile.peak_gflops=1000)
  fi
  local steps=$GPT2_STEPS
  [[ $REHEARSE == 1 ]] && steps=6
  rm -rf "$WORK/runs/gpt2"
  mem_start "$WORK/logs/gpt2_mem.txt"
  "${NICE[@]}" "$RINGSTEP" train "$GPT2_CONFIG" --set run.out_dir="$WORK/runs/gpt2" \
    --set train.steps="$steps" --set run.overwrite=true --set profile.op_every=10 "${extra[@]}" \
    >"$WORK/logs/gpt2_train.log" 2>&1
  local rc=$?
  mem_stop
  if [[ $rc -ne 0 ]]; then
    result FAIL "${prefix}ringstep train $GPT2_CONFIG rc=$rc"
    tail -n 8 "$WORK/logs/gpt2_train.log" | while read -r l; do hl "$l"; done
    return
  fi
  from_report "$prefix" speed "$WORK/runs/gpt2" "$WORK/logs/gpt2_train.log" \
    "$WORK/logs/gpt2_mem.txt" "$MEMBASE"
}

# The NCCL communicator: one rank (a singleton) runs every test for real; then 2 ranks on
# the one GPU, where NCCL is expected to refuse the duplicate GPU: its words go under the row.
stage_nccl() {
  local xml=$WORK/logs/nccl.xml log=$WORK/logs/nccl_gtest.log prefix=''
  [[ $REHEARSE == 1 ]] && prefix='(rehearse: no GPU) '
  rm -f "$xml"
  "${NICE[@]}" "$NCCLBIN" --gtest_output="xml:$xml" >"$log" 2>&1
  local rc=$?
  from_report "$prefix" gtest "$log" "$xml"
  "${REPORT[@]}" failures "$WORK/metrics/$STAGE.json" 8 | while read -r l; do hl "$l"; done
  [[ $rc -ne 0 && $(cut -f1 "$WORK/result/$STAGE") == ok ]] && result FAIL "${prefix}rc=$rc"
  [[ $REHEARSE == 1 ]] && return
  timeout 20 "$RINGSTEP" bench allreduce --backend nccl -b 1M -e 16M --iters 5 --warmup 2 \
    >"$WORK/logs/nccl_bench.log" 2>&1
  hl "bench allreduce --backend nccl, 1 rank: rc=$?; $(grep -cE '^ +[0-9]+ .* 0( |$)' "$WORK/logs/nccl_bench.log") rows with 0 wrong; $(tail -n 1 "$WORK/logs/nccl_bench.log" | cut -c1-100)"
  timeout 20 "$P/bin/mpiexec" --oversubscribe -np 2 "$NCCLBIN" >"$WORK/logs/nccl_np2.log" 2>&1
  hl "2 ranks on one GPU: rc=$?; $(grep -m1 -oE 'NCCL refused.*|PASSED.*|FAILED.*' "$WORK/logs/nccl_np2.log" | cut -c1-160)"
}

# MPI staging: 2 ranks share the one GPU, their gradients reduced in host memory bucket by
# bucket. Tiny fp32, 2 ranks x micro-batch 4 against 1 rank x 8 (the same sequences a
# step); then GPT-2 124M as configured (micro-batch 16: a backward long enough to hide the
# host AllReduce behind), 2 ranks, 5 steps, comm.overlap on and off.
staged_run() {  # staged_run LABEL RANKS CONFIG SETS...
  local label=$1 ranks=$2 config=$3
  shift 3
  rm -rf "$WORK/runs/staged_$label"
  timeout 30 "$P/bin/mpiexec" --oversubscribe -np "$ranks" "${NICE[@]}" "$RINGSTEP" train "$config" \
    --set run.out_dir="$WORK/runs/staged_$label" --set run.overwrite=true \
    --set 'profile.trace_steps=[]' --set train.eval_every=0 --set train.eval_batches=1 \
    --set profile.log_every=1 --set profile.peak_gflops=100 "$@" \
    >"$WORK/logs/staged_$label.log" 2>&1
}
stage_staged() {
  local device=cuda prefix='' gpt2=()
  if [[ $REHEARSE == 1 ]]; then
    device=cpu prefix='(rehearse: cpu, shrunk gpt2 config) '
    gpt2=(--set run.device=cpu --set model.vocab_size=256 --set model.seq_len=64
      --set model.d_model=64 --set model.n_layers=4 --set model.n_heads=2 --set comm.bucket_mb=0.05)
    [[ -x $P/bin/mpiexec ]] || P=$(dirname "$(dirname "$(command -v mpiexec)")")
  fi
  # A token file, so that 2 ranks x 4 read the 8 windows 1 rank x 8 reads (docs/data.md).
  cat docs/*.md >"$WORK/staged_text.txt"
  "$RINGSTEP" prepare --input "$WORK/staged_text.txt" --output "$WORK/staged_tokens.bin" \
    >"$WORK/logs/staged_prepare.log" 2>&1
  local tiny=(--set run.device=$device --set train.steps=10 --set train.global_batch=0
    --set data.source=file --set data.path="$WORK/staged_tokens.bin")
  staged_run one 1 "$TINY_CONFIG" "${tiny[@]}" --set train.micro_batch=8
  local rc1=$?
  staged_run two 2 "$TINY_CONFIG" "${tiny[@]}" --set train.micro_batch=4
  local rc2=$?
  staged_run on 2 "$GPT2_CONFIG" --set train.steps=5 --set train.global_batch=0 \
    --set comm.overlap=true "${gpt2[@]}"
  local rc3=$?
  staged_run off 2 "$GPT2_CONFIG" --set train.steps=5 --set train.global_batch=0 \
    --set comm.overlap=false "${gpt2[@]}"
  local rc4=$?
  if ((rc1 || rc2 || rc3 || rc4)); then
    result FAIL "${prefix}staged runs rc: 1 rank $rc1, 2 ranks $rc2, gpt2 overlap on $rc3, off $rc4"
    for l in one two on off; do
      tail -n 2 "$WORK/logs/staged_$l.log" | sed "s/^/$l: /" | while read -r x; do hl "$x"; done
    done
    return
  fi
  from_report "$prefix" staged "$WORK/runs/staged_one" "$WORK/runs/staged_two" "$TINY_TOL" \
    "$WORK/runs/staged_on" "$WORK/runs/staged_off" "$([[ $REHEARSE == 1 ]] && echo none || echo 0.5)"
}

# comm.backend nccl (issue 36): tiny fp32 on one rank with the NCCL device path (buckets
# reduced on the comm stream under backward by ncclAllReduce with ncclAvg, which over one
# rank leaves the gradient as it is; our ring has no work on one rank) against the same run
# without communication; then 2 NCCL ranks on the one GPU, where NCCL
# is expected to refuse the duplicate GPU: what it says goes under the row, not a failure.
nccl_train_run() {  # nccl_train_run LABEL RANKS SETS...
  local label=$1 ranks=$2
  shift 2
  rm -rf "$WORK/runs/nccl_$label"
  timeout 15 "$P/bin/mpiexec" --oversubscribe -np "$ranks" "${NICE[@]}" "$RINGSTEP" train \
    "$TINY_CONFIG" --set run.out_dir="$WORK/runs/nccl_$label" --set run.overwrite=true \
    --set train.steps=10 --set profile.log_every=1 --set train.eval_every=0 \
    --set train.eval_batches=1 --set 'profile.trace_steps=[]' --set profile.peak_gflops=100 \
    --set comm.bucket_mb=0.05 "$@" >"$WORK/logs/nccl_train_$label.log" 2>&1
}
stage_nccl_train() {
  if [[ $REHEARSE == 1 ]]; then
    # The CPU build refuses nccl on cpu (exit 2): the refusal and its message are the check.
    "$RINGSTEP" train "$TINY_CONFIG" --set run.out_dir="$WORK/runs/nccl_refused" \
      --set comm.backend=nccl >"$WORK/logs/nccl_train_refused.log" 2>&1
    local rc=$?
    if [[ $rc -eq 2 ]] && grep -q 'needs run.device cuda' "$WORK/logs/nccl_train_refused.log"; then
      result skip "(rehearse: no GPU) comm.backend=nccl on cpu refused with exit 2 as it should"
    else
      result FAIL "(rehearse) comm.backend=nccl on cpu: rc=$rc, expected 2 and 'needs run.device cuda'"
    fi
    return
  fi
  nccl_train_run plain 1 --set run.device=cuda --set comm.backend=mpi
  local rc1=$?
  nccl_train_run one 1 --set run.device=cuda --set comm.backend=nccl --set comm.allreduce=native
  local rc2=$?
  if [[ $rc1 -ne 0 || $rc2 -ne 0 ]]; then
    result FAIL "tiny on cuda: no comm rc=$rc1, 1 NCCL rank rc=$rc2"
    for l in plain one; do
      tail -n 3 "$WORK/logs/nccl_train_$l.log" | sed "s/^/$l: /" | while read -r x; do hl "$x"; done
    done
  else
    from_report "" nccl_train "$WORK/runs/nccl_plain" "$WORK/runs/nccl_one" "$TINY_TOL"
  fi
  nccl_train_run two 2 --set run.device=cuda --set comm.backend=nccl --set train.global_batch=0
  local rc3=$?
  hl "2 NCCL ranks on one GPU: rc=$rc3; $(grep -m1 -iE 'NCCL|error' "$WORK/logs/nccl_train_two.log" | cut -c1-170)"
}

stage_cuda_bench() {
  if [[ $REHEARSE == 1 ]]; then
    result skip "(rehearse: no GPU) ringstep_cuda_bench needs a device"
    return
  fi
  "$BENCHBIN" 16 5 bf16 >"$WORK/logs/cuda_bench_run.log" 2>&1
  local rc=$?
  from_report "" bench "$WORK/logs/cuda_bench_run.log"
  if [[ $rc -ne 0 ]]; then
    result FAIL "rc=$rc: $(tail -n 1 "$WORK/logs/cuda_bench_run.log" | cut -c1-150)"
  fi
}

# torch_run LABEL ARGS: tools/torch_gpt2_bench.py, GPT-2 124M B 16 (a tiny model on the CPU
# in the rehearsal); exit 3 = no torch or no device.
torch_run() {
  local label=$1 prefix=''
  shift
  local args=(16 "$@")
  if [[ $REHEARSE == 1 ]]; then
    args=(2 "${@:1:1}" "${@:2}" --device cpu --tiny)
    prefix='(rehearse: cpu, tiny model) '
  fi
  mem_start "$WORK/logs/${label}_mem.txt"
  "${NICE[@]}" "${PY[@]}" "$ROOT/tools/torch_gpt2_bench.py" "${args[@]}" >"$WORK/logs/${label}_run.log" 2>&1
  local rc=$?
  mem_stop
  if [[ $rc -eq 3 ]]; then
    local why
    why=$(grep -m1 '^RESULT skipped:' "$WORK/logs/${label}_run.log" | cut -d: -f2- | sed 's/^ //')
    if [[ $REHEARSE == 1 ]]; then result skip "(rehearse: no torch) $why"; else result skip "($why)"; fi
    return
  fi
  if [[ $rc -ne 0 ]]; then
    result FAIL "${prefix}rc=$rc: $(grep -v '^\[' "$WORK/logs/${label}_run.log" | tail -n 1 | cut -c1-150)"
    tail -n 8 "$WORK/logs/${label}_run.log" | while read -r l; do hl "$l"; done
    return
  fi
  from_report "$prefix" torch "$WORK/logs/${label}_run.log" "$WORK/logs/${label}_mem.txt" "$MEMBASE"
}
stage_torch_eager() { torch_run torch_eager 10 adamw --warmup 2; }
stage_torch_compile() {
  local steps=8
  [[ $REHEARSE == 1 ]] && steps=3
  torch_run torch_compile "$steps" adamw --compile "$COMPILE_MODE" --warmup 3
}

stage_compare() {
  local prefix=''
  [[ $REHEARSE == 1 ]] && prefix='(rehearse: CPU stand-ins, not a measurement) '
  from_report "$prefix" compare "$WORK/metrics"
}

# ===== the driver ============================================================================

if [[ ${1:-} == --stage ]]; then  # the child: one stage, its result in $WORK/result/NAME
  STAGE=$2
  setup_paths
  "stage_$STAGE"
  exit 0
fi

usage() {
  sed -n '2,/^set -uo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}
ONLY='' LIST=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --rehearse) REHEARSE=1 ;;
    --only) ONLY=${2:-}; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --list) LIST=1 ;;
    -h | --help) usage 0 ;;
    *) echo "gpu_check: unknown argument '$1' (--rehearse, --only A,B, --list)" >&2; exit 2 ;;
  esac
  shift
done
export GPU_CHECK_REHEARSE=$REHEARSE GPU_CHECK_WORK=$WORK GPU_CHECK_DEPS=$DEPS

SUM=0
for b in "${BUDGETS[@]}"; do SUM=$((SUM + b)); done
TOTAL=${GPU_CHECK_BUDGET:-$BUDGET_LIMIT}   # the overall budget; lower it to test `skip (budget)`
if [[ $SUM -gt $BUDGET_LIMIT ]]; then
  echo "gpu_check: stage budgets add up to ${SUM} s, over the ${BUDGET_LIMIT} s limit" >&2
  exit 2
fi
if ! [[ $TOTAL =~ ^[0-9]+$ ]] || [[ $TOTAL -gt $BUDGET_LIMIT ]]; then
  echo "gpu_check: GPU_CHECK_BUDGET=$TOTAL: a whole number of seconds <= $BUDGET_LIMIT" >&2
  exit 2
fi

if [[ $LIST == 1 ]]; then
  printf '%-14s %6s  %-9s %s\n' stage budget needs what
  for i in "${!NAMES[@]}"; do
    printf '%-14s %5ss  %-9s %s\n' "${NAMES[$i]}" "${BUDGETS[$i]}" "${NEEDS[$i]}" "${WHAT[$i]}"
  done
  printf '%-14s %5ss  (limit %s s)\n' total "$SUM" "$BUDGET_LIMIT"
  exit 0
fi

SELECTED=()
if [[ -n $ONLY ]]; then
  IFS=, read -ra want <<<"$ONLY"
  for w in "${want[@]}"; do
    [[ " ${NAMES[*]} " == *" $w "* ]] || { echo "gpu_check: no stage '$w' (stages: ${NAMES[*]})" >&2; exit 2; }
  done
  for n in "${NAMES[@]}"; do [[ ",$ONLY," == *",$n,"* ]] && SELECTED+=("$n"); done
else
  SELECTED=("${NAMES[@]}")
fi

setup_paths
mkdir -p "$WORK" "$OUTDIR"
if [[ -z $ONLY ]]; then rm -rf "$WORK/logs" "$WORK/runs" "$WORK/metrics"; fi
rm -rf "$WORK/result" "$WORK/highlights"
mkdir -p "$WORK/logs" "$WORK/runs" "$WORK/metrics" "$WORK/result" "$WORK/highlights"
rm -f "$WORK/results.jsonl" "$WORK/table.txt" "$OUTDIR/table.txt" "$OUTDIR/results.json" \
  "$OUTDIR/logs.tar.gz"
MODE=gpu
[[ $REHEARSE == 1 ]] && MODE=rehearse
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
[[ -n $GPU ]] || GPU="none visible (nvidia-smi: $(command -v nvidia-smi >/dev/null && echo 'no answer' || echo absent))"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
META=$WORK/meta.json
"${REPORT[@]}" init "$META" "$MODE" "$TOTAL" "$GPU" "$COMMIT" "$(IFS=,; echo "${SELECTED[*]}")"
START=$(date +%s)

HEADER=$(printf '%-14s %-6s %6s  %s' stage status secs detail)
echo "gpu_check: mode $MODE, gpu: $GPU, commit $COMMIT"
echo "gpu_check: stages ${SELECTED[*]}; budget $TOTAL s (table $SUM s); OUT=$OUTDIR WORK=$WORK"
[[ $MODE == gpu && $GPU == none* ]] && echo "gpu_check: WARNING: no GPU visible; for a run without one use --rehearse"
echo "$HEADER" | tee "$WORK/table.txt" >"$OUTDIR/table.txt"

tarball() {  # every log so far; rewritten after each stage
  tar -czf "$OUTDIR/logs.tar.gz.tmp" -C "$WORK" --exclude='checkpoints' --exclude='*.bin' --exclude='*.safetensors' \
    logs runs metrics results.jsonl table.txt meta.json 2>/dev/null
  mv -f "$OUTDIR/logs.tar.gz.tmp" "$OUTDIR/logs.tar.gz"
}
tarball  # from the start: a call stopped in the first stage still brings back a valid one
# row NAME STATUS SECONDS BUDGET DETAIL: print it, append it, results.json, tarball.
ANY_FAIL=0
row() {
  local line detail=$5
  [[ ${#detail} -gt 170 ]] && detail="${detail:0:167}..."
  line=$(printf '%-14s %-6s %6s  %s' "$1" "$2" "$3" "$detail")
  echo "$line"
  echo "$line" >>"$WORK/table.txt"
  echo "$line" >>"$OUTDIR/table.txt"
  "${REPORT[@]}" record "$META" "$WORK/results.jsonl" "$OUTDIR/results.json" "$1" "$2" "$3" "$4" \
    "$5" "$WORK/metrics/$1.json"
  [[ $2 == FAIL ]] && ANY_FAIL=1
  tarball
}
# What a stage needs that an earlier stage (or call) makes: nothing when it is there, else
# "REASON<TAB>DETAIL" for a `skip (REASON) DETAIL` row.
missing_input() {
  local t=$'\t'
  case $1 in
    debs) compgen -G 'gpu_deps/*.deb' >/dev/null || echo "no gpu_deps${t}run tools/fetch_gpu_deps.sh here, carry gpu_deps" ;;
    deps) [[ -d $LIB ]] || echo "needs unpack${t}$DEPS is empty" ;;
    cache) [[ -f $BUILD/CMakeCache.txt ]] || echo "needs configure${t}no $BUILD/CMakeCache.txt" ;;
    testbin)
      if [[ $REHEARSE == 1 ]]; then
        [[ -x $TESTBIN ]] || echo "rehearse: no GPU${t}and no CPU test binary $TESTBIN to stand in"
      else
        [[ -d $LIB ]] || echo "needs unpack${t}$DEPS is empty"
        [[ -x $TESTBIN ]] || echo "needs build${t}$TESTBIN missing"
      fi ;;
    ringstep)
      [[ -d $LIB ]] || echo "needs unpack${t}$DEPS is empty"
      if [[ ! -x $RINGSTEP && $REHEARSE == 1 ]]; then
        echo "rehearse: needs a CPU build${t}$RINGSTEP missing: cmake --build build --target ringstep"
      elif [[ ! -x $RINGSTEP ]]; then
        echo "needs build${t}$RINGSTEP missing"
      fi ;;
    benchbin)
      [[ $REHEARSE == 1 ]] && return
      [[ -x $BENCHBIN ]] || echo "needs build${t}$BENCHBIN missing" ;;
    ncclbin)
      [[ -x $NCCLBIN ]] || echo "needs build${t}$NCCLBIN missing" ;;
  esac
}

# Stopped from outside (the device tool's limit, ^C): end the running stage too (timeout
# passes the signal on to its process group); results.json still names it as running.
STAGE_PID='' CURRENT=''
on_signal() {
  [[ -n $STAGE_PID ]] && kill -TERM "$STAGE_PID" 2>/dev/null
  echo "gpu_check: stopped from outside during stage '${CURRENT:-none}'; results.json and logs.tar.gz hold the stages before it"
  exit 143
}
trap on_signal TERM INT HUP

for name in "${SELECTED[@]}"; do
  for i in "${!NAMES[@]}"; do [[ ${NAMES[$i]} == "$name" ]] && break; done
  budget=${BUDGETS[$i]}
  left=$((TOTAL - ($(date +%s) - START)))
  minimum=$((budget < 5 ? budget : 5))
  if [[ $left -lt $minimum ]]; then
    row "$name" skip 0.0 "$budget" "(budget) $((left > 0 ? left : 0)) s left of the overall ${TOTAL} s ($(($(date +%s) - START)) s elapsed); this stage's budget is ${budget} s"
    continue
  fi
  why=$(missing_input "${NEEDS[$i]}" | head -n 1)
  if [[ -n $why ]]; then
    row "$name" skip 0.0 "$budget" "(${why%%$'\t'*}) ${why#*$'\t'}"
    continue
  fi
  tmo=$((budget < left ? budget : left))
  "${REPORT[@]}" running "$META" "$WORK/results.jsonl" "$OUTDIR/results.json" "$name" "$budget"
  rm -f "$WORK/result/$name" "$WORK/highlights/$name" "$WORK/metrics/$name.json"
  t0=$(date +%s%N)
  CURRENT=$name
  timeout -k 3 "$tmo" bash "$SELF" --stage "$name" >"$WORK/logs/$name.log" 2>&1 &
  STAGE_PID=$!
  wait "$STAGE_PID"
  rc=$?
  STAGE_PID=
  secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    st=FAIL
    detail="timeout after ${tmo} s (budget ${budget} s)"
    [[ -s $WORK/result/$name ]] && detail+="; had: $(cut -f2 "$WORK/result/$name")"
    tail -n 5 "$WORK/logs/$name.log" >>"$WORK/highlights/$name" 2>/dev/null
  elif [[ -s $WORK/result/$name ]]; then
    IFS=$'\t' read -r st detail <"$WORK/result/$name"
  else
    st=FAIL
    detail="the stage died (rc=$rc) without a result; see logs/$name.log"
    tail -n 5 "$WORK/logs/$name.log" >>"$WORK/highlights/$name" 2>/dev/null
  fi
  row "$name" "$st" "$secs" "$budget" "$detail"
  if [[ -s $WORK/highlights/$name ]]; then
    head -n 20 "$WORK/highlights/$name" | cut -c1-200 | sed 's/^/    | /'
  fi
done

# The files the device tool brings back: at most MAX_OUT_FILES, flat, plain names.
chk=$("${REPORT[@]}" outfiles "$OUTDIR" "$MAX_OUT_FILES")
chk_status=${chk%%$'\t'*}
[[ $chk_status == FAIL ]] && ANY_FAIL=1

echo
echo "== ringstep gpu_check: mode $MODE, $(($(date +%s) - START)) s of $TOTAL s; gpu: $GPU; commit $COMMIT =="
cat "$WORK/table.txt"
echo "out: $chk_status ${chk#*$'\t'}"
echo "full details: $OUTDIR/results.json; logs: $OUTDIR/logs.tar.gz"
exit $ANY_FAIL
