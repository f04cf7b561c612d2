#include "core/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error_message.h"

namespace visattn {

namespace {

// A validated [tokens, heads, head_dim] view (4-D views already flattened).
struct View3 {
  const char* name;
  const TensorView* source;
  int64_t tokens, heads, head_dim;
  int64_t token_stride, head_stride;
};

}  // namespace

void check_rank_and_strides(const TensorView& t, const char* name) {
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) {
      fail(ErrorCode::invalid_value, name, ".shape[", i, "]=", t.shape[i], ": must be >= 0 (shape ",
           t.shape_string(), ")");
    }
    if (t.stride[i] < 0) {
      fail(ErrorCode::invalid_value, name, ".stride[", i, "]=", t.stride[i],
           ": negative strides are not supported (strides ", t.stride_string(), ")");
    }
  }
}

ByteSpan byte_span(const TensorView& t, const char* name) {
  if (t.numel() == 0) return {};
  int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.stride[i], &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      fail(ErrorCode::invalid_value, name, ": shape ", t.shape_string(), " with strides ",
           t.stride_string(), " addresses more than 2^63 elements");
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(last + 1, int64_t{dtype_size(t.dtype)}, &bytes) ||
      static_cast<uintptr_t>(bytes) > UINTPTR_MAX - reinterpret_cast<uintptr_t>(t.data)) {
    fail(ErrorCode::invalid_value, name, ": shape ", t.shape_string(), " with strides ",
         t.stride_string(), " runs past the end of the address space");
  }
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  return {begin, begin + static_cast<uintptr_t>(bytes)};
}

void check_aligned(const TensorView& t, const char* name) {
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
    fail(ErrorCode::invalid_value, name, ": data pointer ", t.data, " is not aligned to its ",
         dtype_name(t.dtype), " element size (", dtype_size(t.dtype), " bytes)");
  }
}

void check_disjoint(const ByteSpan& output, const char* output_name, const ByteSpan& other,
                    const char* other_name) {
  if (output.overlaps(other)) {
    fail(ErrorCode::invalid_value, output_name, ": its memory overlaps ", other_name,
         "; outputs must not alias inputs or each other");
  }
}

namespace {

View3 as_tokens_heads_dim(const TensorView& t, const char* name) {
  if (t.rank != 3 && t.rank != 4) {
    fail(ErrorCode::invalid_type, name, ": expected [tokens, heads, head_dim] or [batch, seq, "
         "heads, head_dim], got rank ", t.rank, " shape ", t.shape_string());
  }
  check_rank_and_strides(t, name);
  const int d = t.rank - 1;  // head_dim axis
  if (t.shape[d] > 1 && t.stride[d] != 1) {
    fail(ErrorCode::invalid_value, name, ": head_dim must be contiguous (stride 1), got strides ",
         t.stride_string(), " for shape ", t.shape_string());
  }
  View3 view{name, &t, 0, t.shape[d - 1], t.shape[d], 0, t.stride[d - 1]};
  if (t.rank == 3) {
    view.tokens = t.shape[0];
    view.token_stride = t.stride[0];
  } else {
    // [batch, seq] flattens to tokens only when images follow each other at the seq stride.
    if (t.shape[0] > 1 && t.shape[1] > 0 && t.stride[0] != t.shape[1] * t.stride[1]) {
      fail(ErrorCode::invalid_value, name, ": a 4-D view needs stride[0] == shape[1] * stride[1] "
           "to flatten [batch, seq] into tokens, got shape ", t.shape_string(), " strides ",
           t.stride_string());
    }
    if (__builtin_mul_overflow(t.shape[0], t.shape[1], &view.tokens)) {
      fail(ErrorCode::invalid_value, name, ": batch * seq overflows, shape ", t.shape_string());
    }
    view.token_stride = t.stride[1];
  }
  if (view.heads < 1) fail(ErrorCode::invalid_value, name, ": num_heads=", view.heads, " must be >= 1");
  if (view.head_dim < 1) {
    fail(ErrorCode::invalid_value, name, ": head_dim=", view.head_dim, " must be >= 1");
  }
  if (view.heads > std::numeric_limits<int>::max() ||
      view.head_dim > std::numeric_limits<int>::max()) {
    fail(ErrorCode::invalid_value, name, ": shape ", t.shape_string(), " is too large");
  }
  if (t.data == nullptr && t.numel() != 0) {
    fail(ErrorCode::invalid_value, name, ": data is null for shape ", t.shape_string());
  }
  check_aligned(t, name);
  return view;
}

void check_same_kind(const View3& a, const View3& b) {
  if (a.source->rank != b.source->rank) {
    fail(ErrorCode::invalid_type, b.name, ": rank ", b.source->rank, " differs from ", a.name,
         "'s rank ", a.source->rank);
  }
  if (a.source->dtype != b.source->dtype) {
    fail(ErrorCode::invalid_type, b.name, ": dtype ", dtype_name(b.source->dtype),
         " differs from ", a.name, "'s dtype ", dtype_name(a.source->dtype));
  }
  if (!(a.source->device == b.source->device)) {
    fail(ErrorCode::invalid_type, b.name, ": device ", device_name(b.source->device),
         " differs from ", a.name, "'s device ", device_name(a.source->device));
  }
}

void check_same_shape(const View3& expected_like, const View3& actual, int64_t heads,
                      const char* heads_name) {
  if (actual.tokens != expected_like.tokens || actual.heads != heads ||
      actual.head_dim != expected_like.head_dim) {
    fail(ErrorCode::invalid_value, actual.name, ": shape ", actual.source->shape_string(),
         " does not match: expected ", expected_like.tokens, " tokens (as ", expected_like.name,
         "), ", heads, " heads (", heads_name, ") and head_dim ", expected_like.head_dim);
  }
}

// Rejects views in which two indices address the same element (a write would race).
void check_no_self_overlap(const TensorView& t, const char* name) {
  if (t.numel() == 0) return;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent) of dims that matter
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] > 1) dims.emplace_back(t.stride[i], t.shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t required = 1;  // the smallest stride the next dimension may have
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].first < required) {
      fail(ErrorCode::invalid_value, name, ": shape ", t.shape_string(), " with strides ",
           t.stride_string(), " maps several elements to one address; outputs must not overlap");
    }
    required = dims[i].first * dims[i].second;
  }
}


void check_option_tensor(const TensorView& t, const char* name, const View3& q,
                         std::initializer_list<int64_t> shape) {
  if (t.rank != static_cast<int>(shape.size())) {
    fail(ErrorCode::invalid_type, name, ": expected rank ", shape.size(), ", got rank ", t.rank,
         " shape ", t.shape_string());
  }
  check_rank_and_strides(t, name);
  if (t.dtype != DType::f32) {
    fail(ErrorCode::invalid_type, name, ": dtype must be f32, got ", dtype_name(t.dtype));
  }
  if (!(t.device == q.source->device)) {
    fail(ErrorCode::invalid_type, name, ": device ", device_name(t.device), " differs from q's ",
         device_name(q.source->device));
  }
  int i = 0;
  for (int64_t extent : shape) {
    if (t.shape[i++] != extent) {
      fail(ErrorCode::invalid_value, name, ": shape ", t.shape_string(), " does not match the "
           "expected ", TensorView::contiguous(nullptr, DType::f32, shape).shape_string());
    }
  }
  if (t.data == nullptr && t.numel() != 0) fail(ErrorCode::invalid_value, name, ": data is null");
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0) {
    fail(ErrorCode::invalid_value, name, ": data pointer ", t.data, " is not 4-byte aligned");
  }
}

void check_batch(const View3& q, const VarlenBatch& batch) {
  if (batch.total_tokens() != q.tokens) {
    fail(ErrorCode::invalid_value, "cu_seqlens[", batch.num_images(), "]=", batch.total_tokens(),
         ": the last offset must equal the number of tokens of q (", q.tokens, ", shape ",
         q.source->shape_string(), ")");
  }
  if (q.source->rank == 4) {
    const int64_t images = q.source->shape[0], seqlen = q.source->shape[1];
    const bool matches = batch.num_images() == images &&
                         (images == 0 || (batch.is_uniform() && batch.lengths()[0] == seqlen));
    if (!matches) {
      fail(ErrorCode::invalid_value, "batch: 4-D q of shape ", q.source->shape_string(),
           " needs a uniform batch of ", images, " images x ", seqlen, " tokens, got ",
           batch.num_images(), " images", batch.is_uniform() ? "" : " of different lengths");
    }
  }
}

}  // namespace

AttentionParams validate_attention_args(const TensorView& q_view, const TensorView& k_view,
                                        const TensorView& v_view, const TensorView& out_view,
                                        const VarlenBatch& batch,
                                        const AttentionOptions& options) {
  const View3 q = as_tokens_heads_dim(q_view, "q");
  const View3 k = as_tokens_heads_dim(k_view, "k");
  const View3 v = as_tokens_heads_dim(v_view, "v");
  const View3 out = as_tokens_heads_dim(out_view, "out");
  for (const View3* other : {&k, &v, &out}) check_same_kind(q, *other);

  if (q.source->dtype != DType::f32 && q.source->dtype != DType::f16 &&
      q.source->dtype != DType::bf16) {
    fail(ErrorCode::invalid_type, "q: unknown dtype value ", int(q.source->dtype));
  }
  check_same_shape(q, k, k.heads, "num_kv_heads");
  check_same_shape(q, v, k.heads, "num_kv_heads, as k");
  check_same_shape(q, out, q.heads, "num_heads, as q");
  if (q.heads % k.heads != 0) {
    fail(ErrorCode::invalid_value, "k: num_kv_heads=", k.heads, " must divide num_heads=", q.heads,
         " (q.shape ", q.source->shape_string(), ", k.shape ", k.source->shape_string(), ")");
  }
  check_batch(q, batch);

  const double scale = options.softmax_scale.value_or(1.0 / std::sqrt(double(q.head_dim)));
  if (!std::isfinite(scale)) {
    fail(ErrorCode::invalid_value, "softmax_scale=", scale, ": must be finite");
  }
  for (auto [value, name] : {std::pair{options.window_left, "window_left"},
                             std::pair{options.window_right, "window_right"}}) {
    if (value < -1) {
      fail(ErrorCode::invalid_value, name, "=", value, ": must be >= 0, or -1 for unbounded");
    }
  }
  if (options.num_threads < 0) {
    fail(ErrorCode::invalid_value, "num_threads=", options.num_threads, ": must be >= 0 (0: default)");
  }
  if (options.sinks) check_option_tensor(*options.sinks, "sinks", q, {q.heads});
  if (options.lse) check_option_tensor(*options.lse, "lse", q, {q.heads, q.tokens});

  // Aliasing: outputs may not overlap themselves, the inputs or each other.
  const ByteSpan q_span = byte_span(q_view, "q"), k_span = byte_span(k_view, "k"),
                 v_span = byte_span(v_view, "v"), out_span = byte_span(out_view, "out");
  check_no_self_overlap(out_view, "out");
  for (auto [span, name] : {std::pair{q_span, "q"}, std::pair{k_span, "k"}, std::pair{v_span, "v"}}) {
    check_disjoint(out_span, "out", span, name);
  }
  if (options.sinks) check_disjoint(out_span, "out", byte_span(*options.sinks, "sinks"), "sinks");
  if (options.lse) {
    const ByteSpan lse_span = byte_span(*options.lse, "lse");
    check_no_self_overlap(*options.lse, "lse");
    for (auto [span, name] : {std::pair{q_span, "q"}, std::pair{k_span, "k"},
                              std::pair{v_span, "v"}, std::pair{out_span, "out"}}) {
      check_disjoint(lse_span, "lse", span, name);
    }
    if (options.sinks) check_disjoint(lse_span, "lse", byte_span(*options.sinks, "sinks"), "sinks");
  }

  AttentionParams p{};
  p.dtype = q.source->dtype;
  p.device = q.source->device;
  p.q = q.source->data;
  p.k = k.source->data;
  p.v = v.source->data;
  p.out = out.source->data;
  p.q_token_stride = q.token_stride;
  p.q_head_stride = q.head_stride;
  p.k_token_stride = k.token_stride;
  p.k_head_stride = k.head_stride;
  p.v_token_stride = v.token_stride;
  p.v_head_stride = v.head_stride;
  p.out_token_stride = out.token_stride;
  p.out_head_stride = out.head_stride;
  p.total_tokens = q.tokens;
  p.num_heads = static_cast<int>(q.heads);
  p.num_kv_heads = static_cast<int>(k.heads);
  p.head_dim = static_cast<int>(q.head_dim);
  p.num_images = batch.num_images();
  p.cu_seqlens = batch.cu_seqlens().data();
  p.max_seqlen = batch.max_seqlen();
  p.softmax_scale = scale;
  p.window_left = options.window_left;
  p.window_right = options.window_right;
  p.sinks = options.sinks ? static_cast<const float*>(options.sinks->data) : nullptr;
  p.sinks_stride = options.sinks ? options.sinks->stride[0] : 0;
  if (options.lse) {
    p.lse = static_cast<float*>(options.lse->data);
    p.lse_head_stride = options.lse->stride[0];
    p.lse_token_stride = options.lse->stride[1];
  }
  p.num_threads = options.num_threads;
  p.cuda_stream = options.cuda_stream;
  p.prepared = batch.device_metadata(p.device);
  return p;
}

}  // namespace visattn
