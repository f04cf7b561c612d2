#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_metadata.h"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/head_dims.h"
#include "core/error_message.h"

namespace visattn::cuda {

namespace {

// 16-byte alignment of every region of the metadata buffer.
size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Tiles of `rows` rows any batch of `images` images and `tokens` tokens can have: each image
// ends at most one partial tile (packs included).
int64_t tile_bound(int64_t images, int64_t tokens, int rows) { return (tokens + rows - 1) / rows + images; }

// A kernel's tiles of `tile_rows` rows (see Tile): an image longer than a tile is cut into
// tiles, one group; runs of consecutive shorter images share a tile while their tokens fit
// (segment packing: 64-token windows fill a 64-row tile, 16-token ones go four to it), a group
// each. Groups are ordered heaviest first (sum of squared image lengths).
Tile tile_of(int first_image, int end_image, int first_row) {
  Tile tile;
  tile.first_image = first_image, tile.end_image = end_image, tile.first_row = first_row;
  return tile;
}

// Writes the schedule to `out` (room for `capacity` tiles) and returns its tile count; throws
// if it does not fit (the buffers were prepared for fewer tokens).
int write_schedule(const VarlenBatch& batch, int tile_rows, Tile* out, int64_t capacity) {
  // A group: images [first_image, end_image) in `tiles` tiles (one, for a pack). Plain values,
  // so that an unprepared call's schedule costs no allocation per image (bench/NOTES.md CUDA 35).
  struct Group {
    int64_t cost;  // sum of squared image lengths
    int first_image, end_image, tiles;
  };
  std::vector<Group> groups;
  const std::span<const int32_t> lengths = batch.lengths();
  int pack_first = -1, pack_tokens = 0, tile_count = 0;
  int64_t pack_cost = 0;
  auto close_pack = [&](int end) {
    if (pack_tokens > 0) {
      groups.push_back({pack_cost, pack_first, end, 1});
      ++tile_count;
    }
    pack_first = -1, pack_tokens = 0, pack_cost = 0;
  };
  for (int image = 0; image < int(lengths.size()); ++image) {
    const int n = lengths[image];
    if (n > tile_rows) {
      close_pack(image);
      const int tiles = (n + tile_rows - 1) / tile_rows;
      groups.push_back({int64_t(n) * n, image, image + 1, tiles});
      tile_count += tiles;
      continue;
    }
    // A pack holds tile_rows images at most, so that the kernel's search of a row's image is
    // short even through runs of zero-length images.
    if (pack_tokens + n > tile_rows || image - pack_first >= tile_rows) close_pack(image);
    if (pack_first < 0) pack_first = image;
    pack_tokens += n;
    pack_cost += int64_t(n) * n;
  }
  close_pack(int(lengths.size()));
  if (tile_count > capacity) {
    fail(ErrorCode::invalid_value, "batch: ", tile_count, " tiles of ", tile_rows, " rows exceed the ", capacity,
         " the device buffers were prepared for; prepare a larger batch");
  }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.cost > b.cost; });
  int written = 0;
  for (const Group& group : groups) {
    const int first = written;
    for (int t = 0; t < group.tiles; ++t) {
      Tile tile = tile_of(group.first_image, group.end_image, t * tile_rows);
      tile.group_first = first, tile.group_size = group.tiles;
      out[written++] = tile;
    }
  }
  return written;
}

// Writes the batch's bytes in `layout` to `bytes` (layout.bytes of them); throws if the batch
// does not fit the layout.
void write_device_image(const VarlenBatch& batch, const Layout& layout, char* bytes) {
  if (batch.num_images() > layout.image_capacity) {
    fail(ErrorCode::invalid_value, "batch: ", batch.num_images(), " images exceed the ",
         layout.image_capacity, " the device buffers were prepared for; prepare a larger batch");
  }
  std::memset(bytes, 0, layout.bytes);
  auto* counts = reinterpret_cast<int32_t*>(bytes);
  auto* cu = reinterpret_cast<int32_t*>(bytes + layout.cu_offset);
  for (int64_t i = 0; i <= layout.image_capacity; ++i) {
    cu[i] = batch.cu_seqlens()[std::min<int64_t>(i, batch.num_images())];  // pad with the end
  }
  for (int i = 0; i < kSchedules; ++i) {
    counts[i] = write_schedule(batch, kScheduleRows[i], reinterpret_cast<Tile*>(bytes + layout.schedule_offset[i]),
                               layout.tile_capacity[i]);
  }
}

}  // namespace

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    fail(ErrorCode::internal, "cuda: ", what, " failed: ", cudaGetErrorString(status));
  }
}

DeviceGuard::DeviceGuard(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (device != previous_) check(cudaSetDevice(device), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }

Layout::Layout(int64_t images, int64_t tokens) : image_capacity(images) {
  static_assert(4 * kSchedules <= 16, "the tile counts fit the buffer's first 16 bytes");
  cu_offset = 16;
  seq_len_offset = align16(cu_offset + 4 * size_t(images + 1));
  ragged_offset = align16(seq_len_offset + 4 * size_t(images));
  ragged_array_bytes = align16(8 * size_t(images + 1));
  bytes = ragged_offset + cudnn::kRaggedTensors * ragged_array_bytes;
  for (int s = 0; s < kSchedules; ++s) {
    tile_capacity[s] = tile_bound(images, tokens, kScheduleRows[s]);
    schedule_offset[s] = bytes;
    bytes += sizeof(Tile) * size_t(tile_capacity[s]);
  }
}

}  // namespace visattn::cuda

namespace visattn {

DeviceMetadata::DeviceMetadata(int device, const cuda::Layout& layout, int64_t max_seqlen_bound)
    : device(device), layout(layout), max_seqlen_bound(max_seqlen_bound) {}

DeviceMetadata::~DeviceMetadata() {
  if (buffer) {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    cudaFree(buffer);
    cudaSetDevice(previous);
  }
}

}  // namespace visattn

namespace visattn::cuda {

namespace {

void upload(DeviceMetadata& prepared, const VarlenBatch& batch, void* stream_handle) {
  std::vector<char> bytes(prepared.layout.bytes);
  write_device_image(batch, prepared.layout, bytes.data());
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  check(cudaMemcpyAsync(prepared.buffer, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync (batch metadata)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // `bytes` dies here
}

// Capacity of a batch's bucket: its images rounded to the bucket, and the tiles any batch of
// that many tokens and images can have.
Layout layout_for(const VarlenBatch& batch) { return Layout(batch.batch_bucket(), batch.total_tokens()); }

// For batches nobody prepared: a ring of slots per device, each a device copy (grown as
// needed), a pinned host image to copy it from, and an event recorded after the last call that
// used it. A call takes the next slot under the lock (held for the call) and waits only for that
// slot's last call, so that unprepared calls queue on the stream like prepared ones instead of
// syncing before and after each (which cost 5-8% on clip and siglip: bench/NOTES.md CUDA 29).
// The copy runs on the ring's own upload stream, and the call's stream waits for it by an
// event: it then lands while the kernels queued before the call still run, instead of taking
// a copy engine's turn between them (CUDA 31).
struct PinnedBytes {
  void* data = nullptr;
  size_t bytes = 0;
  PinnedBytes() = default;
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  ~PinnedBytes() {
    if (data) cudaFreeHost(data);
  }
  void reserve(size_t wanted) {
    if (wanted <= bytes) return;
    if (data) cudaFreeHost(data);
    data = nullptr, bytes = 0;
    check(cudaMallocHost(&data, wanted), "cudaMallocHost (batch metadata)");
    bytes = wanted;
  }
};

struct ScratchSlot {
  std::unique_ptr<DeviceMetadata> metadata;
  PinnedBytes staging;
  cudaEvent_t released = nullptr;  // created on the slot's first use, with `copied`
  cudaEvent_t copied = nullptr;    // recorded on the upload stream after the slot's copy
  ScratchSlot() = default;
  ScratchSlot(const ScratchSlot&) = delete;
  ScratchSlot& operator=(const ScratchSlot&) = delete;
  ~ScratchSlot() {
    if (released) cudaEventDestroy(released), cudaEventDestroy(copied);
  }
};

// Four: a call waits for the one four calls before it, long done unless the GPU is that far behind.
constexpr int kScratchSlots = 4;
struct ScratchRing {
  std::array<ScratchSlot, kScratchSlots> slots;
  int next = 0;
  cudaStream_t upload = nullptr;  // created with the ring, on its device
  ScratchRing() { check(cudaStreamCreateWithFlags(&upload, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ScratchRing(const ScratchRing&) = delete;
  ScratchRing& operator=(const ScratchRing&) = delete;
  ~ScratchRing() { cudaStreamDestroy(upload); }
};

std::mutex scratch_mutex;
std::vector<std::unique_ptr<ScratchRing>> scratch;  // per device

// Whether every tile row is whole 16-byte chunks at 16-byte aligned addresses.
bool vector_io(const AttentionParams& p) {
  auto aligned = [](const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; };
  // The head stride of a tensor with one head is never used: it does not count.
  const bool many_heads = p.num_heads > 1, many_kv_heads = p.num_kv_heads > 1;
  const int64_t strides[] = {p.q_token_stride, many_heads ? p.q_head_stride : 0,
                             p.k_token_stride, many_kv_heads ? p.k_head_stride : 0,
                             p.v_token_stride, many_kv_heads ? p.v_head_stride : 0,
                             p.out_token_stride, many_heads ? p.out_head_stride : 0};
  return p.head_dim % 8 == 0 && aligned(p.q) && aligned(p.k) && aligned(p.v) && aligned(p.out) &&
         std::all_of(std::begin(strides), std::end(strides), [](int64_t s) { return s % 8 == 0; });
}

// The kernel's head dim for `head_dim`: the smallest compiled one that holds it; 0 past 256.
int padded_head_dim(int head_dim) {
  for (int d : Sm80HeadDims::kDims) {
    if (d >= head_dim) return d;
  }
  return 0;
}

}  // namespace

int compute_capability(int device) {
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  return major * 10 + minor;
}

MetadataLease::MetadataLease(const AttentionParams& p) : stream_(static_cast<cudaStream_t>(p.cuda_stream)) {
  if (p.prepared) {
    metadata_ = p.prepared;
    return;
  }
  // An unprepared batch is uploaded here (a copy on the stream per call): not while capturing.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream_, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone) {
    fail(ErrorCode::invalid_value, "batch: call VarlenBatch.prepare(", device_name(p.device),
         ") before capturing a CUDA graph; an unprepared batch is copied to the GPU on every "
         "call, which a graph cannot hold");
  }
  const int device = p.device.index;
  prepared_ = false;
  scratch_lock_ = std::unique_lock(scratch_mutex);
  if (int(scratch.size()) <= device) scratch.resize(device + 1);
  if (!scratch[device]) scratch[device] = std::make_unique<ScratchRing>();
  ScratchRing& ring = *scratch[device];
  ScratchSlot& slot = ring.slots[ring.next];
  ring.next = (ring.next + 1) % kScratchSlots;
  if (slot.released) {
    check(cudaEventSynchronize(slot.released), "cudaEventSynchronize");  // its last call is done with it
  } else {
    check(cudaEventCreateWithFlags(&slot.released, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  released_ = slot.released;
  const VarlenBatch batch = VarlenBatch::from_cu_seqlens(
      std::span<const int32_t>(p.cu_seqlens, size_t(p.num_images + 1)));
  const Layout needed = layout_for(batch);
  std::unique_ptr<DeviceMetadata>& metadata = slot.metadata;
  if (!metadata || !metadata->layout.holds(needed)) {
    metadata = std::make_unique<DeviceMetadata>(device, needed, batch.max_seqlen_bucket());
    check(cudaMalloc(&metadata->buffer, needed.bytes), "cudaMalloc (batch metadata)");
  }
  const size_t bytes = metadata->layout.bytes;
  slot.staging.reserve(bytes);
  write_device_image(batch, metadata->layout, static_cast<char*>(slot.staging.data));
  check(cudaMemcpyAsync(metadata->buffer, slot.staging.data, bytes, cudaMemcpyHostToDevice, ring.upload),
        "cudaMemcpyAsync (batch metadata)");
  check(cudaEventRecord(slot.copied, ring.upload), "cudaEventRecord");
  check(cudaStreamWaitEvent(stream_, slot.copied, 0), "cudaStreamWaitEvent");
  metadata_ = metadata.get();
}

cudaError_t MetadataLease::release_slot() {
  // The slot is free once the stream has passed this point; where that cannot be recorded, once
  // the stream is idle.
  const cudaError_t status = cudaEventRecord(released_, stream_);
  if (status != cudaSuccess) cudaStreamSynchronize(stream_);
  scratch_lock_.unlock();
  return status;
}

void MetadataLease::finish() {
  if (scratch_lock_.owns_lock()) check(release_slot(), "cudaEventRecord");
}

MetadataLease::~MetadataLease() {
  if (scratch_lock_.owns_lock()) release_slot();  // a call that failed half way
}

std::vector<std::string> gpu_names() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return {};
  }
  std::vector<std::string> names;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      names.push_back(concat("cuda:", d, " ", prop.name, " (sm", prop.major, prop.minor, ", ",
                             prop.totalGlobalMem >> 20, " MiB)"));
    }
  }
  return names;
}

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return concat("no usable CUDA device (cudaGetDeviceCount: ", cudaGetErrorString(status), ")");
  }
  if (count == 0) return "no CUDA device";
  for (int d = 0; d < count; ++d) {
    if (compute_capability(d) >= 80) return {};
  }
  return concat("needs a GPU of compute capability 8.0 or newer; cuda:0 is sm", compute_capability(0));
}

std::string describe() {
  return concat("mma.sync tensor-core tiles (sm80+)",
#if VISATTN_WITH_SM90A
                "; on sm90 warp-specialized wgmma tiles of 128 rows loaded by TMA (head dims 64-128, 16-byte aligned tensors, "
                "an image longer than 128 tokens; VISATTN_CUDA_SM90=0 turns them off) and 128 keys, 176 or 192 "
                "where the images' lengths pad them little, or at head dim 64 tiles of 192 rows on three warpgroups "
                "where a cost model of the lengths says they are faster; a last block of at most ", kSm90TailKeys,
                " keys (a class token) by mma.sync, not a block of wgmmas",
#endif
                "; tiles heaviest first, short images packed; head_dim rounded up to 32/64/80/96/128/256");
}

namespace {

// kernel_for reads VISATTN_CUDA_SM90_KEYS (128 or wide) and VISATTN_CUDA_SM90_GROUPS (2 or 3)
// once per process; another value is an error, not ignored.
void check_knob(const char* name, std::string_view a, std::string_view b) {
  const char* set = std::getenv(name);
  if (set && std::string_view(set) != a && std::string_view(set) != b) {
    fail(ErrorCode::invalid_value, name, "='", set, "': expected ", a, " or ", b);
  }
}
void check_kernel_knobs() {
  // Checked once: a throw leaves the static uninitialized, so every later call fails the same way.
  static const bool checked = (check_knob("VISATTN_CUDA_SM90_KEYS", "128", "wide"),
                               check_knob("VISATTN_CUDA_SM90_GROUPS", "2", "3"), true);
  (void)checked;
}

}  // namespace

bool runs_sm90(const AttentionParams& p) {
  if (!unavailable_reason().empty()) return false;  // `auto` asks before anyone checked for a GPU
  const int padded = padded_head_dim(p.head_dim);
  return padded > 0 && kernel_for(vector_io(p), padded, compute_capability(p.device.index), p.cu_seqlens,
                                  p.num_images) != Kernel::sm80;
}

void run(const AttentionParams& p) {
  check_kernel_knobs();
  const int device = p.device.index;
  DeviceGuard guard(device);
  const int cc = compute_capability(device);
  if (cc < 80) {
    fail(ErrorCode::unsupported, "backend='cuda': ", device_name(p.device), " is sm", cc,
         "; the kernel needs sm80 or newer");
  }
  const int padded = padded_head_dim(p.head_dim);
  if (padded == 0) fail(ErrorCode::unsupported, "backend='cuda': head_dim ", p.head_dim, " is larger than 256");
  // Token indices are 32-bit in the kernel, with room for one key block past the end.
  if (const int64_t tokens = p.cu_seqlens[p.num_images]; tokens > INT32_MAX - 256) {
    fail(ErrorCode::unsupported, "backend='cuda': ", tokens, " tokens in one call; at most ",
         INT32_MAX - 256, " (split the batch)");
  }
  const auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  MetadataLease lease(p);
  const DeviceMetadata* prepared = &lease.metadata();

  KernelParams kp{};
  kp.q = p.q, kp.k = p.k, kp.v = p.v, kp.out = p.out;
  kp.q_token_stride = p.q_token_stride, kp.q_head_stride = p.q_head_stride;
  kp.k_token_stride = p.k_token_stride, kp.k_head_stride = p.k_head_stride;
  kp.v_token_stride = p.v_token_stride, kp.v_head_stride = p.v_head_stride;
  kp.out_token_stride = p.out_token_stride, kp.out_head_stride = p.out_head_stride;
  kp.num_heads = p.num_heads, kp.num_kv_heads = p.num_kv_heads, kp.head_dim = p.head_dim;
  const char* buffer = static_cast<const char*>(prepared->buffer);
  kp.cu_seqlens = reinterpret_cast<const int32_t*>(buffer + prepared->layout.cu_offset);
  // Each kernel walks the schedule of its tile rows (see Layout).
  kp.vector_io = vector_io(p);
  const Kernel kernel = kernel_for(kp.vector_io, padded, cc, p.cu_seqlens, p.num_images);
  const int schedule = schedule_index(kernel);
  kp.schedule = reinterpret_cast<const Tile*>(buffer + prepared->layout.schedule_offset[schedule]);
  kp.tile_count = reinterpret_cast<const int32_t*>(buffer) + schedule;
  kp.scale_log2 = float(p.softmax_scale * 1.4426950408889634);
  kp.window_left = p.window_left, kp.window_right = p.window_right;
  kp.sinks = p.sinks, kp.sinks_stride = p.sinks_stride;
  kp.lse = p.lse, kp.lse_head_stride = p.lse_head_stride, kp.lse_token_stride = p.lse_token_stride;

  // The grid covers the bucket's tile capacity (a later batch of the bucket, graph replay).
  const int64_t tiles = prepared->layout.tile_capacity[schedule];
  const int64_t blocks = tiles * p.num_heads;  // tile-major, then heads
  if (blocks > INT32_MAX) {
    fail(ErrorCode::unsupported, "backend='cuda': ", tiles, " tiles x ", p.num_heads,
         " heads exceed the 2^31 - 1 blocks of one launch (split the batch)");
  }
  const dim3 grid{unsigned(blocks)};
  check(launch_flash_forward(kernel, kp, p.dtype == DType::bf16, padded, p.max_seqlen, grid, stream), "kernel launch");
  lease.finish();
}

std::shared_ptr<DeviceMetadata> prepare(const VarlenBatch& batch, int device, void* stream) {
  DeviceGuard guard(device);
  auto prepared = std::make_shared<DeviceMetadata>(device, layout_for(batch), batch.max_seqlen_bucket());
  check(cudaMalloc(&prepared->buffer, prepared->layout.bytes), "cudaMalloc (batch metadata)");
  upload(*prepared, batch, stream);
  return prepared;
}

void update(DeviceMetadata& prepared, const VarlenBatch& batch, void* stream) {
  DeviceGuard guard(prepared.device);
  // A cudnn plan (and a graph captured with it) covers images up to the bound it was built for.
  if (const int64_t bucket = batch.max_seqlen_bucket(); bucket > prepared.max_seqlen_bound) {
    if (prepared.max_seqlen_bound_used) {
      fail(ErrorCode::invalid_value, "update_device: an image of ", batch.max_seqlen(),
           " tokens is longer than the max_seqlen bucket ", prepared.max_seqlen_bound.load(),
           " this batch was prepared for, and the cudnn backend has planned for that bucket (a "
           "captured graph cannot see longer images); prepare a batch with max_seqlen >= ",
           batch.max_seqlen(), " instead");
    }
    prepared.max_seqlen_bound = bucket;
  }
  upload(prepared, batch, stream);
}

int metadata_device(const DeviceMetadata& prepared) { return prepared.device; }

}  // namespace visattn::cuda
