#include <cuda_runtime.h>

#include "backends/cudnn/ragged_indices.h"

namespace visattn::cudnn {

namespace {

// One thread per entry b in [0, batch]: a batch is at most a few thousand images.
__global__ void ragged_indices_kernel(RaggedIndexArgs args) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b > args.batch) return;
  if (b < args.batch) args.seq_len[b] = image_length(args.cu_seqlens, b);
#pragma unroll
  for (int t = 0; t < kRaggedTensors; ++t) {
    args.offsets[t][b] = ragged_offset(args.cu_seqlens, b, args.token_stride[t]);
  }
}

}  // namespace

int launch_ragged_indices(const RaggedIndexArgs& args, CUstream_st* stream) {
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((args.batch + 1 + kThreads - 1) / kThreads);
  ragged_indices_kernel<<<blocks, kThreads, 0, stream>>>(args);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace visattn::cudnn
