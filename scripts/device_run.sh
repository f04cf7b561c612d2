#!/usr/bin/env bash
# One call on the GPU machine: build, test and bench in one go, logs and JSON under $OUT.
# The GPU machine reaches no package registry: CLI11, nlohmann-json and GoogleTest travel as
# Debian packages in .deps/ (fetched by scripts/fetch_device_deps.sh), unpacked into a prefix.
# OpenBLAS does not travel: the bench there reports no sgemm ceiling.
# Knobs (environment): SANITIZER_ONLY=1 (below); SHORT=1 for a call when device time is short (no ctest, no cudnn
# checks, plan tests or layer tests, no layer bench, no cp.async-only forced check, the sanitizers on the forced sm90
# kernel and cudnn's memcheck only); QUICK=1 runs 100 check cases and skips ctest, compute-sanitizer and
# pytest (kernel iterations); SKIP_CPU_BENCH=1; SKIP_GPU_BENCH=1 (attention; the layer bench runs); SKIP_LAYER_BENCH=1;
# SKIP_SANITIZER=1; PROFILE=workload[,..] (from PROFILE_WORKLOADS, a workloads file) adds an Nsight Compute
# report of one cuda kernel launch per workload (ncu_<workload>.txt); PROFILE_SOURCE=workload[,..]
# its stall samples per SASS instruction (logs/source_<workload>.csv); BENCH_ARGS go to bench/gpu_bench.py;
# VARIANTS (below) benches kernel variants picked by environment variables; VARIANTS_ONLY=1 skips
# every check and bench but those (kernel experiments); FORCED_CHECKS (below) checks settings on
# the forced sm90 kernel; CROSSOVER=1 benches cuda against cudnn
# by image length.
set -uo pipefail
OUT=${OUT:-/tmp/visattn-out}
LOGS=$OUT/logs  # tarred at the end: the device returns at most 8 files (the bench tables go to summary.txt)
mkdir -p "$LOGS"
trap 'tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"' EXIT
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
# A check's log: its failures (with the command that reproduces each), then its last N lines
# into the summary.
check_summary() { grep -E "FAIL|reproduce" "$1" | head -10; tail -"$2" "$1" | tee -a "$OUT/summary.txt"; }

[ -n "${SHORT:-}" ] && SKIP_LAYER_BENCH=1  # SHORT implies it
prefix=/tmp/visattn-deps
mkdir -p "$prefix"
for deb in .deps/*.deb; do
  dpkg -x "$deb" "$prefix" 2>/dev/null || (cd "$prefix" && ar p "$OLDPWD/$deb" data.tar.xz | tar -xJ)
done
export CMAKE_PREFIX_PATH="$prefix/usr:${CMAKE_PREFIX_PATH:-}"
export GTest_DIR="$prefix/usr/lib/x86_64-linux-gnu/cmake/GTest"

log "machine"; { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1;
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"; lscpu | grep 'Model name'; } 2>&1 | tee -a "$OUT/summary.txt"

# The cudnn backend builds from the frontend headers in .deps/cudnn-frontend/include (carry
# .deps) and loads libcudnn.so.9 from the loader's path (the system cuDNN); the knob
# CUDNN_FROM_TORCH=1 points it (VISATTN_CUDNN_LIB) at torch's pip cuDNN instead. In Python with
# torch imported, it shares the cuDNN torch loaded either way.
if [ -n "${CUDNN_FROM_TORCH:-}" ]; then
  VISATTN_CUDNN_LIB=$(python3 -c "import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], 'lib', 'libcudnn.so.9'))")
  export VISATTN_CUDNN_LIB
fi

log "build"
ARCHS=${ARCHS:-90-real}  # the H200; CI and `make` build every architecture
# SANITIZER_ONLY=1: the CLI alone, then memcheck and racecheck on the cuda backend (as below, and
# on the sm90 kernel forced onto 7 blocks, where every block walks many items) and one forced
# check; nothing else (a quick look at a change to the kernel's synchronization).
# PROFILE_SOURCE: line info in the kernels (no change to their code), so that each SASS address
# maps to a source line (logs/sm90_lines.sass, below).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVISATTN_CUDA_ARCHITECTURES="$ARCHS" \
  ${PROFILE_SOURCE:+-DCMAKE_CUDA_FLAGS=-lineinfo} > "$LOGS/build.log" 2>&1 && \
  cmake --build build -j "$(nproc)" ${SANITIZER_ONLY:+--target visattn_cli} >> "$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log"; exit 1; }
build/visattn info | tee -a "$OUT/summary.txt"

# The sm90 kernel forced onto every batch on 7 blocks, so that each block walks many items
# (phases carried across items, Q reloaded early, the snake order's turns).
FORCED_SM90="VISATTN_CUDA_SM90=1 VISATTN_CUDA_SM90_GRID=7"

# sanitize_cuda TOOL LABEL [VAR=value...]: compute-sanitizer's TOOL on 21 check cases of the cuda
# backend with those settings; its summary line into the summary. Case i has head dim
# kCheckedHeadDims[i / 3 % 7] (src/check/case.cpp): 21 cases reach every head dim (12 stopped
# at 80; head dims 96-256 then met a sanitizer only in the forced gtests below).
sanitize_cuda() {
  local tool=$1 label=$2; shift 2
  env "$@" timeout 200 compute-sanitizer --tool "$tool" --error-exitcode 9 build/visattn check --backend cuda --cases 21 --seed 3 \
    > "$LOGS/sanitizer_${tool}_$label.log" 2>&1
  echo "$tool $label rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer_${tool}_$label.log" | tail -1)" | tee -a "$OUT/summary.txt"
}

# forced_check [VAR=value,...]: the forced sm90 kernel (FORCED_SM90) checked with those settings
# (100 cases).
forced_check() {
  log "check, sm90 forced on 7 blocks (${1:-default})"
  env $FORCED_SM90 ${1//,/ } timeout 120 build/visattn check --backend cuda \
    --cases 100 --seed 9 > "$LOGS/check_forced.log" 2>&1; check_summary "$LOGS/check_forced.log" 1
}

# sanitize_cuda_both TOOL: on the default cuda path and on the forced sm90 kernel (racecheck
# found the Q-in-registers hazard only there).
sanitize_cuda_both() {
  sanitize_cuda "$1" default
  sanitize_cuda "$1" forced $FORCED_SM90
}

# With SANITIZER_ONLY, SANITIZER_SETTINGS="VAR=value[,VAR=value] ..." adds both tools on the
# forced kernel with each setting (an experiment's knob), and FORCED_CHECKS (below) runs too.
# VARIANTS (below) are timed first, by the CLI's bench (unprepared calls of the cuda backend, no
# pip build: the cheapest A/B of a kernel knob) on VARIANT_WORKLOADS (default: the public suite).
if [ -n "${SANITIZER_ONLY:-}" ]; then
  for variant in ${VARIANTS:-}; do
    name=${variant%%:*}; settings=${variant#*:}
    log "variant $name ($settings), the CLI bench"
    env ${settings//,/ } timeout 120 build/visattn bench --backend cuda --no-layer \
      --workloads "${VARIANT_WORKLOADS:-bench/public_workloads.json}" --json "$OUT/bench_$name.json" > "$LOGS/bench_$name.log" 2>&1
    echo "rc=$?" >> "$LOGS/bench_$name.log"; grep -vE '^ +\[' "$LOGS/bench_$name.log" | tail -12 | tee -a "$OUT/summary.txt"
  done
  for tool in memcheck racecheck; do
    sanitize_cuda_both $tool
    n=0; for settings in ${SANITIZER_SETTINGS:-}; do
      n=$((n + 1)); sanitize_cuda $tool forced$n $FORCED_SM90 ${settings//,/ }
    done
  done
  for settings in "" ${FORCED_CHECKS:-}; do forced_check "$settings"; done
  exit 0
fi

python_install() {
  python3 -m pip install -q --no-build-isolation --no-deps \
    --config-settings=cmake.define.VISATTN_CUDA_ARCHITECTURES="$ARCHS" . > "$LOGS/pip.log" 2>&1 || tail -20 "$LOGS/pip.log"
}

if [ -z "${VARIANTS_ONLY:-}" ]; then
if [ -z "${QUICK:-}${SHORT:-}" ]; then
log "ctest"
(cd build && ctest -j "$(nproc)" --timeout 300 --output-on-failure > "$LOGS/ctest.log" 2>&1); tail -3 "$LOGS/ctest.log" | tee -a "$OUT/summary.txt"

fi

log "check cuda"
timeout 300 build/visattn check --backend cuda --cases "$([ -n "${QUICK:-}" ] && echo 100 || echo 500)" > "$LOGS/check_cuda.log" 2>&1; check_summary "$LOGS/check_cuda.log" 4

log "check cuda, the sm80 kernel alone (VISATTN_CUDA_SM90=0)"
VISATTN_CUDA_SM90=0 build/visattn check --backend cuda --cases 200 --seed 5 > "$LOGS/check_cuda_sm80.log" 2>&1; check_summary "$LOGS/check_cuda_sm80.log" 1

log "check cuda, the sm90 (wgmma) kernel on every batch (VISATTN_CUDA_SM90=1) on 7 blocks, 128-key and wide key blocks, the tail path on most images, three warpgroups at head dim 64, cp.async copies only; its SASS (HGMMA: warpgroup MMAs)"
# A timeout: a wrong barrier phase in a new kernel hangs instead of failing. Seven blocks: each
# walks many items of the persistent grid (the full grid runs in the check above). Each key
# block size on every batch, whatever the lengths would pick; then a last block of up to 100
# keys on the tail path (mma.sync; by default at most 4); then the three-warpgroup form on every
# head dim 64 batch, its tail path too; then every tile copied by cp.async (TMA off: the path of
# partial tiles, and of a driver that encodes no tensor map); then head dim 128 without the pin
# (VISATTN_CUDA_SM90_PIN=0, its knob).
for keys in 128 wide tail three $([ -n "${SHORT:-}" ] || echo copies unpinned); do
  setting=$(case $keys in tail) echo VISATTN_CUDA_SM90_TAIL=100 ;; three) echo VISATTN_CUDA_SM90_GROUPS=3 VISATTN_CUDA_SM90_TAIL=100 ;;
            copies) echo VISATTN_CUDA_SM90_TMA=0 ;; unpinned) echo VISATTN_CUDA_SM90_PIN=0 ;; esac)
  block=$(case $keys in 128) echo VISATTN_CUDA_SM90_KEYS=128 ;; three) ;; *) echo VISATTN_CUDA_SM90_KEYS=wide ;; esac)
  env $FORCED_SM90 $block $setting \
    timeout 300 build/visattn check --backend cuda --cases 200 --seed 9 > "$LOGS/check_cuda_sm90_$keys.log" 2>&1
  echo "rc=$?" >> "$LOGS/check_cuda_sm90_$keys.log"; echo "keys $keys:" | tee -a "$OUT/summary.txt"; check_summary "$LOGS/check_cuda_sm90_$keys.log" 2
done
sm90_object=$(find build -name 'flash_fwd_sm90.cu.o' | head -1)
[ -n "$sm90_object" ] && cuobjdump -sass "$sm90_object" > "$LOGS/sm90.sass" 2>&1 && \
  echo "sm90 SASS: $(grep -c HGMMA "$LOGS/sm90.sass") HGMMA, $(grep -c 'WARPGROUP.DEPBAR' "$LOGS/sm90.sass") WARPGROUP.DEPBAR, $(grep -c 'SYNCS' "$LOGS/sm90.sass") SYNCS (mbarrier)" | tee -a "$OUT/summary.txt" && \
  python3 scripts/sass_loops.py "$LOGS/sm90.sass" --kernel bfloat16 --top 4 | tee -a "$OUT/summary.txt"

if [ -z "${SHORT:-}" ]; then
log "check cudnn (cases it declines are skipped with the reason; every other error fails)"
build/visattn check --backend cudnn --cases "$([ -n "${QUICK:-}" ] && echo 100 || echo 300)" > "$LOGS/check_cudnn.log" 2>&1; check_summary "$LOGS/check_cudnn.log" 8

log "cudnn plans and graphs (100 random batches, dense plans of uniform batches, capture/replay)"
build/tests/visattn_tests --gtest_filter='Cudnn*' > "$LOGS/cudnn_tests.log" 2>&1; grep -E "cudnn plans:|cudnn dense:|Skipped|FAILED|Failure|PASSED" -A2 "$LOGS/cudnn_tests.log" | head -20 | tee -a "$OUT/summary.txt"

log "layer on the GPU against the reference composition (issue 7)"
build/tests/visattn_tests --gtest_filter='Cuda/LayerMatchesComposition*' > "$LOGS/layer_tests.log" 2>&1
grep -E "^[a-z_0-9]+ cuda|FAILED|PASSED" "$LOGS/layer_tests.log" | head -16 | tee -a "$OUT/summary.txt"
fi

if [ -z "${QUICK:-}${SKIP_SANITIZER:-}" ]; then
log "compute-sanitizer (memcheck, racecheck) on a reduced suite"
for tool in memcheck racecheck; do
  if [ -n "${SHORT:-}" ]; then sanitize_cuda $tool forced $FORCED_SM90; else sanitize_cuda_both $tool; fi
  sanitize_cuda $tool forced_three $FORCED_SM90 VISATTN_CUDA_SM90_GROUPS=3  # its round-robin turns at head dim 64
done
# The adversarial gtests' shapes (class-token tails, tile and key-block edges) on the forced sm90
# kernel: racecheck over cases the 21 random check cases above do not meet. The tail path
# is off: its loads, ordered before one lane's "empty" arrival by __syncwarp, are hazards to
# racecheck, which follows only per-thread arrivals (bench/NOTES.md CUDA 34, 36).
env $FORCED_SM90 VISATTN_CUDA_SM90_TAIL=0 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 build/tests/visattn_tests \
  --gtest_filter='*AdversarialShapes*cuda_class_token*bf16:*AdversarialShapes*cuda_tile_edges*bf16:*AdversarialShapes*cuda_head_dim_128*bf16' > "$LOGS/sanitizer_racecheck_gtests.log" 2>&1
echo "racecheck forced gtests rc=$? $(grep -E 'RACECHECK SUMMARY' "$LOGS/sanitizer_racecheck_gtests.log" | tail -1) $(grep -E 'tests ran|PASSED|FAILED' "$LOGS/sanitizer_racecheck_gtests.log" | head -2 | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
# cudnn: does a ragged call read or write past an image (the last one, at the tensor's end)?
compute-sanitizer --tool memcheck --error-exitcode 9 build/visattn check --backend cudnn --cases 12 --seed 3 \
  > "$LOGS/sanitizer_memcheck_cudnn.log" 2>&1; echo "memcheck cudnn rc=$? $(grep -E 'ERROR SUMMARY' "$LOGS/sanitizer_memcheck_cudnn.log" | tail -1)" | tee -a "$OUT/summary.txt"
# the layer's own kernels (norm + rope, cuBLASLt calls, scratch) on the GPU
if [ -z "${SHORT:-}" ]; then
compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/visattn_tests --gtest_filter='Cuda/LayerMatchesComposition*bf16*' \
  > "$LOGS/sanitizer_memcheck_layer.log" 2>&1; echo "memcheck layer rc=$? $(grep -E 'ERROR SUMMARY' "$LOGS/sanitizer_memcheck_layer.log" | tail -1)" | tee -a "$OUT/summary.txt"
fi
fi

log "python"
python_install
# -s: the layer tests print their errors beside transformers' (issue 7's comparisons).
[ -n "${QUICK:-}" ] || { timeout 300 python3 -m pytest -q -s python/tests > "$LOGS/pytest.log" 2>&1;
  grep -E "visattn error" "$LOGS/pytest.log" | head -12 | tee -a "$OUT/summary.txt"; tail -3 "$LOGS/pytest.log" | tee -a "$OUT/summary.txt"; }

if [ -z "${SKIP_GPU_BENCH:-}" ]; then
log "gpu bench (cuda and cudnn backends beside the torch peers, bf16, one process)"
PYTHONUNBUFFERED=1 python3 bench/gpu_bench.py --workloads bench/public_workloads.json --json "$OUT/bench_gpu.json" ${BENCH_ARGS:-} \
  2> "$LOGS/gpu_bench_err.log" | tee -a "$OUT/summary.txt"; tail -5 "$LOGS/gpu_bench_err.log"
fi

if [ -z "${SKIP_LAYER_BENCH:-}" ]; then
log "layer bench (VisionAttentionLayer against the same layer in eager PyTorch, bf16, one process)"
PYTHONUNBUFFERED=1 python3 bench/layer_bench.py --workloads bench/public_workloads.json --json "$OUT/bench_layer.json" \
  2> "$LOGS/layer_bench_err.log" | tee -a "$OUT/summary.txt"; tail -5 "$LOGS/layer_bench_err.log"
fi
else
  log "python (variants only)"
  python_install
fi

# FORCED_CHECKS="VAR=value[,VAR=value] ...": before the variants, forced_check with each setting.
for settings in ${FORCED_CHECKS:-}; do forced_check "$settings"; done

# VARIANTS="name:VAR=value[,VAR=value] ...": kernel variants picked by environment variables,
# each checked (100 cases) and benched into bench_<name>.json (backends VARIANT_BACKENDS,
# default cuda, timed in that order; the check runs the first of them, cuda-eager as cuda).
for variant in ${VARIANTS:-}; do
  name=${variant%%:*}; settings=${variant#*:}; backends=${VARIANT_BACKENDS:-cuda}
  log "variant $name ($settings)"
  first=${backends%%,*}
  env ${settings//,/ } timeout 300 build/visattn check --backend "${first%-eager}" --cases 100 --seed 11 > "$LOGS/check_$name.log" 2>&1; tail -1 "$LOGS/check_$name.log" | tee -a "$OUT/summary.txt"
  env ${settings//,/ } PYTHONUNBUFFERED=1 timeout 300 python3 bench/gpu_bench.py --workloads bench/public_workloads.json --backends "$backends" \
    ${VARIANT_ARGS:-} --json "$OUT/bench_$name.json" 2>> "$LOGS/gpu_bench_err.log" | tee -a "$OUT/summary.txt"
done

# CROSSOVER=1: cuda vs cudnn on uniform batches of every image length (the table auto uses),
# prepared (ragged plans) and eager (dense plans); CROSSOVER_WORKLOADS another sweep (e.g.
# bench/crossover_d80_workloads.json: head dims 72 and 80, finer lengths), CROSSOVER_BACKENDS
# other columns.
if [ -n "${CROSSOVER:-}" ]; then
  log "crossover: cuda vs cudnn by head dim and image length"
  PYTHONUNBUFFERED=1 python3 bench/gpu_bench.py --workloads "${CROSSOVER_WORKLOADS:-bench/crossover_workloads.json}" \
    --backends "${CROSSOVER_BACKENDS:-cuda,cuda-eager,cudnn,cudnn-eager}" \
    --json "$OUT/bench_crossover.json" 2>> "$LOGS/gpu_bench_err.log" | tee -a "$OUT/summary.txt"
fi

# ncu ARGS... on the 4th cuda kernel launch of $workload's bench (past the warm-up); the
# workload from PROFILE_WORKLOADS (default bench/public_workloads.json).
ncu_one_launch() {
  ncu --kernel-name regex:flash_fwd --launch-skip 3 --launch-count 1 "$@" python3 bench/gpu_bench.py \
    --workloads "${PROFILE_WORKLOADS:-bench/public_workloads.json}" --backends cuda --only "$workload"
}

if [ -n "${PROFILE:-}" ]; then
  for workload in ${PROFILE//,/ }; do
    log "ncu: one cuda kernel launch of $workload"
    ncu_one_launch --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      > "$OUT/ncu_$workload.txt" 2>&1
    grep -E "Duration|Throughput|Achieved Occupancy|Registers|Stall|Issued Ipc|Warp Cycles|Block Limit|Grid Size" \
      "$OUT/ncu_$workload.txt" | head -40
  done
fi

# PROFILE_SOURCE=workload[,..]: where one cuda kernel launch's warps stall, per SASS instruction
# (ncu's source page as CSV in the logs: sampled stall reasons by instruction).
PROFILE_SOURCE=${PROFILE_SOURCE:-}
if [ -n "$PROFILE_SOURCE" ] && [ -n "${sm90_object:-}" ]; then  # the sm90 SASS with its source lines
  (mkdir -p /tmp/sm90_cubin && cd /tmp/sm90_cubin && cuobjdump -xelf all "$OLDPWD/$sm90_object" > /dev/null &&
    nvdisasm -g -c ./*.cubin > "$LOGS/sm90_lines.sass" 2>&1)
fi
for workload in ${PROFILE_SOURCE//,/ }; do
  log "ncu source counters: one cuda kernel launch of $workload"
  ncu_one_launch --section WarpStateStats --section SourceCounters -o "$LOGS/source_$workload" \
    > "$LOGS/source_$workload.log" 2>&1
  ncu -i "$LOGS/source_$workload.ncu-rep" --page source --csv --print-source sass > "$LOGS/source_$workload.csv" 2>&1
  echo "source_$workload.csv: $(wc -l < "$LOGS/source_$workload.csv") lines" | tee -a "$OUT/summary.txt"
done

if [ -z "${SKIP_CPU_BENCH:-}" ]; then
  log "bench (cpu backend on this host's CPU)"
  build/visattn bench --backend cpu --workloads bench/cpu_bars_workloads.json --scale 0.1 \
    --dtype f32,bf16 --json "$OUT/bench_cpu.json" 2>&1 | tail -8 | tee -a "$OUT/summary.txt"
fi
