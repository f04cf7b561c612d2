// The layer's forward pass on a GPU: cuBLASLt GEMMs with the bias in the epilogue, one kernel
// for QK norm and rotary embedding in place in the fused qkv buffer, attention on strided views
// of it. Scratch comes from the stream-ordered allocator: no host sync, capturable in a graph.
#include <cuda_runtime.h>

#include "backends/cuda/device_metadata.h"  // cuda::check, cuda::DeviceGuard
#include "layer/cublaslt.h"
#include "layer/layer_kernels.h"
#include "layer/layer_state.h"

namespace visattn::layer {

namespace {

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Stream-ordered scratch, given back on the same stream when the scope ends (also on error).
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    cuda::check(cudaMallocAsync(&data_, bytes, stream), "allocating the layer's scratch (cudaMallocAsync)");
  }
  ~StreamScratch() { cudaFreeAsync(data_, stream_); }
  char* data() const { return static_cast<char*>(data_); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace

void forward_cuda(const LayerState& layer, const TensorView& x, const VarlenBatch& batch, const TensorView& out,
                  const RopeTables& rope, const VisionAttentionCall& call) {
  const int64_t tokens = batch.total_tokens();
  const VisionAttentionConfig& c = layer.config;
  const int64_t features = layer.qkv_features(), q_features = layer.q_features();
  const size_t esize = size_t(dtype_size(layer.dtype));
  const int device = layer.device.index;
  const cuda::DeviceGuard guard(device);
  const cudaStream_t stream = static_cast<cudaStream_t>(call.cuda_stream);

  const size_t qkv_bytes = align256(size_t(tokens * features) * esize);
  const size_t attended_bytes = align256(size_t(tokens * q_features) * esize);
  const StreamScratch scratch(qkv_bytes + attended_bytes + kGemmWorkspaceBytes, stream);
  char* qkv = scratch.data();
  char* attended = qkv + qkv_bytes;
  char* workspace = attended + attended_bytes;
  const VisionAttentionWeights& w = layer.weights;

  linear_cuda(x.data, x.stride[0], tokens, w.qkv_weight.data, w.qkv_weight.stride[0],
              w.qkv_bias ? w.qkv_bias->data : nullptr, features, c.embed_dim, qkv, features, layer.dtype, device,
              stream, workspace);
  if (c.qk_norm != QkNorm::none || rope.cos) {
    NormRopeParams p;
    p.qkv = qkv, p.row_stride = features, p.tokens = tokens;
    p.num_heads = c.num_heads, p.num_kv_heads = c.num_kv_heads, p.head_dim = c.head_dim;
    p.norm = c.qk_norm == QkNorm::none ? 0 : c.qk_norm == QkNorm::full ? 1 : 2;
    p.q_norm = layer.q_norm, p.k_norm = layer.k_norm, p.eps = float(c.qk_norm_eps);
    p.cos = rope.cos, p.sin = rope.sin, p.cos_stride = rope.cos_stride, p.sin_stride = rope.sin_stride;
    p.half_width = rope.half_width;
    p.bf16 = layer.dtype == DType::bf16;
    launch_norm_rope(p, stream);
    cuda::check(cudaGetLastError(), "launching the QK norm / rope kernel");
  }
  attend(layer, qkv, attended, batch, call);
  linear_cuda(attended, q_features, tokens, w.proj_weight.data, w.proj_weight.stride[0],
              w.proj_bias ? w.proj_bias->data : nullptr, c.embed_dim, q_features, out.data, out.stride[0],
              layer.dtype, device, stream, workspace);
}

}  // namespace visattn::layer
