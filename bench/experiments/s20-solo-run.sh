#!/usr/bin/env bash
# The s20 device call for the solo-items experiment (VISATTN_CUDA_SM90_SOLO) and the drop-rows
# diagnostic (bench/experiments/s20-solo-and-drop.patch applied to the tree first): builds the Python module and the
# CLI only (no tests: the session had 450 s of device time left), checks the solo items on the
# default and the forced kernel, and benches clip, internvit and a token under each, per variant.
set -uo pipefail
OUT=${OUT:-/tmp/visattn-out}; mkdir -p "$OUT"
p=/tmp/dp; mkdir -p $p; for d in .deps/*.deb; do dpkg -x "$d" $p; done
export CMAKE_PREFIX_PATH=$p/usr
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVISATTN_CUDA_ARCHITECTURES=90-real \
  -DVISATTN_BUILD_PYTHON=ON -DVISATTN_BUILD_TESTS=OFF > "$OUT/build.log" 2>&1 &&
  cmake --build build -j16 --target _visattn visattn_cli >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
mkdir -p /tmp/py && cp -r python/visattn /tmp/py/ && cp "$(find build -name '_visattn*.so' | head -1)" /tmp/py/visattn/
export PYTHONPATH=/tmp/py
say() { echo "== $*" | tee -a "$OUT/summary.txt"; }
check() { env "$@" timeout 120 build/visattn check --backend cuda --cases 100 --seed 11 2>&1 | tail -1 | tee -a "$OUT/summary.txt"; }
say "check solo 4"; check VISATTN_CUDA_SM90_SOLO=4
say "check solo 64 (no turns anywhere), forced on 7 blocks"; check VISATTN_CUDA_SM90_SOLO=64 VISATTN_CUDA_SM90=1 VISATTN_CUDA_SM90_GRID=7
# S20_CHECKS="VAR=value[,VAR=value] ...": more checks on the forced kernel (s20-few-rows.patch's path).
for c in ${S20_CHECKS:-}; do say "check $c, forced on 7 blocks"; check ${c//,/ } VISATTN_CUDA_SM90=1 VISATTN_CUDA_SM90_GRID=7; done
# S20_VARIANTS: fewer variants where device time is short.
for v in ${S20_VARIANTS:-base:VISATTN_AB=0 solo4:VISATTN_CUDA_SM90_SOLO=4 drop4:VISATTN_CUDA_SM90_DROP_ROWS=4 \
         base2:VISATTN_AB=0 solo4b:VISATTN_CUDA_SM90_SOLO=4}; do
  say "variant ${v%%:*} (${v#*:})"
  env "${v#*:}" python3 bench/gpu_bench.py --workloads bench/experiments/s20-drop-workloads.json --backends cuda \
    --json "$OUT/bench_${v%%:*}.json" 2>> "$OUT/err.log" | grep -v "^#" | tee -a "$OUT/summary.txt"
done
tail -3 "$OUT/err.log"
