// A batch's metadata on one GPU (VarlenBatch::prepare), shared by the GPU backends: the `cuda`
// kernel reads cu_seqlens and the tile schedule, the `cudnn` backend fills and reads the
// per-image lengths and ragged offsets. Everything is sized by the batch's bucket, so a later
// batch of the same bucket can be written over it (update_device, CUDA graph replay).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "backends/cuda/flash_params.h"  // kSchedules
#include "backends/cudnn/ragged_indices.h"  // the regions the cudnn backend fills
#include "visattn/params.h"

namespace visattn::cuda {

void check(cudaError_t status, const char* what);  // throws visattn::Error (internal)
int compute_capability(int device);                 // e.g. 90 for sm90

// Makes `device` current; restores the caller's device on scope exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Byte layout of the device buffer, every region 16-byte aligned (cuDNN requires it of the
// index tensors it reads):
//   [tile counts of the kSchedules schedules, int32 x 3 padded to 16]
//   [cu_seqlens, int32 x (image_capacity + 1)] [seq_len, int32 x image_capacity]
//   [ragged offsets, cudnn::kRaggedTensors arrays of int64 x (image_capacity + 1)]
//   [schedule s, Tile x tile_capacity[s]] for s = 0, 1, 2
// cu_seqlens is padded past the batch's images with its last value, so the padding images are
// empty. seq_len and the ragged offsets are written on the device by the cudnn backend
// (backends/cudnn/ragged_indices.h), from cu_seqlens, at each call: they depend on the strides
// of that call's tensors.
// The schedules (kScheduleRows): 64-row tiles for the sm80 kernel, 128-row tiles for the sm90
// kernel, 192-row ones for its three-warpgroup form (whichever a call runs, the others cost a
// few host microseconds and bytes).
struct Layout {
  int64_t image_capacity, tile_capacity[kSchedules];
  size_t cu_offset, seq_len_offset, ragged_offset, ragged_array_bytes, schedule_offset[kSchedules], bytes;

  // Room for any batch of `images` images and `tokens` tokens.
  Layout(int64_t images, int64_t tokens);
  // Whether a buffer of this layout holds every batch `other` holds.
  bool holds(const Layout& other) const {
    bool tiles = true;
    for (int s = 0; s < kSchedules; ++s) tiles = tiles && tile_capacity[s] >= other.tile_capacity[s];
    return bytes >= other.bytes && image_capacity >= other.image_capacity && tiles;
  }
};

}  // namespace visattn::cuda

namespace visattn {

// A batch prepared on one GPU (see VarlenBatch::prepare).
struct DeviceMetadata {
  int device;
  cuda::Layout layout;
  void* buffer = nullptr;
  // The longest image the cudnn backend plans for with this buffer (a max_seqlen bucket). A
  // cuDNN plan, and so a captured graph, is built for it; once the cudnn backend has used the
  // buffer (`max_seqlen_bound_used`), update_device refuses batches with longer images.
  // (Mutable: attention() sees the batch's metadata as const.)
  mutable std::atomic<int64_t> max_seqlen_bound;
  mutable std::atomic<bool> max_seqlen_bound_used{false};

  DeviceMetadata(int device, const cuda::Layout& layout, int64_t max_seqlen_bound);
  ~DeviceMetadata();
  DeviceMetadata(const DeviceMetadata&) = delete;
  DeviceMetadata& operator=(const DeviceMetadata&) = delete;

  const int32_t* cu_seqlens() const { return at<int32_t>(layout.cu_offset); }
  int32_t* seq_len() const { return at<int32_t>(layout.seq_len_offset); }
  int64_t* ragged_offsets(cudnn::RaggedTensor tensor) const {
    return at<int64_t>(layout.ragged_offset + size_t(tensor) * layout.ragged_array_bytes);
  }

 private:
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(buffer) + offset);
  }
};

}  // namespace visattn

namespace visattn::cuda {

// The device metadata a call runs with: the batch's prepared copy, or, for a batch nobody
// prepared, a scratch copy of this device's, uploaded now from pinned memory on the device's
// upload stream, which the call's stream waits for (refused while the stream is being
// captured, with an error that says to prepare the batch). The scratch copies are a ring
// shared by every unprepared call on the device: the lease holds its lock, and finish()
// records on the stream when the call is done with its slot before it lets go (the destructor
// does too, if a call failed half way).
class MetadataLease {
 public:
  explicit MetadataLease(const AttentionParams& params);
  ~MetadataLease();
  MetadataLease(const MetadataLease&) = delete;
  MetadataLease& operator=(const MetadataLease&) = delete;

  const DeviceMetadata& metadata() const { return *metadata_; }
  bool prepared() const { return prepared_; }  // false: the scratch copy
  // Call after the last launch that reads the metadata.
  void finish();

 private:
  const DeviceMetadata* metadata_ = nullptr;
  bool prepared_ = true;
  cudaError_t release_slot();  // records released_ on the stream and lets go of the lock

  std::unique_lock<std::mutex> scratch_lock_;
  cudaEvent_t released_ = nullptr;  // the scratch slot's
  cudaStream_t stream_;
};

}  // namespace visattn::cuda
