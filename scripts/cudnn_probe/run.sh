#!/bin/bash
# Issue 5 groundwork: does the installed cuDNN run ragged (THD) SDPA the way the cudnn backend
# needs (fused-qkv strided views, GQA, zero-length sequences, LSE, head dims 72/80, graph
# capture)? On the GPU machine, from the repo root, with the frontend headers fetched by
# scripts/fetch_device_deps.sh into .deps/cudnn-frontend/include:
#   run(command="bash scripts/cudnn_probe/run.sh", carry=[".deps"])
set -u
cd "$(dirname "$0")"
FE=../../.deps/cudnn-frontend/include
P=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])" 2>/dev/null)
echo "torch's cudnn package: $P"
grep -h "define CUDNN_MAJOR\|define CUDNN_MINOR\|define CUDNN_PATCHLEVEL" "$P/include/cudnn_version.h"
g++ -std=c++17 -O1 -w -c -I"$FE" -I"$P/include" -I/usr/local/cuda/include probe.cpp -o /tmp/probe.o || exit 1
g++ /tmp/probe.o -o /tmp/probe -L/usr/local/cuda/lib64 -lcudart -lnvrtc "$P/lib/libcudnn.so.9" || exit 1
LD_LIBRARY_PATH=$P/lib:${LD_LIBRARY_PATH:-} timeout 300 /tmp/probe
