// Copies between the host and a layer's device, for weights at construction time and for
// gather_tokens. Device memory is freed when the last shared_ptr goes.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "visattn/tensor.h"

namespace visattn::layer {

// The elements of a 1-D or 2-D view (on any device) as f32, row-major.
std::vector<float> read_as_f32(const TensorView& view);
// `bytes` bytes copied onto `device`; a host copy for the CPU.
std::shared_ptr<void> copy_to_device(const void* host, size_t bytes, Device device);
// f32 values converted to `dtype` and copied onto `device`.
std::shared_ptr<void> store_on_device(const std::vector<float>& values, DType dtype, Device device);

}  // namespace visattn::layer
