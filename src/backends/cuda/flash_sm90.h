// The Hopper (sm90a) forward kernel's entry points (flash_fwd_sm90.cu, compiled for sm_90a only,
// present when VISATTN_WITH_SM90A is defined).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/flash_params.h"

namespace visattn::cuda {

// Launches it (bf16, else f16) with 128 keys per block or sm90_wide_keys(head_dim_pad), an
// image's last key block added by mma.sync where it holds at most tail_limit keys; the
// caller checked the GPU (compute capability 9.0), the head dim (Sm90HeadDims) and 16-byte
// copies (params.vector_io).
cudaError_t launch_flash_forward_sm90(const KernelParams& params, bool bf16, int head_dim_pad, bool wide_keys,
                                      int tail_limit, dim3 grid, cudaStream_t stream);

}  // namespace visattn::cuda
