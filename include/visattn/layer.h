// visattn: the attention layer of a ViT block (SGLang's VisionAttention): fused QKV projection,
// optional QK RMSNorm, optional 2D rotary embedding, attention within each image, output
// projection. One layout throughout: q, k and v are read by attention as strided views of the
// fused qkv buffer, never split into copies.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "visattn/tensor.h"
#include "visattn/varlen_batch.h"

namespace visattn {

enum class QkNorm {
  none,
  full,      // RMSNorm over all heads of q (and, separately, of k): InternViT
  per_head,  // RMSNorm over each head's head_dim values: GLM-OCR, Qwen3-style
};
enum class Rope {
  none,
  rotate_half,  // x*cos + rotate_half(x)*sin per head, rotate_half(x) = [-x2, x1] (Qwen2-VL on)
};

struct VisionAttentionConfig {
  int64_t embed_dim = 0;  // hidden size of x and of the output
  int num_heads = 0;
  int num_kv_heads = 0;   // 0: num_heads; else divides num_heads (grouped kv heads)
  int head_dim = 0;       // 0: embed_dim / num_heads
  bool qkv_bias = true;
  bool proj_bias = true;
  QkNorm qk_norm = QkNorm::none;
  double qk_norm_eps = 1e-6;
  Rope rope = Rope::none;
  std::optional<double> softmax_scale;  // unset: 1/sqrt(head_dim)
};

// Weights in PyTorch nn.Linear layout ([out_features, in_features], row-major, rows
// contiguous), all on one device. qkv_weight's dtype is the layer's dtype; biases have it too;
// norm weights may be any float dtype.
struct VisionAttentionWeights {
  TensorView qkv_weight;  // [(num_heads + 2 num_kv_heads) head_dim, embed_dim]: q rows, k, v
  std::optional<TensorView> qkv_bias;       // [(num_heads + 2 num_kv_heads) head_dim]
  std::optional<TensorView> q_norm_weight;  // full: [num_heads head_dim]; per_head: [head_dim]
  std::optional<TensorView> k_norm_weight;  // full: [num_kv_heads head_dim]; per_head: [head_dim]
  TensorView proj_weight;                   // [embed_dim, num_heads head_dim]
  std::optional<TensorView> proj_bias;      // [embed_dim]
};

struct VisionAttentionCall {
  // Rotary tables for Rope::rotate_half, f32 on the layer's device: [tokens, head_dim], or
  // [tokens, head_dim / 2] (the half-width form, used as cat(t, t)). Row t belongs to token t.
  std::optional<TensorView> cos, sin;
  std::string backend = "auto";  // the attention backend
  int num_threads = 0;           // CPU: as AttentionOptions::num_threads
  void* cuda_stream = nullptr;   // GPU: the cudaStream_t (null: the default stream)
};

class VisionAttentionLayer {
 public:
  // Keeps views of `weights`: the caller keeps them alive and unchanged. A CPU layer of a
  // 16-bit dtype keeps an f32 copy of the projection weights (what its GEMM reads).
  VisionAttentionLayer(const VisionAttentionConfig& config, const VisionAttentionWeights& weights);
  // Loads the weights named `prefix` + {qkv, or q_proj/k_proj/v_proj}.{weight,bias},
  // {q_norm,k_norm}.weight and {proj, out_proj, o_proj or projection_layer}.{weight,bias} from
  // a safetensors file, converted to `dtype`, onto `device`; the layer owns them.
  static VisionAttentionLayer from_safetensors(const VisionAttentionConfig& config,
                                               const std::string& path, const std::string& prefix,
                                               DType dtype, Device device = {});
  VisionAttentionLayer(VisionAttentionLayer&&) noexcept;
  VisionAttentionLayer& operator=(VisionAttentionLayer&&) noexcept;
  ~VisionAttentionLayer();

  // out[t] = proj(attention(rope(norm(q)), rope(norm(k)), v)[t]) with q, k, v = qkv(x[t]),
  // attention within each image of `batch`. x and out: [tokens, embed_dim] of the layer's
  // dtype and device (rows contiguous, any row stride), not overlapping. Checks everything
  // before writing; on error `out` is untouched. On a GPU it does no host sync: scratch comes
  // from the stream-ordered allocator, so a forward can be captured in a CUDA graph. Calls
  // from several threads at once are safe.
  void forward(const TensorView& x, const VarlenBatch& batch, const TensorView& out,
               const VisionAttentionCall& call = {}) const;

  const VisionAttentionConfig& config() const;  // with num_kv_heads and head_dim filled in
  DType dtype() const;
  Device device() const;
  // GEMM paths of this build: "OpenBLAS sgemm" or "built-in loops" on the CPU, "cuBLASLt" on GPUs.
  static std::string gemm_detail(DeviceType device);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Qwen2.5-VL's windowed layers. Images are (t, h, w) grids of patches; a merge unit is
// spatial_merge_size^2 consecutive tokens; windows are window_size / patch_size /
// spatial_merge_size merge units on a side, per frame.
struct WindowLayout {
  std::vector<int64_t> permutation;  // window order: windowed token i is token permutation[i]
  std::vector<int64_t> inverse;      // inverse[permutation[i]] == i
  VarlenBatch windows;               // in window order: one image per (non-empty) window
  VarlenBatch frames;                // in token order: one image per frame (full attention)
};
WindowLayout qwen25vl_window_layout(const std::vector<std::array<int64_t, 3>>& grid_thw,
                                    int spatial_merge_size = 2, int window_size = 112,
                                    int patch_size = 14);

// dst[i] = src[index[i]] for the rows of [tokens, features] tensors of one dtype and device;
// index: dst.shape[0] values in [0, src.shape[0]) in memory of that device (on a GPU the values
// are not checked: WindowLayout's permutation and inverse are valid by construction).
void gather_tokens(const TensorView& src, const int64_t* index, const TensorView& dst,
                   void* cuda_stream = nullptr);

}  // namespace visattn
