// The index tensors of cuDNN's ragged (packed) attention, computed from cu_seqlens: each
// image's length, and for each tensor the element offset of each image's first token. They
// are written on the GPU at every call (a tiny kernel reading the prepared cu_seqlens), so an
// attention call copies nothing from the host and can be captured in a CUDA graph; the offsets
// depend on the call's strides, which a prepared batch does not know.
//
// Plain C++ (no CUDA headers): the host reference below is what the tests check the math with.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define VISATTN_HOST_DEVICE __host__ __device__
#else
#define VISATTN_HOST_DEVICE
#endif

struct CUstream_st;  // cudaStream_t

namespace visattn::cudnn {

// The tensors with ragged offsets, in the order of their arrays in the device metadata.
enum RaggedTensor { kRaggedQ, kRaggedK, kRaggedV, kRaggedOut, kRaggedLse, kRaggedTensors };

struct RaggedIndexArgs {
  const int32_t* cu_seqlens;  // >= batch + 1 entries (padding images repeat the last offset)
  int64_t batch;              // images of the plan: the batch's bucket, >= its real images
  int32_t* seq_len;           // out: batch entries
  int64_t* offsets[kRaggedTensors];       // out: batch + 1 entries each
  int64_t token_stride[kRaggedTensors];  // elements between consecutive tokens of each tensor
};

// Image b's entries. Offsets are int64 (cuDNN >= 9.5 takes them): tokens x stride passes int32
// on long batches of fused qkv buffers.
VISATTN_HOST_DEVICE inline int32_t image_length(const int32_t* cu_seqlens, int64_t b) {
  return cu_seqlens[b + 1] - cu_seqlens[b];
}
VISATTN_HOST_DEVICE inline int64_t ragged_offset(const int32_t* cu_seqlens, int64_t b,
                                                 int64_t token_stride) {
  return int64_t{cu_seqlens[b]} * token_stride;
}

// What the kernel computes, on host memory.
inline void ragged_indices_host(const RaggedIndexArgs& args) {
  for (int64_t b = 0; b <= args.batch; ++b) {
    if (b < args.batch) args.seq_len[b] = image_length(args.cu_seqlens, b);
    for (int t = 0; t < kRaggedTensors; ++t) {
      args.offsets[t][b] = ragged_offset(args.cu_seqlens, b, args.token_stride[t]);
    }
  }
}

// The same on the GPU, in stream order; all pointers are device pointers. Returns the
// cudaError_t of the launch.
int launch_ragged_indices(const RaggedIndexArgs& args, CUstream_st* stream);

}  // namespace visattn::cudnn
