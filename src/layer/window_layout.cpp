// Qwen2.5-VL's window layout (its get_window_index) and the row gather that applies it.
#include <algorithm>
#include <cstring>

#include "core/error_message.h"
#include "core/validate.h"
#include "layer/layer_kernels.h"
#include "visattn/layer.h"

namespace visattn {

WindowLayout qwen25vl_window_layout(const std::vector<std::array<int64_t, 3>>& grid_thw, int spatial_merge_size,
                                    int window_size, int patch_size) {
  if (spatial_merge_size <= 0 || patch_size <= 0 || window_size <= 0) {
    fail(ErrorCode::invalid_value, "spatial_merge_size=", spatial_merge_size, ", window_size=", window_size,
         ", patch_size=", patch_size, ": each must be > 0");
  }
  const int64_t side = window_size / spatial_merge_size / patch_size;  // merge units per window side
  if (side <= 0) {
    fail(ErrorCode::invalid_value, "window_size=", window_size, ": must be at least spatial_merge_size * patch_size = ",
         spatial_merge_size * patch_size);
  }
  const int64_t unit = int64_t(spatial_merge_size) * spatial_merge_size;  // tokens per merge unit
  std::vector<int64_t> unit_order;     // merge units in window order
  std::vector<int64_t> window_tokens;  // tokens per non-empty window
  std::vector<int64_t> frame_tokens;
  int64_t first_unit = 0;
  for (size_t image = 0; image < grid_thw.size(); ++image) {
    const auto [t, h, w] = grid_thw[image];
    if (t < 0 || h < 0 || w < 0 || h % spatial_merge_size || w % spatial_merge_size) {
      fail(ErrorCode::invalid_value, "grid_thw[", image, "]=(", t, ", ", h, ", ", w,
           "): t, h, w must be >= 0 and h, w multiples of spatial_merge_size=", spatial_merge_size);
    }
    const int64_t rows = h / spatial_merge_size, cols = w / spatial_merge_size;
    for (int64_t frame = 0; frame < t; ++frame) {
      frame_tokens.push_back(h * w);
      for (int64_t r0 = 0; r0 < rows; r0 += side) {
        for (int64_t c0 = 0; c0 < cols; c0 += side) {
          const int64_t r1 = std::min(rows, r0 + side), c1 = std::min(cols, c0 + side);
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t c = c0; c < c1; ++c) unit_order.push_back(first_unit + (frame * rows + r) * cols + c);
          }
          window_tokens.push_back((r1 - r0) * (c1 - c0) * unit);
        }
      }
    }
    first_unit += t * rows * cols;
  }
  std::vector<int64_t> permutation(unit_order.size() * size_t(unit)), inverse(permutation.size());
  for (size_t i = 0; i < unit_order.size(); ++i) {
    for (int64_t j = 0; j < unit; ++j) permutation[i * unit + j] = unit_order[i] * unit + j;
  }
  for (size_t i = 0; i < permutation.size(); ++i) inverse[size_t(permutation[i])] = int64_t(i);
  return WindowLayout{std::move(permutation), std::move(inverse), VarlenBatch::from_lengths(window_tokens),
                      VarlenBatch::from_lengths(frame_tokens)};
}

void gather_tokens(const TensorView& src, const int64_t* index, const TensorView& dst, void* cuda_stream) {
  for (auto [t, name] : {std::pair{&src, "src"}, std::pair{&dst, "dst"}}) {
    if (t->rank != 2 || t->shape[0] < 0 || t->shape[1] < 0 || t->stride[1] != 1 ||
        (t->shape[0] > 1 && t->stride[0] < t->shape[1])) {
      fail(ErrorCode::invalid_value, name, ": expected [tokens, features] with contiguous rows that do not overlap, got shape ",
           t->shape_string(), " strides ", t->stride_string());
    }
  }
  if (dst.shape[1] != src.shape[1] || dst.dtype != src.dtype || !(dst.device == src.device)) {
    fail(ErrorCode::invalid_value, "dst: ", dst.shape_string(), " ", dtype_name(dst.dtype), " on ", device_name(dst.device),
         " does not match src: ", src.shape_string(), " ", dtype_name(src.dtype), " on ", device_name(src.device));
  }
  const int64_t rows = dst.shape[0], esize = dtype_size(src.dtype), row_bytes = src.shape[1] * esize;
  if (rows > 0 && !index) fail(ErrorCode::invalid_value, "index: null");
  if (rows > 0 && row_bytes > 0 && (!src.data || !dst.data)) fail(ErrorCode::invalid_value, "src or dst: data is null");
  check_aligned(src, "src");
  check_aligned(dst, "dst");
  if (src.device.type == DeviceType::cpu) {
    for (int64_t i = 0; i < rows; ++i) {
      if (index[i] < 0 || index[i] >= src.shape[0]) {
        fail(ErrorCode::invalid_value, "index[", i, "]=", index[i], ": must be in [0, ", src.shape[0], ")");
      }
    }
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(static_cast<char*>(dst.data) + i * dst.stride[0] * esize,
                  static_cast<const char*>(src.data) + index[i] * src.stride[0] * esize, size_t(row_bytes));
    }
    return;
  }
#if VISATTN_WITH_CUDA
  layer::launch_gather_rows(src.data, src.stride[0] * esize, index, dst.data, dst.stride[0] * esize, rows, row_bytes,
                            cuda_stream);
#else
  (void)cuda_stream;
  fail(ErrorCode::backend_unavailable, "src: on ", device_name(src.device), ", but this build has no CUDA support");
#endif
}

}  // namespace visattn
