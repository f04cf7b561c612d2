#include "check/case_data.h"

#include <algorithm>
#include <random>

#include "core/half.h"

namespace visattn::check {

namespace {

constexpr uint32_t kPoison32 = 0x7fa5a5a5u;  // a NaN no arithmetic produces
constexpr uint16_t kPoison16 = 0x7fa5u;      // a NaN in bf16 and in f16

int64_t offset_of(const TensorView& v, int64_t token, int64_t head, int64_t c) {
  return token * v.stride[0] + head * v.stride[1] + c * v.stride[2];
}

// Fills storage (sized for `elements` of dtype) with the poison pattern.
void poison(std::vector<uint32_t>& storage, DType dtype, int64_t elements) {
  const int64_t words = (elements * dtype_size(dtype) + 3) / 4;
  const uint32_t word = dtype == DType::f32 ? kPoison32 : (uint32_t(kPoison16) << 16 | kPoison16);
  storage.assign(std::max<int64_t>(words, 1), word);
}

bool is_poison(const void* base, DType dtype, int64_t i) {
  return dtype == DType::f32 ? static_cast<const uint32_t*>(base)[i] == kPoison32
                             : static_cast<const uint16_t*>(base)[i] == kPoison16;
}

// Strides (token, head) and start offset, in elements, of a [tokens, heads, head_dim] tensor
// laid out in storage of `row` elements per token.
TensorView make_view(void* base, DType dtype, int64_t start, int64_t tokens, int64_t heads,
                     int64_t head_dim, int64_t token_stride, int64_t head_stride) {
  void* data = static_cast<char*>(base) + start * dtype_size(dtype);
  return TensorView::strided(data, dtype, {tokens, heads, head_dim},
                             {token_stride, head_stride, 1});
}

void fill_normal(const TensorView& v, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t t = 0; t < v.shape[0]; ++t)
    for (int64_t h = 0; h < v.shape[1]; ++h)
      for (int64_t c = 0; c < v.shape[2]; ++c)
        store_from_float(v.data, v.dtype, offset_of(v, t, h, c), normal(rng));
}

}  // namespace

float element(const TensorView& view, int64_t token, int64_t head, int64_t c) {
  return load_as_float(view.data, view.dtype, offset_of(view, token, head, c));
}

std::vector<float> read_all(const TensorView& view) {
  std::vector<float> values;
  values.reserve(view.numel());
  for (int64_t t = 0; t < view.shape[0]; ++t)
    for (int64_t h = 0; h < view.shape[1]; ++h)
      for (int64_t c = 0; c < view.shape[2]; ++c) values.push_back(element(view, t, h, c));
  return values;
}

CaseData make_case_data(const CaseSpec& s) {
  CaseData d;
  std::mt19937_64 rng(s.seed * 1000003u + uint64_t(s.index));
  d.batch = VarlenBatch::from_lengths(s.lengths);
  const int64_t T = d.batch.total_tokens(), H = s.num_heads, Hk = s.num_kv_heads, D = s.head_dim;
  const DType dt = s.dtype;

  // Inputs: one storage, three views placed by the layout; a random pad per row.
  const int64_t pad = s.input_layout == InputLayout::padded_tokens ? 1 + int64_t(rng() % 13) : 0;
  int64_t q_start = 0, k_start = 0, v_start = 0, total = 0;
  int64_t q_ts = 0, q_hs = 0, kv_ts = 0, kv_hs = 0;
  switch (s.input_layout) {
    case InputLayout::separate:
    case InputLayout::padded_tokens:
      q_ts = H * D + pad, kv_ts = Hk * D + pad, q_hs = kv_hs = D;
      k_start = T * q_ts + pad;
      v_start = k_start + T * kv_ts + pad;
      total = v_start + T * kv_ts + pad;
      break;
    case InputLayout::fused_qkv:
      q_ts = kv_ts = (H + 2 * Hk) * D, q_hs = kv_hs = D;
      k_start = H * D;
      v_start = (H + Hk) * D;
      total = T * q_ts;
      break;
    case InputLayout::head_major:
      q_ts = kv_ts = D, q_hs = kv_hs = T * D;
      k_start = H * T * D;
      v_start = k_start + Hk * T * D;
      total = v_start + Hk * T * D;
      break;
  }
  poison(d.input_storage, dt, total);
  void* in = d.input_storage.data();
  d.q = make_view(in, dt, q_start, T, H, D, q_ts, q_hs);
  d.k = make_view(in, dt, k_start, T, Hk, D, kv_ts, kv_hs);
  d.v = make_view(in, dt, v_start, T, Hk, D, kv_ts, kv_hs);
  for (const TensorView* view : {&d.q, &d.k, &d.v}) fill_normal(*view, rng);

  // Output: guard elements before and after, padding per row where the layout has it.
  constexpr int64_t kGuard = 8;
  int64_t o_ts = H * D, o_hs = D, o_total = T * H * D;
  if (s.output_layout == OutputLayout::padded_tokens) {
    o_ts = H * D + 3;
    o_total = T * o_ts;
  } else if (s.output_layout == OutputLayout::head_major) {
    o_ts = D, o_hs = T * D;
  }
  // In even cases out starts on a 64-byte boundary, as tensors from PyTorch's allocator do
  // (the cpu backend then writes whole lines); in odd ones right after the guard, wherever
  // the allocation put it.
  const int64_t line = 64 / dtype_size(dt);
  poison(d.output_storage, dt, o_total + 2 * kGuard + line);
  int64_t o_start = kGuard;
  if (s.index % 2 == 0) {
    const auto address = reinterpret_cast<uintptr_t>(d.output_storage.data()) + kGuard * dtype_size(dt);
    o_start += int64_t((64 - address % 64) % 64) / dtype_size(dt);
  }
  d.out = make_view(d.output_storage.data(), dt, o_start, T, H, D, o_ts, o_hs);

  d.options.softmax_scale = s.softmax_scale;
  d.options.window_left = s.window_left;
  d.options.window_right = s.window_right;
  if (s.sinks) {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (int64_t h = 0; h < H; ++h) d.sink_values.push_back(normal(rng));
    d.sinks = TensorView::contiguous(d.sink_values.data(), DType::f32, {H});
    d.options.sinks = d.sinks;
  }
  if (s.lse) {
    poison(d.lse_storage, DType::f32, H * T + 2 * kGuard);
    d.lse = TensorView::contiguous(d.lse_storage.data() + kGuard, DType::f32, {H, T});
    d.options.lse = d.lse;
  }
  return d;
}

std::string check_untouched(const CaseData& d) {
  const TensorView& out = d.out;
  const int64_t elements = int64_t(d.output_storage.size()) * 4 / dtype_size(out.dtype);
  std::vector<bool> covered(elements, false);
  const int64_t start = (static_cast<const char*>(out.data) -
                         reinterpret_cast<const char*>(d.output_storage.data())) /
                        dtype_size(out.dtype);
  for (int64_t t = 0; t < out.shape[0]; ++t)
    for (int64_t h = 0; h < out.shape[1]; ++h)
      for (int64_t c = 0; c < out.shape[2]; ++c) covered[start + offset_of(out, t, h, c)] = true;
  for (int64_t i = 0; i < elements; ++i) {
    if (!covered[i] && !is_poison(d.output_storage.data(), out.dtype, i)) {
      return "out storage element " + std::to_string(i) + " outside the out view was written";
    }
  }
  if (d.lse) {
    const int64_t lse_start = static_cast<const uint32_t*>(d.lse->data) - d.lse_storage.data();
    const int64_t lse_end = lse_start + d.lse->numel();
    for (int64_t i = 0; i < int64_t(d.lse_storage.size()); ++i) {
      if ((i < lse_start || i >= lse_end) && !is_poison(d.lse_storage.data(), DType::f32, i)) {
        return "lse storage element " + std::to_string(i) + " outside the lse view was written";
      }
    }
  }
  return {};
}

}  // namespace visattn::check
