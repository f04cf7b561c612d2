#!/bin/bash
# Issue 8 groundwork: checks our wgmma operand encodings (descriptors, swizzle, accumulator and
# register-A layouts) against a host reference and measures back-to-back wgmma throughput. On
# the GPU machine, from the repo root: run(command="bash scripts/wgmma_probe/run.sh")
set -u
cd "$(dirname "$0")"
nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe probe.cu
for mode in qk pv0 pv1 throughput; do /tmp/wgmma_probe $mode || true; done
