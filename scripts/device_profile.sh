#!/usr/bin/env bash
# Nsight Compute on the GPU machine: one launch of the cuda kernel per workload, full set, with
# the SASS-level stall samples, for kernel work (bench/NOTES.md). Run after device_run.sh
# built and installed the package:  WORKLOADS=hd128-long4 bash scripts/device_profile.sh
set -uo pipefail
OUT=${OUT:-/tmp/visattn-out}
mkdir -p "$OUT"
for w in ${WORKLOADS//,/ }; do
  ncu --set full --import-source yes -k regex:flash_fwd --launch-skip 3 --launch-count 1 -f -o "/tmp/prof_$w" \
    python3 bench/gpu_bench.py --workloads bench/public_workloads.json --backends cuda --only "$w" > /dev/null 2>&1
  ncu --import "/tmp/prof_$w.ncu-rep" --page details > "$OUT/ncu_$w.txt" 2>&1
  ncu --import "/tmp/prof_$w.ncu-rep" --page source --csv --print-source sass 2> /dev/null | gzip > "$OUT/sass_$w.csv.gz"
  grep -E "Duration|Issue Slots Busy|Achieved Occupancy|Registers Per|Eligible Warps|Warp Cycles Per Issued" "$OUT/ncu_$w.txt"
done
