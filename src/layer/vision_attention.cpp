// VisionAttentionLayer: checks its configuration and weights once, each call's arguments before
// anything is written, and runs the forward pass of its device.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/error_message.h"
#include "core/validate.h"
#include "layer/gemm_cpu.h"
#include "layer/layer_memory.h"
#include "layer/layer_state.h"
#include "visattn/attention.h"

#if VISATTN_WITH_CUDA
#include "layer/cublaslt.h"
#endif

namespace visattn {

using layer::LayerState;

namespace {

VisionAttentionConfig normalized(VisionAttentionConfig c) {
  if (c.embed_dim <= 0) fail(ErrorCode::invalid_value, "config.embed_dim=", c.embed_dim, ": must be > 0");
  if (c.num_heads <= 0) fail(ErrorCode::invalid_value, "config.num_heads=", c.num_heads, ": must be > 0");
  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.num_kv_heads < 0 || c.num_heads % c.num_kv_heads != 0) {
    fail(ErrorCode::invalid_value, "config.num_kv_heads=", c.num_kv_heads, ": must divide num_heads=",
         c.num_heads, " (or be 0 for num_heads)");
  }
  if (c.head_dim == 0) {
    if (c.embed_dim % c.num_heads != 0) {
      fail(ErrorCode::invalid_value, "config.head_dim=0 means embed_dim / num_heads, but embed_dim=",
           c.embed_dim, " is not a multiple of num_heads=", c.num_heads, ": give head_dim");
    }
    c.head_dim = int(c.embed_dim / c.num_heads);
  }
  if (c.head_dim <= 0) fail(ErrorCode::invalid_value, "config.head_dim=", c.head_dim, ": must be > 0");
  if (c.rope == Rope::rotate_half && c.head_dim % 2 != 0) {
    fail(ErrorCode::invalid_value, "config.head_dim=", c.head_dim, ": rope rotate_half needs an even head_dim");
  }
  if (c.qk_norm != QkNorm::none && !(c.qk_norm_eps > 0 && std::isfinite(c.qk_norm_eps))) {
    fail(ErrorCode::invalid_value, "config.qk_norm_eps=", c.qk_norm_eps, ": must be finite and > 0");
  }
  if (c.softmax_scale && !std::isfinite(*c.softmax_scale)) {
    fail(ErrorCode::invalid_value, "config.softmax_scale=", *c.softmax_scale, ": must be finite");
  }
  return c;
}

// A weight view: `rank` dims of the given sizes, rows contiguous, on the layer's device.
void check_weight(const TensorView& w, const char* name, std::initializer_list<int64_t> shape,
                  Device device, const DType* dtype) {
  const bool shape_ok = w.rank == int(shape.size()) &&
                        std::equal(shape.begin(), shape.end(), w.shape);
  if (!shape_ok) {
    TensorView expected;
    expected.rank = int(shape.size());
    std::copy(shape.begin(), shape.end(), expected.shape);
    fail(ErrorCode::invalid_value, "weights.", name, ": expected shape ", expected.shape_string(),
         ", got ", w.shape_string());
  }
  if (!w.data && w.numel() > 0) fail(ErrorCode::invalid_value, "weights.", name, ": data is null");
  check_aligned(w, concat("weights.", name).c_str());
  if (w.stride[w.rank - 1] != 1 || (w.rank == 2 && w.stride[0] < w.shape[1])) {
    fail(ErrorCode::invalid_value, "weights.", name, ": rows must be contiguous and not overlap, got strides ",
         w.stride_string());
  }
  if (!(w.device == device)) {
    fail(ErrorCode::invalid_type, "weights.", name, ": on ", device_name(w.device),
         ", but qkv_weight is on ", device_name(device));
  }
  if (dtype && w.dtype != *dtype) {
    fail(ErrorCode::invalid_type, "weights.", name, ": dtype ", dtype_name(w.dtype),
         ", but the layer's dtype (qkv_weight's) is ", dtype_name(*dtype));
  }
}

void check_optional(const std::optional<TensorView>& w, bool wanted, const char* name,
                    const char* config_field, std::initializer_list<int64_t> shape, Device device,
                    const DType* dtype) {
  if (wanted && !w) fail(ErrorCode::invalid_value, "weights.", name, ": missing, but config.", config_field, " asks for it");
  if (!wanted && w) {
    fail(ErrorCode::invalid_value, "weights.", name, ": given, but config.", config_field,
         " says there is none (set it, or drop the weight)");
  }
  if (w) check_weight(*w, name, shape, device, dtype);
}

// An activation: [tokens, features] of the layer's dtype and device, rows contiguous.
void check_activation(const TensorView& t, const char* name, int64_t tokens, int64_t features,
                      const LayerState& layer) {
  if (t.rank != 2 || t.shape[1] != features || (tokens >= 0 && t.shape[0] != tokens)) {
    fail(ErrorCode::invalid_value, name, ": expected shape [", tokens >= 0 ? std::to_string(tokens) : "tokens",
         ", ", features, "], got ", t.shape_string());
  }
  if (t.dtype != layer.dtype) {
    fail(ErrorCode::invalid_type, name, ": dtype ", dtype_name(t.dtype), ", but the layer's is ", dtype_name(layer.dtype));
  }
  if (!(t.device == layer.device)) {
    fail(ErrorCode::invalid_type, name, ": on ", device_name(t.device), ", but the layer is on ", device_name(layer.device));
  }
  check_rank_and_strides(t, name);
  if (t.stride[1] != 1 || (t.shape[0] > 1 && t.stride[0] < features)) {
    fail(ErrorCode::invalid_value, name, ": rows must be contiguous and not overlap, got strides ", t.stride_string());
  }
  if (!t.data && t.shape[0] > 0) fail(ErrorCode::invalid_value, name, ": data is null");
  check_aligned(t, name);
}

layer::RopeTables check_rope(const LayerState& layer, const VisionAttentionCall& call, int64_t tokens) {
  const bool rope = layer.config.rope == Rope::rotate_half;
  layer::RopeTables tables;
  for (auto [table, name] : {std::pair{&call.cos, "cos"}, std::pair{&call.sin, "sin"}}) {
    if (!rope) {
      if (*table) fail(ErrorCode::invalid_value, name, ": given, but the layer's config.rope is none");
      continue;
    }
    if (!*table) fail(ErrorCode::invalid_value, name, ": missing; config.rope rotate_half needs cos and sin");
    const TensorView& t = **table;
    const int64_t d = layer.config.head_dim;
    if (t.rank != 2 || t.shape[0] != tokens || (t.shape[1] != d && t.shape[1] != d / 2)) {
      fail(ErrorCode::invalid_value, name, ": expected shape [", tokens, ", ", d, "] or [", tokens, ", ", d / 2,
           "] (half width), got ", t.shape_string());
    }
    if (t.dtype != DType::f32) fail(ErrorCode::invalid_type, name, ": dtype ", dtype_name(t.dtype), ", expected f32");
    if (!(t.device == layer.device)) {
      fail(ErrorCode::invalid_type, name, ": on ", device_name(t.device), ", but the layer is on ", device_name(layer.device));
    }
    check_rank_and_strides(t, name);
    if (t.stride[1] != 1) fail(ErrorCode::invalid_value, name, ": rows must be contiguous, got strides ", t.stride_string());
    if (!t.data && tokens > 0) fail(ErrorCode::invalid_value, name, ": data is null");
    check_aligned(t, name);
  }
  if (rope) {
    if (call.cos->shape[1] != call.sin->shape[1]) {
      fail(ErrorCode::invalid_value, "cos and sin: widths differ (", call.cos->shape[1], " and ", call.sin->shape[1], ")");
    }
    tables.cos = static_cast<const float*>(call.cos->data);
    tables.sin = static_cast<const float*>(call.sin->data);
    tables.cos_stride = call.cos->stride[0];
    tables.sin_stride = call.sin->stride[0];
    tables.half_width = call.cos->shape[1] != layer.config.head_dim;
  }
  return tables;
}

// The f32 copy of a weight a CPU layer's GEMM reads: the view itself for f32 layers.
const float* f32_weight(LayerState& layer, const std::optional<TensorView>& w) {
  if (!w) return nullptr;
  if (w->dtype == DType::f32 && (w->rank == 1 || w->stride[0] == w->shape[1])) {
    return static_cast<const float*>(w->data);
  }
  const std::vector<float> values = layer::read_as_f32(*w);
  layer.owned.push_back(layer::copy_to_device(values.data(), values.size() * sizeof(float), layer.device));
  return static_cast<const float*>(layer.owned.back().get());
}

}  // namespace

double LayerState::softmax_scale() const {
  return config.softmax_scale ? *config.softmax_scale : 1.0 / std::sqrt(double(config.head_dim));
}

void layer::attend(const LayerState& layer, void* qkv, void* attention_out, const VarlenBatch& batch,
                   const VisionAttentionCall& call) {
  const int64_t tokens = batch.total_tokens(), row = layer.qkv_features();
  const int64_t d = layer.config.head_dim, esize = dtype_size(layer.dtype);
  auto view = [&](int64_t offset, int heads) {
    return TensorView::strided(static_cast<char*>(qkv) + offset * esize, layer.dtype, {tokens, heads, d},
                               {row, d, 1}, layer.device);
  };
  const TensorView q = view(0, layer.config.num_heads);
  const TensorView k = view(layer.q_features(), layer.config.num_kv_heads);
  const TensorView v = view(layer.q_features() + layer.kv_features(), layer.config.num_kv_heads);
  const TensorView out = TensorView::contiguous(attention_out, layer.dtype, {tokens, layer.config.num_heads, d},
                                                layer.device);
  AttentionOptions options;
  options.softmax_scale = layer.softmax_scale();
  options.num_threads = call.num_threads;
  options.cuda_stream = call.cuda_stream;
  attention(q, k, v, out, batch, options, call.backend);
}

VisionAttentionLayer::VisionAttentionLayer(VisionAttentionLayer&&) noexcept = default;
VisionAttentionLayer& VisionAttentionLayer::operator=(VisionAttentionLayer&&) noexcept = default;
VisionAttentionLayer::~VisionAttentionLayer() = default;

VisionAttentionLayer::VisionAttentionLayer(const VisionAttentionConfig& config,
                                           const VisionAttentionWeights& weights)
    : state_(std::make_unique<State>()) {
  LayerState& s = *state_;
  s.config = normalized(config);
  const VisionAttentionConfig& c = s.config;
  s.dtype = weights.qkv_weight.dtype;
  s.device = weights.qkv_weight.device;
#if !VISATTN_WITH_CUDA
  if (s.device.type == DeviceType::cuda) {
    fail(ErrorCode::backend_unavailable, "weights.qkv_weight: on ", device_name(s.device),
         ", but this build of visattn has no CUDA support");
  }
#endif
  if (s.device.type == DeviceType::cuda && s.dtype == DType::f32) {
    fail(ErrorCode::invalid_type, "weights.qkv_weight: dtype f32 on ", device_name(s.device),
         ": the layer on GPUs runs bf16 and f16 (the GPU attention backends take no f32)");
  }
  s.weights = weights;
  const DType* dtype = &s.dtype;
  check_weight(weights.qkv_weight, "qkv_weight", {s.qkv_features(), c.embed_dim}, s.device, dtype);
  check_optional(weights.qkv_bias, c.qkv_bias, "qkv_bias", "qkv_bias", {s.qkv_features()}, s.device, dtype);
  check_weight(weights.proj_weight, "proj_weight", {c.embed_dim, s.q_features()}, s.device, dtype);
  check_optional(weights.proj_bias, c.proj_bias, "proj_bias", "proj_bias", {c.embed_dim}, s.device, dtype);
  const bool norm = c.qk_norm != QkNorm::none, full = c.qk_norm == QkNorm::full;
  check_optional(weights.q_norm_weight, norm, "q_norm_weight", "qk_norm",
                 {full ? s.q_features() : c.head_dim}, s.device, nullptr);
  check_optional(weights.k_norm_weight, norm, "k_norm_weight", "qk_norm",
                 {full ? s.kv_features() : c.head_dim}, s.device, nullptr);
  if (norm) {
    for (auto [w, target] : {std::pair{&weights.q_norm_weight, &s.q_norm}, std::pair{&weights.k_norm_weight, &s.k_norm}}) {
      const std::vector<float> values = layer::read_as_f32(**w);
      s.owned.push_back(layer::copy_to_device(values.data(), values.size() * sizeof(float), s.device));
      *target = static_cast<const float*>(s.owned.back().get());
    }
  }
  if (s.device.type == DeviceType::cpu) {
    s.qkv_weight_f32 = f32_weight(s, weights.qkv_weight);
    s.qkv_bias_f32 = f32_weight(s, weights.qkv_bias);
    s.proj_weight_f32 = f32_weight(s, weights.proj_weight);
    s.proj_bias_f32 = f32_weight(s, weights.proj_bias);
  }
}

void VisionAttentionLayer::forward(const TensorView& x, const VarlenBatch& batch, const TensorView& out,
                                   const VisionAttentionCall& call) const {
  const LayerState& s = *state_;
  const int64_t tokens = batch.total_tokens();
  check_activation(x, "x", tokens, s.config.embed_dim, s);
  check_activation(out, "out", tokens, s.config.embed_dim, s);
  check_disjoint(byte_span(out, "out"), "out", byte_span(x, "x"), "x");
  const layer::RopeTables rope = check_rope(s, call, tokens);
  if (tokens == 0) return;  // nothing to write, and no scratch for the device passes to point into
  if (s.device.type == DeviceType::cpu) {
    layer::forward_cpu(s, x, batch, out, rope, call);
  } else {
#if VISATTN_WITH_CUDA
    layer::forward_cuda(s, x, batch, out, rope, call);
#endif
  }
}

const VisionAttentionConfig& VisionAttentionLayer::config() const { return state_->config; }
std::string VisionAttentionLayer::gemm_detail(DeviceType device) {
  if (device == DeviceType::cpu) return layer::cpu_gemm_name();
#if VISATTN_WITH_CUDA
  return layer::cublaslt_description();
#else
  return "none: this build has no CUDA support";
#endif
}

DType VisionAttentionLayer::dtype() const { return state_->dtype; }
Device VisionAttentionLayer::device() const { return state_->device; }

}  // namespace visattn
