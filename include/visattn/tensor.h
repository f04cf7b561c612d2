// visattn: element types, devices and the non-owning strided tensor view.
#pragma once

#include <cstdint>
#include <string>

namespace visattn {

enum class DType { f32, f16, bf16 };

const char* dtype_name(DType dtype);
int dtype_size(DType dtype);  // bytes per element

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // GPU ordinal; 0 for the CPU
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
};

std::string device_name(Device device);  // "cpu", "cuda:1"

// A non-owning view of up to 4 dimensions. Strides are in elements, not bytes.
// Attention takes q, k, v and out as [tokens, heads, head_dim] (any token and head stride,
// head_dim contiguous, so q/k/v may be views into one fused qkv buffer) or as
// [batch, seq, heads, head_dim] for uniform batches.
struct TensorView {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};

  // Contiguous (row-major) view of the given shape.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = {});
  // Explicit shape and strides; strides.size() must equal shape.size().
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides, Device device = {});

  int64_t numel() const;  // -1 if a dimension is negative or the product overflows
  std::string shape_string() const;   // "[12, 16, 64]"
  std::string stride_string() const;  // "(1024, 64, 1)"
};

}  // namespace visattn
