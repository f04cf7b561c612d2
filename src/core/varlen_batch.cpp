#include <algorithm>
#include <limits>

#include "core/error_message.h"
#include "visattn/tensor.h"
#include "visattn/varlen_batch.h"
#if VISATTN_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#if VISATTN_WITH_CUDNN
#include "backends/cudnn/cudnn_backend.h"
#endif

namespace visattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Validates cu_seqlens of any integer type and converts it to int32.
template <typename Int>
std::vector<int32_t> checked_cu_seqlens(std::span<const Int> cu_seqlens) {
  if (cu_seqlens.empty()) {
    fail(ErrorCode::invalid_value,
         "cu_seqlens: needs num_images + 1 entries (at least [0]), got an empty array");
  }
  if (cu_seqlens[0] != 0) {
    fail(ErrorCode::invalid_value, "cu_seqlens[0]=", cu_seqlens[0], ": must be 0");
  }
  std::vector<int32_t> out(cu_seqlens.size());
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t value = static_cast<int64_t>(cu_seqlens[i]);
    if (value < static_cast<int64_t>(cu_seqlens[i - 1])) {
      fail(ErrorCode::invalid_value, "cu_seqlens[", i, "]=", value, " < cu_seqlens[", i - 1,
           "]=", cu_seqlens[i - 1], ": must be non-decreasing");
    }
    if (value > kInt32Max) {
      fail(ErrorCode::invalid_value, "cu_seqlens[", i, "]=", value,
           ": token offsets must fit int32 (<= ", kInt32Max, ")");
    }
    out[i] = static_cast<int32_t>(value);
  }
  return out;
}

}  // namespace

VarlenBatch VarlenBatch::from_cu_seqlens(std::span<const int32_t> cu_seqlens,
                                         std::optional<int64_t> max_seqlen) {
  return from_checked_offsets(checked_cu_seqlens(cu_seqlens), max_seqlen);
}

VarlenBatch VarlenBatch::from_cu_seqlens(std::span<const int64_t> cu_seqlens,
                                         std::optional<int64_t> max_seqlen) {
  return from_checked_offsets(checked_cu_seqlens(cu_seqlens), max_seqlen);
}

VarlenBatch VarlenBatch::from_lengths(std::span<const int64_t> lengths) {
  std::vector<int32_t> cu_seqlens(lengths.size() + 1, 0);
  int64_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      fail(ErrorCode::invalid_value, "lengths[", i, "]=", lengths[i], ": must be >= 0");
    }
    if (lengths[i] > kInt32Max - total) {
      fail(ErrorCode::invalid_value, "lengths: total tokens through lengths[", i,
           "] exceed int32 (", kInt32Max, ")");
    }
    total += lengths[i];
    cu_seqlens[i + 1] = static_cast<int32_t>(total);
  }
  return from_checked_offsets(std::move(cu_seqlens), std::nullopt);
}

VarlenBatch VarlenBatch::uniform(int64_t num_images, int64_t seqlen) {
  if (num_images < 0) {
    fail(ErrorCode::invalid_value, "num_images=", num_images, ": must be >= 0");
  }
  if (seqlen < 0) fail(ErrorCode::invalid_value, "seqlen=", seqlen, ": must be >= 0");
  if (seqlen > 0 && num_images > kInt32Max / seqlen) {
    fail(ErrorCode::invalid_value, "num_images * seqlen = ", num_images, " * ", seqlen,
         ": total tokens must fit int32 (<= ", kInt32Max, ")");
  }
  std::vector<int32_t> cu_seqlens(num_images + 1);
  for (int64_t i = 0; i <= num_images; ++i) cu_seqlens[i] = static_cast<int32_t>(i * seqlen);
  return from_checked_offsets(std::move(cu_seqlens), std::nullopt);
}

VarlenBatch VarlenBatch::from_checked_offsets(std::vector<int32_t> cu_seqlens,
                                                 std::optional<int64_t> max_seqlen) {
  VarlenBatch batch;
  batch.cu_seqlens_ = std::move(cu_seqlens);
  const size_t num_images = batch.cu_seqlens_.size() - 1;
  batch.lengths_.resize(num_images);
  int64_t real_max = 0;
  for (size_t i = 0; i < num_images; ++i) {
    batch.lengths_[i] = batch.cu_seqlens_[i + 1] - batch.cu_seqlens_[i];
    real_max = std::max<int64_t>(real_max, batch.lengths_[i]);
  }
  if (max_seqlen && *max_seqlen < real_max) {
    const auto longest = std::max_element(batch.lengths_.begin(), batch.lengths_.end());
    fail(ErrorCode::invalid_value, "max_seqlen=", *max_seqlen, " < length ", real_max,
         " of image ", longest - batch.lengths_.begin(),
         ": max_seqlen must be >= the longest image");
  }
  batch.max_seqlen_ = max_seqlen.value_or(real_max);
  return batch;
}

bool VarlenBatch::is_uniform() const {
  return std::adjacent_find(lengths_.begin(), lengths_.end(), std::not_equal_to<>()) ==
         lengths_.end();
}

int64_t VarlenBatch::batch_bucket() const {
  const int64_t n = num_images();
  for (int64_t bucket : {8, 16, 32, 64}) {
    if (n <= bucket) return bucket;
  }
  return (n + 63) / 64 * 64;
}

int64_t VarlenBatch::max_seqlen_bucket() const {
  int64_t bucket = 1024;
  while (bucket < max_seqlen_) bucket *= 2;
  return bucket;
}

std::vector<int32_t> VarlenBatch::element_offsets(int64_t token_stride,
                                                  const char* tensor_name) const {
  if (token_stride < 0) {
    fail(ErrorCode::invalid_value, tensor_name, ": token stride ", token_stride,
         " must be >= 0");
  }
  std::vector<int32_t> offsets(cu_seqlens_.size());
  for (size_t i = 0; i < cu_seqlens_.size(); ++i) {
    int64_t offset = 0;
    if (__builtin_mul_overflow(int64_t{cu_seqlens_[i]}, token_stride, &offset) ||
        offset > kInt32Max) {
      fail(ErrorCode::invalid_value, tensor_name, ": element offset of cu_seqlens[", i, "]=",
           cu_seqlens_[i], " x token stride ", token_stride,
           " overflows int32 (the ragged-offset type); use fewer tokens per batch");
    }
    offsets[i] = static_cast<int32_t>(offset);
  }
  return offsets;
}

std::vector<int32_t> VarlenBatch::packed_indptrs(int64_t qk_token_stride, int64_t v_token_stride,
                                                 int64_t o_token_stride) const {
  std::vector<int32_t> packed;
  packed.reserve(3 * cu_seqlens_.size());
  for (auto [stride, name] : {std::pair{qk_token_stride, "qk"}, std::pair{v_token_stride, "v"},
                              std::pair{o_token_stride, "o"}}) {
    const std::vector<int32_t> offsets = element_offsets(stride, name);
    packed.insert(packed.end(), offsets.begin(), offsets.end());
  }
  return packed;
}

void VarlenBatch::prepare(const Device& device, void* cuda_stream) {
#if VISATTN_WITH_CUDA
  if (device.type != DeviceType::cuda) {
    fail(ErrorCode::invalid_value, "prepare: device ", device_name(device),
         " needs no preparation; only cuda devices do");
  }
  device_metadata_ = cuda::prepare(*this, device.index, cuda_stream);
#if VISATTN_WITH_CUDNN
  cudnn::reserve_workspace(device.index);  // the cudnn backend's workspace grows here, not in attention()
#endif
#else
  (void)cuda_stream;
  fail(ErrorCode::backend_unavailable, "prepare: this build has no CUDA backend (device ",
       device_name(device), ")");
#endif
}

void VarlenBatch::update_device(const VarlenBatch& other, void* cuda_stream) {
  if (!device_metadata_) {
    fail(ErrorCode::invalid_value, "update_device: this batch was not prepared for a device");
  }
#if VISATTN_WITH_CUDA
  cuda::update(*device_metadata_, other, cuda_stream);
#else
  (void)other, (void)cuda_stream;
#endif
}

const DeviceMetadata* VarlenBatch::device_metadata(const Device& device) const {
#if VISATTN_WITH_CUDA
  if (device_metadata_ && cuda::metadata_device(*device_metadata_) == device.index &&
      device.type == DeviceType::cuda) {
    return device_metadata_.get();
  }
#else
  (void)device;
#endif
  return nullptr;
}

}  // namespace visattn
