#include "backends/cudnn/plan_key.h"

#include <bit>

#include "backends/cudnn/library.h"
#include "core/error_message.h"

namespace visattn::cudnn {

float PlanKey::softmax_scale() const { return std::bit_cast<float>(scale_bits); }

PlanKey plan_key(const AttentionParams& p, int64_t batch, int64_t max_seqlen,
                 int64_t cudnn_version, bool dense) {
  PlanKey key;
  key.device = p.device.index;
  key.cudnn_version = cudnn_version;
  key.dtype = p.dtype;
  key.batch = batch;
  key.max_seqlen = max_seqlen;
  key.dense = dense;
  key.num_heads = p.num_heads;
  key.num_kv_heads = p.num_kv_heads;
  key.head_dim = p.head_dim;
  const auto head = [&](int heads, int64_t stride) { return heads > 1 ? stride : int64_t{p.head_dim}; };
  key.strides = {p.q_token_stride,   head(p.num_heads, p.q_head_stride),
                 p.k_token_stride,   head(p.num_kv_heads, p.k_head_stride),
                 p.v_token_stride,   head(p.num_kv_heads, p.v_head_stride),
                 p.out_token_stride, head(p.num_heads, p.out_head_stride)};
  key.lse = p.lse != nullptr;
  if (key.lse) key.lse_head_stride = p.lse_head_stride, key.lse_token_stride = p.lse_token_stride;
  key.scale_bits = std::bit_cast<uint32_t>(static_cast<float>(p.softmax_scale));
  return key;
}

std::string describe(const PlanKey& k) {
  std::string text = concat(dtype_name(k.dtype), ", ");
  text += k.dense ? concat("dense: ", k.batch, " images of ", k.max_seqlen, " tokens")
                  : concat(k.batch, " images (bucket), max_seqlen ", k.max_seqlen, " (bucket)");
  text += concat(", heads ", k.num_heads, "/", k.num_kv_heads, ", head_dim ", k.head_dim,
                 ", token/head strides");
  const char* names[] = {"q", "k", "v", "out"};
  for (int t = 0; t < 4; ++t) {
    text += concat(" ", names[t], " ", k.token_stride(t), "/", k.head_stride(t));
  }
  text += k.lse ? concat(", lse head/token strides ", k.lse_head_stride, "/", k.lse_token_stride)
                : std::string(", no lse");
  return text + concat(", scale ", k.softmax_scale(), ", cuDNN ", version_string(k.cudnn_version),
                       ", cuda:", k.device);
}

}  // namespace visattn::cudnn
