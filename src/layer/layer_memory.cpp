#include "layer/layer_memory.h"

#include <cstdlib>
#include <cstring>

#if VISATTN_WITH_CUDA
#include "backends/cuda/device_metadata.h"  // cuda::check, cuda::DeviceGuard
#endif

#include "core/error_message.h"
#include "core/half.h"

namespace visattn::layer {

namespace {

// The bytes of a view's span (first to last element) on the host.
std::vector<unsigned char> host_bytes(const TensorView& view, int64_t span_elements) {
  const size_t bytes = size_t(span_elements) * dtype_size(view.dtype);
  std::vector<unsigned char> host(bytes);
  if (view.device.type == DeviceType::cpu) {
    std::memcpy(host.data(), view.data, bytes);
    return host;
  }
#if VISATTN_WITH_CUDA
  cuda::check(cudaMemcpy(host.data(), view.data, bytes, cudaMemcpyDeviceToHost), "reading weights from the GPU");
  return host;
#else
  fail(ErrorCode::backend_unavailable, "this build has no CUDA support");
#endif
}

}  // namespace

std::vector<float> read_as_f32(const TensorView& view) {
  const int64_t rows = view.rank == 2 ? view.shape[0] : 1;
  const int64_t cols = view.shape[view.rank - 1];
  const int64_t row_stride = view.rank == 2 ? view.stride[0] : 0;
  const int64_t col_stride = view.stride[view.rank - 1];
  if (rows == 0 || cols == 0) return {};
  const std::vector<unsigned char> bytes =
      host_bytes(view, (rows - 1) * row_stride + (cols - 1) * col_stride + 1);
  std::vector<float> values(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      values[size_t(r * cols + c)] = load_as_float(bytes.data(), view.dtype, r * row_stride + c * col_stride);
    }
  }
  return values;
}

std::shared_ptr<void> copy_to_device(const void* host, size_t bytes, Device device) {
  if (device.type == DeviceType::cpu) {
    std::shared_ptr<void> copy(std::malloc(bytes ? bytes : 1), std::free);
    if (!copy) fail(ErrorCode::internal, "out of host memory (", bytes, " bytes)");
    if (bytes) std::memcpy(copy.get(), host, bytes);
    return copy;
  }
#if VISATTN_WITH_CUDA
  const cuda::DeviceGuard guard(device.index);
  void* pointer = nullptr;
  cuda::check(cudaMalloc(&pointer, bytes ? bytes : 1), "allocating layer weights on the GPU");
  std::shared_ptr<void> copy(pointer, [](void* p) { cudaFree(p); });
  if (bytes) cuda::check(cudaMemcpy(pointer, host, bytes, cudaMemcpyHostToDevice), "copying layer weights to the GPU");
  return copy;
#else
  fail(ErrorCode::backend_unavailable, "this build has no CUDA support");
#endif
}

std::shared_ptr<void> store_on_device(const std::vector<float>& values, DType dtype, Device device) {
  std::vector<unsigned char> bytes(values.size() * size_t(dtype_size(dtype)));
  for (size_t i = 0; i < values.size(); ++i) store_from_float(bytes.data(), dtype, int64_t(i), values[i]);
  return copy_to_device(bytes.data(), bytes.size(), device);
}

}  // namespace visattn::layer
