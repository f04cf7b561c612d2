// visattn: VarlenBatch, the metadata of one batch of images packed along the token axis.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace visattn {

struct Device;
struct DeviceMetadata;  // a GPU backend's copy of a batch (defined by that backend)

// Built once per image batch, reused by every attention layer of the encoder.
// Image i owns tokens [cu_seqlens[i], cu_seqlens[i+1]). Zero-length images and an empty
// batch are valid. All constructors validate and throw visattn::Error naming the argument.
class VarlenBatch {
 public:
  // cu_seqlens: num_images + 1 non-decreasing offsets starting at 0, each within int32.
  // max_seqlen, when given, must be >= the longest image; it is kept as an upper bound
  // (so batches of one bucket can share a plan or a captured graph).
  static VarlenBatch from_cu_seqlens(std::span<const int32_t> cu_seqlens,
                                     std::optional<int64_t> max_seqlen = std::nullopt);
  static VarlenBatch from_cu_seqlens(std::span<const int64_t> cu_seqlens,
                                     std::optional<int64_t> max_seqlen = std::nullopt);
  // lengths: tokens of each image, each >= 0.
  static VarlenBatch from_lengths(std::span<const int64_t> lengths);
  // num_images images of seqlen tokens each.
  static VarlenBatch uniform(int64_t num_images, int64_t seqlen);

  int64_t num_images() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t total_tokens() const { return cu_seqlens_.back(); }
  int64_t max_seqlen() const { return max_seqlen_; }  // the given bound, or the real maximum
  const std::vector<int32_t>& cu_seqlens() const { return cu_seqlens_; }  // num_images + 1
  const std::vector<int32_t>& lengths() const { return lengths_; }        // num_images
  bool is_uniform() const;  // every image has the same length

  // Buckets used as cache keys for plans and CUDA graphs: images round up to
  // 8, 16, 32, 64 and then multiples of 64; max_seqlen to 1024 and then powers of two.
  int64_t batch_bucket() const;
  int64_t max_seqlen_bucket() const;

  // Element offsets (cu_seqlens[i] * token_stride, num_images + 1 entries) of a ragged
  // tensor whose tokens are token_stride elements apart. Throws naming `tensor_name` when an
  // offset does not fit int32 (the index type of cuDNN's ragged layout).
  std::vector<int32_t> element_offsets(int64_t token_stride, const char* tensor_name) const;
  // The packed [qk, v, o] indptr triple FlashInfer's cuDNN path takes: 3 * (num_images + 1).
  std::vector<int32_t> packed_indptrs(int64_t qk_token_stride, int64_t v_token_stride,
                                      int64_t o_token_stride) const;

  // GPU backends: uploads cu_seqlens and the tile schedule to `device` once, into buffers
  // sized by the batch's buckets. attention() on that device then copies nothing, allocates
  // nothing and never synchronizes, so it can be captured in a CUDA graph. cuda_stream: the
  // cudaStream_t of the upload (null: the default stream).
  void prepare(const Device& device, void* cuda_stream = nullptr);
  // Writes `other`'s images into this batch's prepared buffers, so a graph captured with this
  // batch replays on `other` (q, k, v must hold other's tokens). Throws if other does not fit
  // the prepared capacity (its bucket). The cuda backend's kernel stays the one this batch's own
  // lengths picked at prepare(), so eager calls and replays with it give the same bits.
  void update_device(const VarlenBatch& other, void* cuda_stream = nullptr);
  // The prepared copy for `device`, or null.
  const DeviceMetadata* device_metadata(const Device& device) const;

 private:
  VarlenBatch() = default;
  // Fills lengths and max_seqlen from already validated int32 offsets.
  static VarlenBatch from_checked_offsets(std::vector<int32_t> cu_seqlens,
                                             std::optional<int64_t> max_seqlen);
  std::vector<int32_t> cu_seqlens_{0};
  std::vector<int32_t> lengths_;
  int64_t max_seqlen_ = 0;
  std::shared_ptr<DeviceMetadata> device_metadata_;  // shared by copies of the batch
};

}  // namespace visattn
