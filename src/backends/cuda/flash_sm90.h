// The Hopper (sm90a) forward kernel's entry points (flash_fwd_sm90.cu, compiled for sm_90a only,
// present when VISATTN_WITH_SM90A is defined).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/flash_params.h"

namespace visattn::cuda {

// Launches `kernel` (one of the sm90 ones; bf16, else f16): 128 keys per block or
// sm90_wide_keys(head_dim_pad), or three consumer warpgroups (head dim 64, 128 keys); an image's
// last key block added by mma.sync where it holds at most tail_limit keys. The caller checked
// the GPU (compute capability 9.0), the head dim (Sm90HeadDims) and 16-byte copies
// (params.vector_io).
cudaError_t launch_flash_forward_sm90(const KernelParams& params, bool bf16, int head_dim_pad, Kernel kernel,
                                      int tail_limit, dim3 grid, cudaStream_t stream);

}  // namespace visattn::cuda
