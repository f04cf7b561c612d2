// Fuzzes VarlenBatch construction, attention()'s validation and the attention layer (config,
// weights, activations, rope tables; the window layout and token gather) with arbitrary
// metadata, shapes, strides, dtypes and options over buffers sized exactly to each view. Properties:
// only visattn::Error is ever thrown, nothing reads or writes outside a view (ASan), no UB
// (UBSan), and a rejected call leaves out and lse byte-for-byte untouched.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "visattn/visattn.h"

namespace {

using visattn::DType;
using visattn::TensorView;

constexpr int64_t kMaxElements = 1 << 16;

// A view with fuzzed shape and strides over a buffer exactly as large as the view reaches.
struct FuzzedTensor {
  std::vector<unsigned char> bytes;
  TensorView view;

  FuzzedTensor(FuzzedDataProvider& in, DType dtype, int rank, const int64_t* base_shape) {
    view.dtype = dtype;
    view.rank = rank;
    int64_t reach = 0;
    bool empty = false;
    for (int i = rank - 1; i >= 0; --i) {
      view.shape[i] = in.ConsumeBool() ? base_shape[i] : in.ConsumeIntegralInRange<int64_t>(-1, 9);
      const int64_t natural = i == rank - 1 ? 1 : view.shape[i + 1] * view.stride[i + 1];
      view.stride[i] = in.ConsumeBool() ? natural : in.ConsumeIntegralInRange<int64_t>(-2, 300);
      if (view.shape[i] <= 0) empty = true;
      if (view.shape[i] > 0 && view.stride[i] > 0) reach += (view.shape[i] - 1) * view.stride[i];
    }
    const int64_t elements = empty ? 1 : reach + 1;
    bytes.assign(std::min(elements, kMaxElements) * visattn::dtype_size(dtype) + 8, 0x5a);
    const int misalign = in.ConsumeIntegralInRange<int>(0, 8) == 0 ? 1 : 0;  // sometimes unaligned
    view.data = bytes.data() + misalign;
    if (elements > kMaxElements) view.data = nullptr;  // too large to back: rely on validation
    view.device = in.ConsumeIntegralInRange<int>(0, 20) == 0
                      ? visattn::Device{visattn::DeviceType::cuda, 0}
                      : visattn::Device{};
  }
};

std::vector<int64_t> fuzzed_offsets(FuzzedDataProvider& in) {
  std::vector<int64_t> values(in.ConsumeIntegralInRange<size_t>(0, 8));
  int64_t running = 0;
  for (auto& value : values) {
    running += in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, 40)
                                : in.ConsumeIntegral<int32_t>();
    value = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? in.ConsumeIntegral<int64_t>() : running;
  }
  if (!values.empty() && in.ConsumeBool()) values[0] = 0;
  return values;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  try {
    // 1. The metadata builders on arbitrary input.
    const std::vector<int64_t> offsets = fuzzed_offsets(in);
    std::optional<int64_t> max_seqlen;
    if (in.ConsumeBool()) max_seqlen = in.ConsumeIntegralInRange<int64_t>(-5, 400);
    visattn::VarlenBatch batch = visattn::VarlenBatch::uniform(0, 0);
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: batch = visattn::VarlenBatch::from_cu_seqlens(offsets, max_seqlen); break;
      case 1: {
        const std::vector<int32_t> narrow(offsets.begin(), offsets.end());
        batch = visattn::VarlenBatch::from_cu_seqlens(narrow, max_seqlen);
        break;
      }
      case 2: batch = visattn::VarlenBatch::from_lengths(offsets); break;
      default:
        batch = visattn::VarlenBatch::uniform(in.ConsumeIntegralInRange<int64_t>(-1, 6),
                                              in.ConsumeIntegralInRange<int64_t>(-1, 50));
    }
    (void)batch.batch_bucket();
    (void)batch.max_seqlen_bucket();
    (void)batch.packed_indptrs(in.ConsumeIntegral<int32_t>(), in.ConsumeIntegral<int16_t>(),
                               in.ConsumeIntegralInRange<int64_t>(-1, 1 << 20));
  } catch (const visattn::Error&) {
  }

  try {
    // 2. attention() on fuzzed views; small enough for the reference backend to finish.
    const std::vector<int64_t> lengths = {in.ConsumeIntegralInRange<int64_t>(0, 6),
                                          in.ConsumeIntegralInRange<int64_t>(0, 6)};
    const visattn::VarlenBatch batch = visattn::VarlenBatch::from_lengths(lengths);
    const DType dtype = in.PickValueInArray({DType::f32, DType::f16, DType::bf16});
    const int rank = in.ConsumeIntegralInRange<int>(0, 12) == 0 ? 4 : 3;
    const int64_t heads = in.ConsumeIntegralInRange<int64_t>(0, 4);
    const int64_t kv_heads = in.ConsumeIntegralInRange<int64_t>(0, 4);
    const int64_t dim = in.ConsumeIntegralInRange<int64_t>(0, 9);
    const int64_t tokens = batch.total_tokens();
    const int64_t q3[] = {tokens, heads, dim}, kv3[] = {tokens, kv_heads, dim};
    const int64_t q4[] = {2, lengths[0], heads, dim}, kv4[] = {2, lengths[0], kv_heads, dim};
    FuzzedTensor q(in, dtype, rank, rank == 3 ? q3 : q4);
    FuzzedTensor k(in, in.ConsumeIntegralInRange<int>(0, 10) ? dtype : DType::f32, rank,
                   rank == 3 ? kv3 : kv4);
    FuzzedTensor v(in, dtype, rank, rank == 3 ? kv3 : kv4);
    FuzzedTensor out(in, dtype, rank, rank == 3 ? q3 : q4);

    visattn::AttentionOptions options;
    if (in.ConsumeBool()) {
      options.softmax_scale = in.PickValueInArray({0.125, -1.0, 1e300, double(NAN), double(INFINITY)});
    }
    options.window_left = in.ConsumeIntegralInRange<int64_t>(-3, 8);
    options.window_right = in.ConsumeIntegralInRange<int64_t>(-3, 8);
    const int64_t sinks_shape[] = {heads, 1}, lse_shape[] = {heads, tokens};
    std::optional<FuzzedTensor> sinks, lse;
    if (in.ConsumeBool()) {
      sinks.emplace(in, DType::f32, in.ConsumeIntegralInRange<int>(0, 8) ? 1 : 2, sinks_shape);
      options.sinks = sinks->view;
    }
    if (in.ConsumeBool()) {
      lse.emplace(in, DType::f32, 2, lse_shape);
      options.lse = lse->view;
    }
    const std::vector<unsigned char> out_before = out.bytes;
    const std::vector<unsigned char> lse_before = lse ? lse->bytes : std::vector<unsigned char>{};
    try {
      visattn::attention(q.view, k.view, v.view, out.view, batch, options,
                         in.ConsumeBool() ? "auto" : "reference");
    } catch (const visattn::Error&) {
      if (out.bytes != out_before || (lse && lse->bytes != lse_before)) std::abort();
    }
  } catch (const visattn::Error&) {
  }

  try {
    // 3. The attention layer: fuzzed config, weights (present or not), x, out and rope tables.
    using visattn::QkNorm, visattn::Rope;
    visattn::VisionAttentionConfig c;
    c.embed_dim = in.ConsumeIntegralInRange<int64_t>(-1, 24);
    c.num_heads = in.ConsumeIntegralInRange<int>(-1, 4);
    c.num_kv_heads = in.ConsumeIntegralInRange<int>(-1, 4);
    c.head_dim = in.ConsumeIntegralInRange<int>(-1, 9);
    c.qkv_bias = in.ConsumeBool(), c.proj_bias = in.ConsumeBool();
    c.qk_norm = in.PickValueInArray({QkNorm::none, QkNorm::full, QkNorm::per_head});
    c.qk_norm_eps = in.PickValueInArray({1e-6, 0.0, -1.0, double(NAN)});
    c.rope = in.PickValueInArray({Rope::none, Rope::rotate_half});
    // The sizes a valid layer would have (the views sometimes take them, sometimes not).
    const int64_t heads = std::max(c.num_heads, 1), kv = c.num_kv_heads > 0 ? c.num_kv_heads : heads;
    const int64_t d = c.head_dim > 0 ? c.head_dim : std::max<int64_t>(1, c.embed_dim / heads);
    const int64_t embed = std::max<int64_t>(c.embed_dim, 0), q_features = heads * d;
    const int64_t features = q_features + 2 * kv * d;
    const bool full = c.qk_norm == QkNorm::full;
    const DType dtype = in.PickValueInArray({DType::f32, DType::f16, DType::bf16});
    const int64_t qkv_w_shape[] = {features, embed}, qkv_b_shape[] = {features},
                  proj_w_shape[] = {embed, q_features}, proj_b_shape[] = {embed},
                  q_norm_shape[] = {full ? q_features : d}, k_norm_shape[] = {full ? kv * d : d};
    FuzzedTensor qkv_w(in, dtype, 2, qkv_w_shape), proj_w(in, dtype, 2, proj_w_shape);
    std::optional<FuzzedTensor> qkv_b, proj_b, q_norm, k_norm;
    visattn::VisionAttentionWeights w;
    w.qkv_weight = qkv_w.view, w.proj_weight = proj_w.view;
    if (in.ConsumeBool()) qkv_b.emplace(in, dtype, 1, qkv_b_shape), w.qkv_bias = qkv_b->view;
    if (in.ConsumeBool()) proj_b.emplace(in, dtype, 1, proj_b_shape), w.proj_bias = proj_b->view;
    if (in.ConsumeBool()) q_norm.emplace(in, DType::f32, 1, q_norm_shape), w.q_norm_weight = q_norm->view;
    if (in.ConsumeBool()) k_norm.emplace(in, DType::bf16, 1, k_norm_shape), w.k_norm_weight = k_norm->view;
    const visattn::VisionAttentionLayer layer(c, w);

    const std::vector<int64_t> lengths = {in.ConsumeIntegralInRange<int64_t>(0, 5),
                                          in.ConsumeIntegralInRange<int64_t>(0, 5)};
    const visattn::VarlenBatch batch = visattn::VarlenBatch::from_lengths(lengths);
    const int64_t tokens = batch.total_tokens();
    const int64_t act_shape[] = {tokens, embed}, rope_shape[] = {tokens, in.ConsumeBool() ? d : d / 2};
    FuzzedTensor x(in, dtype, 2, act_shape), out(in, dtype, 2, act_shape);
    visattn::VisionAttentionCall call;
    std::optional<FuzzedTensor> cos, sin;
    if (in.ConsumeBool()) cos.emplace(in, DType::f32, 2, rope_shape), call.cos = cos->view;
    if (in.ConsumeBool()) sin.emplace(in, DType::f32, 2, rope_shape), call.sin = sin->view;
    call.backend = in.ConsumeBool() ? "auto" : "reference";
    const std::vector<unsigned char> out_before = out.bytes;
    try {
      layer.forward(x.view, batch, out.view, call);
    } catch (const visattn::Error&) {
      if (out.bytes != out_before) std::abort();
    }
  } catch (const visattn::Error&) {
  }

  try {
    // 4. Qwen2.5-VL's window layout on fuzzed grids, then its permutation applied to a view.
    std::vector<std::array<int64_t, 3>> grids(in.ConsumeIntegralInRange<size_t>(0, 3));
    for (auto& g : grids) {
      for (int64_t& v : g) v = in.ConsumeIntegralInRange<int64_t>(-1, 12);
    }
    const visattn::WindowLayout layout = visattn::qwen25vl_window_layout(
        grids, in.ConsumeIntegralInRange<int>(-1, 3), in.ConsumeIntegralInRange<int>(-1, 120),
        in.ConsumeIntegralInRange<int>(-1, 16));
    const int64_t rows = int64_t(layout.permutation.size());
    const int64_t shape[] = {rows, in.ConsumeIntegralInRange<int64_t>(0, 4)};
    FuzzedTensor src(in, DType::bf16, 2, shape), dst(in, DType::bf16, 2, shape);
    std::vector<int64_t> index = layout.permutation;
    index.resize(size_t(std::max<int64_t>(dst.view.shape[0], 0)), 0);  // the contract: one per dst row
    if (!index.empty() && in.ConsumeBool()) index[0] = in.ConsumeIntegral<int64_t>();
    visattn::gather_tokens(src.view, index.data(), dst.view);
  } catch (const visattn::Error&) {
  }
  return 0;
}
