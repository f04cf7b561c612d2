// The forward kernel on Hopper (sm90a): the sm80 kernel's masking and online softmax with the
// products on warpgroup MMAs, over the 128-row tile schedule. A persistent grid: one block per
// SM takes one item (tile, head) per round of gridDim.x items, in a snake order.
//   - a producer warpgroup (setmaxnreg: few registers) copies each item's Q and its K/V blocks
//     of 128 keys or sm90_wide_keys(D) (TMA boxes for whole tiles and blocks, TensorMaps;
//     cp.async 16-byte chunks for partial ones; both into the 128-byte-swizzled layout wgmma
//     reads) into a ring of stages; K and V of a stage each have a "full" barrier that
//     completes when their copies land and an "empty" one when both consumers are done with
//     them (K once S is done, V once P V is: the next K loads during the softmax); Q has such
//     a pair too (two Q buffers at head dim 64, where they fit). The producer alone walks the
//     schedule: it hands each item to the consumers in a slot of shared memory;
//   - two consumer warpgroups (three at head dim 64 where the lengths favour 192-row tiles:
//     kernel_for, bench/NOTES.md CUDA entry 40) own 64 query rows each and share every K/V stage. Each issues
//     S = Q Kᵀ of key block j (m64nKk16 wgmmas, K in shared memory, Q too or, where Q has one
//     buffer, in registers: the buffer is then free for the next item's Q) and then O += P V of
//     block j - 1 (m64nDk16, P from registers, V in shared memory, MN-major) in one issue. They
//     take turns issuing (ping-pong, round robin), so that one's softmax runs under the others' MMAs
//     (ptxas waits for P V before the softmax but at head dim 128, where a shared-memory store
//     pins the wait below the exponentials; see the loop);
//   - the producer loads the next item's Q and K/V while the consumers finish this one; the
//     consumers issue the next item's first S and then store this one's O from registers
//     (packed), so that the stores run under that S.
//   - Warpgroups whose rows see none of a key block (packed images, windows) let it pass.
// Compiled for sm_90a only (its own object library in CMakeLists.txt); the host runs it on
// compute capability 9.0 for head dims padded to 64, 80, 96 and 128 when the tensors allow
// 16-byte copies and some image is longer than a tile (kernel_for; bench/NOTES.md CUDA
// entries 10-11).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // cuTensorMapEncodeTiled's type (reached through the runtime: no -lcuda)

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backends/cuda/block_work.cuh"
#include "backends/cuda/flash_params.h"
#include "backends/cuda/flash_sm90.h"
#include "backends/cuda/head_dims.h"
#include "backends/cuda/mbarrier.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/tma.cuh"
#include "backends/cuda/wgmma.cuh"

namespace visattn::cuda {

namespace {

constexpr int kGroupRows = 64;  // per consumer warpgroup: 4 warps x 16
// Keys per block (kSm90Keys = 128, or sm90_wide_keys(D)): 128 was faster than 64 on every
// workload but 64-token windows, which run the sm80 kernel (bench/NOTES.md CUDA entry 11); the
// wider blocks spread the softmax's per-block work (maxima, shuffles, turns, O's rescale) over
// more keys (CUDA entry 18).
constexpr int kProducerThreads = 128;  // a warpgroup: sm90 allocates registers by warpgroup
// A block of `Groups` consumer warpgroups (2: 128-row tiles; 3: 192-row tiles, head dim 64 and
// 128 keys, where the registers allow no more) and the producer.
template <int Groups>
struct Block {
  static constexpr int kRows = Groups * kGroupRows;
  static constexpr int kConsumerThreads = 128 * Groups, kThreads = kConsumerThreads + kProducerThreads;
  // What ptxas may give each thread at launch (65536 / threads, rounded down to 8).
  static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
};
// Registers per thread, moved from the producers, which need few, to the consumers
// (setmaxnreg). setmaxnreg.inc waits until the block's own pool (fixed at launch) has the
// registers, so a split beyond that pool hangs. 24/240 ran siglip 2-4% faster than 40/232
// (bench/NOTES.md CUDA entry 22); the 176-key kernels spill with it (values from before the
// split) and lost 3%: they keep 40/232, and so does 96/192, which spills too since the
// producer has the TMA path. Three consumer warpgroups: 32/160, all of 512 threads' 128.
template <int D, int Keys, int Groups>
struct Registers {
  static constexpr bool kSpillsAt24 = Keys == 176 || (D == 96 && Keys == 192);
  static constexpr int kProducer = Groups == 3 ? 32 : kSpillsAt24 ? 40 : 24;
  static constexpr int kConsumer = Groups == 3 ? 160 : kSpillsAt24 ? 232 : 240;
  using B = Block<Groups>;
  static_assert(kProducerThreads * kProducer + B::kConsumerThreads * kConsumer <= B::kThreads * B::kLaunchRegisters,
                "the split fits the registers the block holds from launch");
};
constexpr int kMaxShared = 227 * 1024;           // per block on sm90

// An item as the producer hands it to the consumers (bench/NOTES.md CUDA entry 25): their
// setup per item is then a few shared loads, not the schedule's chain of dependent global
// loads and integer divisions. It has its own barrier, so that the consumers' setup runs while
// the item's Q is still on its way.
struct ItemSlot {
  BlockWork work;
  int valid;  // 0: the schedule has ended
};
static_assert(sizeof(ItemSlot) % 16 == 0 && alignof(ItemSlot) <= 16, "a slot is whole 16-byte words");

// A consumer warp's copy of the slot: lane 0 reads it and passes it on, so that (1) ptxas sees
// the item warp-uniform (a value it may think divergent, in a branch around the wgmmas,
// serializes them all), and (2) the lane that reads the slot is the one whose arrival on
// q_empty later lets the producer overwrite it (compute-sanitizer's racecheck flagged reads by
// the other lanes, ordered before that arrival only through __syncwarp).
__device__ inline ItemSlot read_slot(const ItemSlot& slot, int lane) {
  ItemSlot item;
#pragma unroll
  for (int i = 0; i < int(sizeof(ItemSlot) / 4); ++i) {  // word by word: the copy stays in registers
    int word = 0;
    if (lane == 0) memcpy(&word, reinterpret_cast<const char*>(&slot) + 4 * i, 4);
    word = __shfl_sync(0xffffffffu, word, 0);
    memcpy(reinterpret_cast<char*>(&item) + 4 * i, &word, 4);
  }
  return item;
}

// Writes the slot where `writer` holds, as predicated stores: a branch around them (one thread
// writing) made ptxas keep the shared window's base in a per-thread register for the rest of
// the producer, and every TMA issue then moved it to a uniform one first.
__device__ inline void store_slot(ItemSlot* slot, const ItemSlot& item, bool writer) {
  int4 words[sizeof(ItemSlot) / 16];
  memcpy(words, &item, sizeof(words));
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(slot));
#pragma unroll
  for (int i = 0; i < int(sizeof(ItemSlot) / 16); ++i) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p st.shared.v4.b32 [%1], {%2, %3, %4, %5};\n}\n" ::"r"(int(writer)),
                 "r"(address + 16 * i), "r"(words[i].x), "r"(words[i].y), "r"(words[i].z), "r"(words[i].w)
                 : "memory");
  }
}

// Shared memory of head dim D (padded) and key blocks of kKeys (S is m64 x kKeys per
// warpgroup): the Q buffers (each warpgroup's Q), then the stages (K, then V), each a tile of
// 128-byte rows (64 elements) per 64-column atom of the head dim; then the barriers, an item
// slot per Q buffer and, where Pinned, the pin's words (see the softmax). As many stages as
// fit, up to 4; a second Q buffer where it costs no stage (head dim 64), so that the next
// item's Q lands while this one runs.
template <int D, int Keys, int Groups, bool Pinned>
struct Tiles {
  static constexpr int kKeys = Keys;
  static constexpr int kAtoms = (D + 63) / 64;
  static constexpr int kGroupQBytes = kAtoms * kGroupRows * 128;
  static constexpr int kQBytes = Groups * kGroupQBytes;
  static constexpr int kKVBytes = kAtoms * kKeys * 128;
  static constexpr int kStageBytes = 2 * kKVBytes;
  static constexpr int kMaxStages = 4, kMaxQBuffers = 2;
  // Per Q buffer: Q full/empty, slot full; per stage: K and V full/empty.
  static constexpr int kBarrierBytes = (3 * kMaxQBuffers + 4 * kMaxStages) * 8;
  static constexpr int kSlotBytes = (kMaxQBuffers * sizeof(ItemSlot) + 15) / 16 * 16;
  static constexpr int kPinBytes = Pinned ? Groups * 128 * 8 : 0;  // the softmax's pin: 8 bytes a consumer thread
  static constexpr int stages_beside(int q_buffers) {
    const int fit = (kMaxShared - q_buffers * kQBytes - kBarrierBytes - kSlotBytes - kPinBytes) / kStageBytes;
    return fit < kMaxStages ? fit : kMaxStages;
  }
  static constexpr int kStages = stages_beside(1);
  static constexpr int kQBuffers = stages_beside(2) == kStages ? 2 : 1;
  static constexpr int kStagesOffset = kQBuffers * kQBytes;
  static constexpr int kBarriersOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kSlotOffset = kBarriersOffset + kBarrierBytes;
  static constexpr int kPinOffset = kSlotOffset + kSlotBytes;
  static constexpr int kBytes = kPinOffset + kPinBytes;
  static_assert(kStages >= 2 && kBytes <= kMaxShared, "the tiles fit an H100's shared memory");
};

// Byte offset of 16-byte chunk c (columns 8c..8c+7) of row r in a swizzled tile of `rows` rows.
__device__ inline int chunk_offset(int r, int c, int rows) {
  return (c / 8) * rows * 128 + r * 128 + ((c % 8) ^ (r % 8)) * 16;
}

// Rows [0, kHeight) of a tile from a [tokens, heads, head_dim] tensor from token `first` into the
// swizzled layout, copied by the producer threads; rows >= valid and columns >= head_dim are
// zeros (cp.async zero-fill). Thread t copies column chunk t % (D / 8) of rows t / (D / 8) + 8 i:
// its rows' swizzle (row % 8) is the same in every pass, so each copy is a pointer step and an
// immediate shared-memory offset (threads past 8 rows' chunks copy nothing).
template <typename T, int D, int kHeight>
__device__ inline void load_swizzled(unsigned char* tile, const T* base, int64_t first, int valid,
                                     int64_t token_stride, int64_t head_offset, int head_dim, int thread) {
  constexpr int kChunks = D / 8;
  static_assert(8 * kChunks <= kProducerThreads && kHeight % 8 == 0, "one pass covers 8 rows");
  if (thread >= 8 * kChunks) return;
  const int c = thread % kChunks, r0 = thread / kChunks;
  const int rows = c * 8 < head_dim ? valid - r0 : 0;  // this thread's rows to copy, 8 apart
  const T* source = base + (first + r0) * token_stride + head_offset + c * 8;
  const int64_t step = 8 * token_stride;
  unsigned char* target = tile + chunk_offset(r0, c, kHeight);
#pragma unroll
  for (int i = 0; i < kHeight / 8; ++i, source += step) {
    const bool inside = 8 * i < rows;
    cp_async_16(target + i * 8 * 128, inside ? source : base, inside ? 16 : 0);
  }
}

// Whole Q tiles and K/V blocks are copied by TMA (VISATTN_CUDA_SM90_TMA=0 turns it off; NOTES
// CUDA 23: +1-6% at head dims 64 and 128 on an H100), one thread issuing a box per 64-column
// atom, instead of by the producer warpgroup's 16-byte cp.async copies. Q, K and V as rank-3
// tensors (head_dim, heads, tokens; innermost first), boxes of 64 columns x 1 head x the tile's
// rows, 128-byte swizzle: the layout chunk_offset describes. Columns past head_dim come as zeros; a block or tile
// with rows past its image keeps the cp.async copies, which zero those rows.
struct TensorMaps {
  CUtensorMap q, k, v;
  int enabled;
};

template <typename T, int D, int Keys, int Groups, bool Pinned>
__global__ void __launch_bounds__(Block<Groups>::kThreads, 1)
    flash_fwd_sm90_kernel(const KernelParams p, int tail_limit, const __grid_constant__ TensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Layout = Tiles<D, Keys, Groups, Pinned>;
  constexpr int kKeys = Layout::kKeys, kStages = Layout::kStages, kScores = kKeys / 2;  // S registers per thread
  using Regs = Registers<D, Keys, Groups>;
  constexpr int kRows = Block<Groups>::kRows, kConsumers = Groups, kConsumerThreads = Block<Groups>::kConsumerThreads;
  // Q in registers (bench/NOTES.md CUDA entry 27: siglip +7% on an H100): where Q has one
  // buffer, each consumer warp loads its rows of Q into registers at the item's start and frees
  // the buffer at once, so that the next item's Q loads during this one; S is then an RS wgmma
  // (A from registers). Not with two Q buffers (head dim 64: the next Q loads early already;
  // clip -1%) nor where the consumers hold 232 registers (ptxas spills and serializes the wgmmas).
  constexpr bool kQInRegisters = Layout::kQBuffers == 1 && !Regs::kSpillsAt24;
  // A consumer releases K of a block after that block's softmax, not before: ptxas then runs
  // the maxima under P V of the block before (at 192 keys: large4 +2%, the other head dim 80
  // workloads within noise; bench/NOTES.md CUDA entry 19). At 176 keys (head dim 128) the
  // kernel then spills 44 bytes at 232 registers and lost 3%.
  constexpr bool kReleaseKAfterSoftmax = Keys == 192;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(1024) unsigned char shared[];
  constexpr int kQBuffers = Layout::kQBuffers;
  unsigned char* stages = shared + Layout::kStagesOffset;
  uint64_t* q_full = reinterpret_cast<uint64_t*>(shared + Layout::kBarriersOffset);  // [kQBuffers] each
  uint64_t* q_empty = q_full + kQBuffers;
  uint64_t* slot_full = q_empty + kQBuffers;
  uint64_t* full_k = slot_full + kQBuffers;  // [kStages] each
  uint64_t* full_v = full_k + kStages;
  uint64_t* empty_k = full_v + kStages;
  uint64_t* empty_v = empty_k + kStages;
  ItemSlot* slots = reinterpret_cast<ItemSlot*>(shared + Layout::kSlotOffset);  // [kQBuffers]
  // Item r of this block (its round) takes Q buffer and slot r % kQBuffers, for the u-th time
  // (u = r / kQBuffers): phase u of their barriers.
  auto q_buffer = [](int round) { return round % kQBuffers; };
  auto q_parity = [](int round) { return uint32_t(round / kQBuffers & 1); };

  BlockWork w;
  if (!block_work(p, kRows, blockIdx.x, w)) return;  // the block's first item
  if (threadIdx.x == 0) {
    for (int b = 0; b < kQBuffers; ++b) {
      mbarrier::init(&q_full[b], kProducerThreads);
      mbarrier::init(&q_empty[b], kQInRegisters ? kConsumerThreads : 4 * kConsumers);  // see begin_item
      mbarrier::init(&slot_full[b], kProducerThreads);
    }
    for (int s = 0; s < kStages; ++s) {
      mbarrier::init(&full_k[s], kProducerThreads);  // each producer thread, as its copies land
      mbarrier::init(&full_v[s], kProducerThreads);
      mbarrier::init(&empty_k[s], 4 * kConsumers);  // every consumer warp
      mbarrier::init(&empty_v[s], 4 * kConsumers);
    }
    mbarrier::fence_init();
  }
  __syncthreads();
  // Items of this block: one per round of gridDim.x items, in a snake order
  // (blockIdx.x of the even rounds, the mirror place of the odd ones) until the schedule ends.
  // The schedule runs heaviest first, so a block with a heavy item in one round gets a light
  // one in the next. Key blocks are counted across items (n): stage n % kStages, round
  // n / kStages.
  // Only the producer walks the schedule; it hands each item to the consumers in the slot.
  auto next_item = [&](int round) {  // after `round`: false when the block is done
    const int64_t grid = gridDim.x, next = (round + 1) * grid + (round % 2 ? blockIdx.x : grid - 1 - blockIdx.x);
    return next <= INT_MAX && block_work(p, kRows, int(next), w);
  };
  auto key_blocks = [&] { return (w.key_end - w.key_begin + kKeys - 1) / kKeys; };

  if (threadIdx.x >= kConsumerThreads) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs::kProducer));
    const int thread = threadIdx.x - kConsumerThreads;
    const T* k = static_cast<const T*>(p.k);
    const T* v = static_cast<const T*>(p.v);
    // TMA: thread 0 announces the bytes of `tiles` tiles and issues their boxes; the other
    // threads' arrivals complete the count that cp.async copies complete otherwise.
    auto boxes = [&](uint64_t* full, int tiles, unsigned char* tile, int tile_bytes, const CUtensorMap* map,
                     int rows, int head, int first) {
      if (thread != 0) return mbarrier::arrive(full);
      // The tile's last reads or writes may have been through the generic proxy (tail_update's
      // loads, cp.async copies): ordered before these async-proxy writes.
      sm90::fence_async_shared();
      mbarrier::arrive_expect_bytes(full, tiles * tile_bytes);
      for (int t = 0; t < tiles; ++t) {
        for (int atom = 0; atom < Layout::kAtoms; ++atom) {
          tma::load_3d(tile + t * tile_bytes + atom * rows * 128, map, atom * 64, head, first + t * rows, full);
        }
      }
    };
    // Round r's Q buffer and slot, once the consumers are done with their last item (q_empty of
    // round r - kQBuffers). Thread 0 writes the slot; every producer thread arrives on
    // slot_full, thread 0's arrival releasing its stores to the consumers that wait for it.
    auto claim_q_buffer = [&](int round, bool valid) {
      const int b = q_buffer(round);
      if (round >= kQBuffers) mbarrier::wait(&q_empty[b], q_parity(round) ^ 1);
      store_slot(&slots[b], ItemSlot{w, valid}, thread == 0);
      mbarrier::arrive(&slot_full[b]);
    };
    int n = 0;
    for (int round = 0;; ++round) {
      claim_q_buffer(round, true);
      unsigned char* q_tiles = shared + q_buffer(round) * Layout::kQBytes;
      uint64_t* q_landed = &q_full[q_buffer(round)];
      if (maps.enabled && w.rows == kRows) {
        boxes(q_landed, kConsumers, q_tiles, Layout::kGroupQBytes, &maps.q, kGroupRows, w.head, w.q_begin);
      } else {
        for (int g = 0; g < kConsumers; ++g) {
          load_swizzled<T, D, kGroupRows>(q_tiles + g * Layout::kGroupQBytes, static_cast<const T*>(p.q),
                                          w.q_begin + g * kGroupRows, min(kGroupRows, max(0, w.rows - g * kGroupRows)),
                                          p.q_token_stride, w.head * p.q_head_stride, p.head_dim, thread);
        }
        mbarrier::arrive_on_copies(q_landed);
      }
      const int blocks = key_blocks();
      for (int j = 0; j < blocks; ++j, ++n) {
        const int stage = n % kStages, kb = w.key_begin + j * kKeys, valid = min(kKeys, w.key_end - kb);
        // The stage's previous round (this round's parity flipped) must have been read. Waited
        // for in every round: a new barrier counts the phase before its first as complete, and
        // n is reduced at each item's end (below), so n < kStages is no first round.
        const int parity = (n / kStages & 1) ^ 1;
        unsigned char* k_tile = stages + stage * Layout::kStageBytes;
        const bool whole = maps.enabled && valid == kKeys;
        mbarrier::wait(&empty_k[stage], parity);
        if (whole) {
          boxes(&full_k[stage], 1, k_tile, Layout::kKVBytes, &maps.k, kKeys, w.kv_head, kb);
        } else {
          load_swizzled<T, D, kKeys>(k_tile, k, kb, valid, p.k_token_stride, w.kv_head * p.k_head_stride,
                                     p.head_dim, thread);
          mbarrier::arrive_on_copies(&full_k[stage]);
        }
        mbarrier::wait(&empty_v[stage], parity);
        if (whole) {
          boxes(&full_v[stage], 1, k_tile + Layout::kKVBytes, Layout::kKVBytes, &maps.v, kKeys, w.kv_head, kb);
        } else {
          load_swizzled<T, D, kKeys>(k_tile + Layout::kKVBytes, v, kb, valid, p.v_token_stride,
                                     w.kv_head * p.v_head_stride, p.head_dim, thread);
          mbarrier::arrive_on_copies(&full_v[stage]);
        }
      }
      n %= 2 * kStages;  // stage and parity repeat with this period: n stays small (the consumers do the same)
      if (!next_item(round)) {  // the end: a slot marked so, and no Q
        claim_q_buffer(round + 1, false);
        break;
      }
    }
    cp_async_wait_all();
    return;
  }

  // A consumer: warpgroup `group` owns rows [64 group, 64 group + 64) of each tile.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs::kConsumer));
  const int group = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int quad = lane % 4, first_row = group * kGroupRows + 16 * warp + lane / 4;
  // This warpgroup's Q of the item, its descriptor and the barrier that frees its buffer (set
  // by begin_item).
  const unsigned char* q_tile = shared + group * Layout::kGroupQBytes;
  uint64_t* q_empty_now = q_empty;
  auto wait_k = [&](int n) { mbarrier::wait(&full_k[n % kStages], (n / kStages) & 1); };
  auto wait_v = [&](int n) { mbarrier::wait(&full_v[n % kStages], (n / kStages) & 1); };
  auto release = [&](uint64_t* barrier) {  // this warp is done with what the barrier guards
    __syncwarp();
    if (lane == 0) mbarrier::arrive(barrier);
  };
  auto release_k = [&](int n) { release(&empty_k[n % kStages]); };
  auto release_v = [&](int n) { release(&empty_v[n % kStages]); };
  // Turns: the warpgroups take turns issuing their wgmmas, round robin (named barrier 2 + g is
  // warpgroup g's turn: it begins when the warpgroup before has ended its own), so that one's
  // softmax runs under the others' matrix work instead of all contending for the tensor cores
  // at once. Each takes blocks + 1 turns per item, empty ones included (for the blocks it
  // passes, and one more when it has none of its own), so that the turns pair up.
  // Barrier ids as immediates (a register id cost the 80/192 kernel 44 bytes of spills).
  auto turn_begin = [&] {  // this warpgroup's turn: 128 threads wait, the warpgroup before arrives
    if (group == 0) asm volatile("bar.sync 2, 256;\n" ::: "memory");
    else if (kConsumers == 2 || group == 1) asm volatile("bar.sync 3, 256;\n" ::: "memory");
    else asm volatile("bar.sync 4, 256;\n" ::: "memory");
  };
  auto turn_end = [&] {  // the next warpgroup's turn
    if (group == kConsumers - 1) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
    else if (group == 0) asm volatile("bar.arrive 3, 256;\n" ::: "memory");
    else asm volatile("bar.arrive 4, 256;\n" ::: "memory");
  };
  auto empty_turn = [&] { turn_begin(), turn_end(); };
  // A key block no row of this warpgroup sees: its copies are waited for (so that the release
  // cannot run ahead of them) and released, and its turn passes.
  auto pass_block = [&](int n) { wait_k(n), wait_v(n), release_k(n), release_v(n), empty_turn(); };
  if (group == kConsumers - 1) turn_end();  // warpgroup 0 takes the first turn

  const bool windowed = p.window_left >= 0 || p.window_right >= 0;
  float o[D / 2];  // register 4 j + e: row slot e / 2, column 8 j + 2 quad + e % 2
  // O times each row's scale. Once a row's maximum has settled, its scale is exactly 1: most
  // blocks skip this.
  auto scale_o = [&](const float(&scale)[2]) {
    if (__any_sync(0xffffffffu, scale[0] != 1.0f || scale[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= scale[i % 4 / 2];
    }
  };
  float s[kScores];  // register 4 n + e: row slot e / 2, key kb + 8 n + 2 quad + e % 2
#pragma unroll
  for (int i = 0; i < kScores; ++i) s[i] = 0.0f;
  uint32_t p_now[kKeys / 16][4];  // P as k16 A fragments (P V's A)
  int key_min[2], key_max[2];
  float row_max[2], row_sum[2], row_scale[2];

  // S = Q Kᵀ of key block n (not waited for). The first k-step overwrites s.
  // Descriptors of Q and of stage 0's K and V, made once: a tile `b` bytes further is the
  // descriptor plus b / 16 (its address field), so the wgmma loops add constants.
  const uint32_t q_desc_first = sm90::descriptor_low(q_tile, 16);  // the first Q buffer's
  uint32_t q_desc = q_desc_first;
  const uint32_t k_desc = sm90::descriptor_low(stages, 16);
  // V's second 64-column atom is LBO bytes after its first: the next atom of its tile.
  const uint32_t v_desc = sm90::descriptor_low(stages + Layout::kKVBytes, kKeys * 128);
  auto stage_step = [](int n) { return uint32_t(n % kStages * (Layout::kStageBytes / 16)); };
  // With Q in registers: this warp's Q as the k16 A fragments of S (the layout of P's), from
  // the item's Q tile; q_fragments[kk][e]: row slot e % 2, columns 16 kk + 8 (e / 2) + 2 quad
  // + {0, 1}.
  uint32_t q_fragments[kQInRegisters ? D / 16 : 1][4];
  auto load_q_fragments = [&] {
#pragma unroll
    for (int kk = 0; kk < (kQInRegisters ? D / 16 : 0); ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        q_fragments[kk][e] = *reinterpret_cast<const uint32_t*>(
            q_tile + chunk_offset(first_row % kGroupRows + 8 * (e % 2), 2 * kk + e / 2, kGroupRows) + 4 * quad);
      }
    }
  };
  auto issue_s = [&](int n) {
    const uint32_t k_n = k_desc + stage_step(n);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int atom = kk / 4, inside = kk % 4 * 32;  // 64-column atom, bytes into its 128-byte rows
      const uint32_t k_kk = k_n + (atom * kKeys * 128 + inside) / 16;
      if constexpr (kQInRegisters) {
        sm90::Wgmma<T, kKeys>::rs(s, q_fragments[kk], k_kk, kk > 0);
      } else {
        sm90::Wgmma<T, kKeys>::ss(s, q_desc + (atom * kGroupRows * 128 + inside) / 16, k_kk, kk > 0);
      }
    }
    sm90::wgmma_commit();
  };
  // O += P V of key block n (not waited for).
  auto issue_pv = [&](int n) {
    const uint32_t v_n = v_desc + stage_step(n);
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) sm90::Wgmma<T, D>::rs_mn(o, p_now[kk], v_n + kk * 16 * 128 / 16, 1);
    sm90::wgmma_commit();
  };
  // Masks and exponentiates S of the item's key block j in place; row_scale: how much O must
  // shrink before this block's P V adds to it (the sum has shrunk already).
  // With a positive scale (fold) the maximum of the raw scores, scaled, is the maximum of the
  // scaled scores, so the scale rides in the exponent's FFMA: unmasked blocks skip a multiply
  // per score. Otherwise the scores are scaled first (pre) and the FFMA multiplies by one.
  const bool fold = p.scale_log2 > 0.0f;
  const float pre = fold ? 1.0f : p.scale_log2, post = fold ? p.scale_log2 : 1.0f;
  // The pin (Pinned: head dim 128; bench/NOTES.md CUDA entries 42-43). ptxas hoists the wait for P V
  // of block j - 1 above the whole softmax of block j (see the loop), so that the softmax runs
  // under the other warpgroup's matrix work only. It keeps shared-memory accesses in order with
  // that wait, so each thread stores the row sums, which need every exponential of the block,
  // to 8 bytes of its own: the exponentials then run under this warpgroup's own P V too.
  auto pin_exponentials = [&](const float(&sums)[2]) {
    if constexpr (Pinned) {
      const uint32_t pin = static_cast<uint32_t>(__cvta_generic_to_shared(shared + Layout::kPinOffset + 8 * threadIdx.x));
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(pin), "f"(sums[0]), "f"(sums[1]) : "memory");
    }
  };
  auto softmax = [&](int j) {
    const int kb = w.key_begin + j * kKeys;
    if (w.packed || windowed || kb + kKeys > w.key_end) {  // the same for the whole block
#pragma unroll
      for (int i = 0; i < kScores; ++i) {
        const int h = i % 4 / 2, key = kb + 8 * (i / 4) + 2 * quad + i % 2;
        s[i] = (key < key_min[h]) | (key >= key_max[h]) ? -INFINITY : s[i] * pre;
      }
    } else if (!fold) {
#pragma unroll
      for (int i = 0; i < kScores; ++i) s[i] *= pre;
    }
    // Four partial maxima per row: four chains of FMNMX, a quarter as long as one.
    float partial[2][4], block_max[2], row_base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) partial[h][0] = partial[h][1] = partial[h][2] = partial[h][3] = -INFINITY;
#pragma unroll
    for (int i = 0; i < kScores; ++i) partial[i % 4 / 2][i / 4 % 4] = fmaxf(partial[i % 4 / 2][i / 4 % 4], s[i]);
#pragma unroll
    for (int h = 0; h < 2; ++h) block_max[h] = fmaxf(fmaxf(partial[h][0], partial[h][1]), fmaxf(partial[h][2], partial[h][3]));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      fold_block_max(block_max[h] * post, row_max[h], row_sum[h], row_base[h], row_scale[h]);
    }
#pragma unroll
    for (int i = 0; i < kScores; ++i) {
      s[i] = exp2_fast(fmaf(s[i], post, -row_base[i % 4 / 2]));
      row_sum[i % 4 / 2] += s[i];
    }
    pin_exponentials(row_sum);
  };
  // P (the exponentiated S) into P V's A fragments: two n-blocks of S are one k16 fragment.
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) p_now[kk][e] = pack2<T>(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
    }
  };

  // The last own key block n when it holds `keys` keys (tail > 0): the class token of a
  // 577-token image (3 blocks of 192 and one key) costs a few mma.sync here, not a fourth block
  // of wgmmas with its turn. 8 keys at a time, a warp's 16 rows by 8 keys are one m16n8 tile:
  // S as D / 16 m16n8k16 MMAs (A: Q, whose wgmma A fragments are mma's; B: 8 rows of K by
  // ldmatrix), the main loop's softmax on its 4 scores a thread, then P V as D / 8 m16n8k8 MMAs
  // into O itself (a warp's share of a wgmma accumulator is mma's m16n8 C layout, n-block by
  // n-block). Runs after the last P V: O is complete.
  auto tail_update = [&](int n, int kb, int keys) {
    wait_k(n), wait_v(n);
    const unsigned char* k_tile = stages + n % kStages * Layout::kStageBytes;
    const unsigned char* v_tile = k_tile + Layout::kKVBytes;
    // ldmatrix's address for this lane: row `row` + lane % 8 of chunk c + lane / 8 (x4: 4 chunks).
    auto rows8 = [&](const unsigned char* tile, int row, int c) {
      return tile + chunk_offset(row + lane % 8, c + lane / 8, kKeys);
    };
    auto q_step = [&](uint32_t(&a)[4], int kk) {  // Q's A fragment of k-step kk
      if constexpr (kQInRegisters) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = q_fragments[kk][e];
      } else {
        ldmatrix_x4(a, q_tile + chunk_offset(16 * warp + lane % 16, 2 * kk + lane / 16, kGroupRows));
      }
    };
#pragma unroll 1
    for (int t0 = 0; t0 < keys; t0 += 8) {
      float score[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {  // two k-steps of K's chunks per ldmatrix (80: one last)
        uint32_t a[4], b[4];
        q_step(a, kk);
        if (kk + 1 < D / 16) {
          ldmatrix_x4(b, rows8(k_tile, t0, 2 * kk));
          mma_16x8x16<T>(score, a, b[0], b[1]);
          q_step(a, kk + 1);
          mma_16x8x16<T>(score, a, b[2], b[3]);
        } else {
          uint32_t b2[2];
          ldmatrix_x2(b2, rows8(k_tile, t0, 2 * kk));
          mma_16x8x16<T>(score, a, b2[0], b2[1]);
        }
      }
      // score[i]: row slot i / 2, key t0 + 2 quad + i % 2 of the block.
      float block_max[2] = {-INFINITY, -INFINITY}, base[2], scale[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int h = i / 2, t = t0 + 2 * quad + i % 2, key = kb + t;
        score[i] = t < keys && key >= key_min[h] && key < key_max[h] ? score[i] * p.scale_log2 : -INFINITY;
        block_max[h] = fmaxf(block_max[h], score[i]);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) fold_block_max(block_max[h], row_max[h], row_sum[h], base[h], scale[h]);
      scale_o(scale);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        score[i] = exp2_fast(score[i] - base[i / 2]);
        row_sum[i / 2] += score[i];
      }
      const uint32_t p0 = pack2<T>(score[0], score[1]), p1 = pack2<T>(score[2], score[3]);
#pragma unroll
      for (int j = 0; j < D / 8; j += 4) {  // four n-blocks of V per ldmatrix (80: two last)
        if (j + 3 < D / 8) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, rows8(v_tile, t0, j));
#pragma unroll
          for (int e = 0; e < 4; ++e) mma_16x8x8<T>(o + 4 * (j + e), p0, p1, b[e]);
        } else {
          uint32_t b[2];
          ldmatrix_x2_trans(b, rows8(v_tile, t0, j));
#pragma unroll
          for (int e = 0; e < 2; ++e) mma_16x8x8<T>(o + 4 * (j + e), p0, p1, b[e]);
        }
      }
    }
    release_k(n), release_v(n);
  };

  // Begins item w (of `round`): its rows' keys and own blocks; waits for its Q, passes the
  // blocks before its own and issues S of its first own block (not waited for). Called before
  // the last item's output is stored, so that this S runs under those stores.
  int n = 0;  // n: key blocks of earlier items
  int blocks = 0, own_begin = 0, own_end = 0;
  // Keys in the last own block when they are few (at most tail_limit) and blocks before it
  // are own too: that block is added by mma.sync (tail_update), not by a block of wgmmas.
  int tail = 0;
  // Issues S of some block on every path, the schedule's end included (ptxas serializes every
  // wgmma when one is in flight past a branch, or when two places issue an item's first S);
  // returns false at the end, where that S is of whatever stage n holds and is dropped.
  auto begin_item = [&](int round) {
    // The slot first: the setup runs while Q may still be landing.
    const int b = q_buffer(round);
    mbarrier::wait(&slot_full[b], q_parity(round));
    const ItemSlot item = read_slot(slots[b], lane);
    const bool valid = item.valid;
    own_begin = own_end = tail = 0;
    w = item.work;  // on every path, so that the consumers' w never holds the first block_work's
    q_tile = shared + b * Layout::kQBytes + group * Layout::kGroupQBytes;
    q_desc = q_desc_first + uint32_t(b * (Layout::kQBytes / 16));
    q_empty_now = &q_empty[b];
    if (valid) {
      // This thread's two rows (slot h: first_row + 8 h) and the keys each sees; the key
      // blocks some row of this warpgroup sees, [own_begin, own_end).
#pragma unroll
      for (int h = 0; h < 2; ++h) row_keys(p, w, first_row + 8 * h, key_min[h], key_max[h]);
      blocks = key_blocks();
      if (group * kGroupRows < w.rows) {
        int lo, hi, unused;
        row_keys(p, w, group * kGroupRows, lo, unused);
        row_keys(p, w, min(w.rows, (group + 1) * kGroupRows) - 1, unused, hi);
        own_begin = max(0, (lo - w.key_begin) / kKeys);
        own_end = max(own_begin, min(blocks, (hi - w.key_begin + kKeys - 1) / kKeys));
        const int last_keys = hi - (w.key_begin + (own_end - 1) * kKeys);
        if (own_end - own_begin >= 2 && last_keys <= tail_limit) tail = last_keys;
      }
      for (int j = 0; j < own_begin; ++j) pass_block(n + j);
      // Every warp waits for the item's Q, so that its "empty" arrival cannot run ahead of it.
      mbarrier::wait(&q_full[b], q_parity(round));
      // With Q in registers every thread arrives on q_empty after its own loads (one arrival
      // per warp after __syncwarp is ordered too, but racecheck does not follow the other lanes
      // through it and reported the producer's next copies as hazards).
      if constexpr (kQInRegisters) load_q_fragments(), mbarrier::arrive(q_empty_now);
      // A warpgroup without rows in the tile (own_begin = own_end = 0) computes S of block 0
      // and drops it.
      wait_k(n + own_begin);
    }
    sm90::fence_async_shared();  // the copies, visible to the tensor cores' reads
    turn_begin();
    sm90::wgmma_fence();
    issue_s(n + own_begin);
    turn_end();
    return valid;
  };

  // The last item's output, O / l packed to T pairs (registers no wgmma writes), stored under
  // the next item's first S (row_max and row_sum stay the last item's until then).
  BlockWork done;
  uint32_t packed[2][D / 8];
  auto pack_output = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
      row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
      const float inverse = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) packed[h][j] = pack2<T>(o[4 * j + 2 * h] * inverse, o[4 * j + 2 * h + 1] * inverse);
    }
    done = w;
  };
  auto store_output = [&] {
    T* out = static_cast<T*>(p.out) + int64_t(done.q_begin) * p.out_token_stride + done.head * p.out_head_stride;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (first_row + 8 * h >= done.rows) continue;
      T* row = out + (first_row + 8 * h) * p.out_token_stride;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        if (8 * j + 2 * quad < p.head_dim) *reinterpret_cast<uint32_t*>(row + 8 * j + 2 * quad) = packed[h][j];
      }
    }
    if (quad == 0) {
      for (int h = 0; h < 2; ++h) store_lse(p, done, first_row + 8 * h, row_max[h], row_sum[h]);
    }
  };
  auto clear_o = [&] {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  };

  for (int round = 0;; ++round) {
    const bool more = begin_item(round);
    if (round > 0) store_output();
    // S of the first own block, issued by begin_item. Waited for on every path (nothing is in
    // flight without an own block), else ptxas cannot tell and serializes every wgmma.
    sm90::wgmma_wait<0>();
    sm90::fence_operands(s);
    if (!more) break;
    const float sink = p.sinks ? p.sinks[w.head * p.sinks_stride] * kLog2e : -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; ++h) row_max[h] = sink, row_sum[h] = p.sinks && quad == 0 ? 1.0f : 0.0f;
    if (own_begin < own_end) {
      clear_o();  // only now: O is no wgmma's while S is in flight (else ptxas serializes)
      release_k(n + own_begin);
      softmax(own_begin);  // O is zero: nothing to rescale
      pack_p();
      const int full_end = own_end - (tail > 0);  // blocks on the tensor cores
      for (int j = own_begin + 1; j < full_end; ++j) {
        wait_k(n + j);
        wait_v(n + j - 1);
        sm90::fence_async_shared();
        turn_begin();
        sm90::wgmma_fence();
        issue_s(n + j);
        issue_pv(n + j - 1);
        turn_end();
        sm90::wgmma_wait<1>();  // S of block j; P V of block j - 1 still runs
        sm90::fence_operands(s);
        if constexpr (!kReleaseKAfterSoftmax) release_k(n + j);
        softmax(j);
        if constexpr (kReleaseKAfterSoftmax) release_k(n + j);
        // ptxas hoists this wait above the softmax (the PTX has it below; with K released late,
        // above its exponentials): the softmax runs after P V of block j - 1, under the other
        // warpgroup's matrix work only. The pin keeps it below the exponentials at head dim
        // 128 (+2-7%); at head dims 64-80 that lost 1-7% (bench/NOTES.md CUDA entries 16, 42).
        sm90::wgmma_wait<0>();
        sm90::fence_operands(o);
        sm90::fence_operands(p_now);
        release_v(n + j - 1);
        scale_o(row_scale);
        pack_p();
      }
      // Every S of the item is done: the producer may load the next Q.
      if (!kQInRegisters && !tail) release(q_empty_now);
      wait_v(n + full_end - 1);
      sm90::fence_async_shared();
      turn_begin();
      sm90::wgmma_fence();
      issue_pv(n + full_end - 1);
      turn_end();
      sm90::wgmma_wait<0>();
      sm90::fence_operands(o);
      sm90::fence_operands(p_now);
      release_v(n + full_end - 1);
      if (tail) {
        empty_turn();  // the tail block's turn, taken at once: the other warpgroup need not wait
        tail_update(n + full_end, w.key_begin + full_end * kKeys, tail);
        if constexpr (!kQInRegisters) release(q_empty_now);
      }
    } else {  // block 0's S was dropped: its turn is taken, its K and V are released
      clear_o();
      release_k(n);
      wait_v(n);
      release_v(n);
      if constexpr (!kQInRegisters) release(q_empty_now);
      empty_turn();
    }
    for (int j = max(own_end, own_begin + 1); j < blocks; ++j) pass_block(n + j);
    n = (n + blocks) % (2 * kStages);  // as the producer counts

    pack_output();
  }
  if (group == 0) turn_begin();  // the last turn's end: no barrier is left half arrived
#else
  __trap();  // built for another architecture: the host launches this kernel on sm90a only
#endif
}

// The map of a [tokens, heads, head_dim] tensor (16-byte aligned, strides in elements) for
// boxes of `rows` tokens; false where the driver cannot encode it (the copies then stay
// cp.async). Its token count is the largest a map holds: the kernel asks only for boxes of
// the batch's own tokens, and a prepared batch's graph replays it with other lengths.
template <typename T>
bool encode_map(CUtensorMap& map, const void* base, int head_dim, int heads, int64_t token_stride,
                int64_t head_stride, int rows) {
  static const auto encode = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found);
#else  // the sm90a kernel builds with nvcc 12.0 on; the call above came in 12.5
    const cudaError_t status = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &function, cudaEnableDefault, &found);
#endif
    return status == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function)
               : nullptr;
  }();
  if (!encode) return false;
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(INT32_MAX)};
  // One head: its stride is never stepped and may be anything (0 for an expanded view); the
  // driver wants a multiple of 16 bytes, which head_dim (a multiple of 8 here) gives.
  if (heads == 1) head_stride = head_dim;
  const cuuint64_t strides[2] = {cuuint64_t(head_stride) * sizeof(T), cuuint64_t(token_stride) * sizeof(T)};
  const cuuint32_t box[3] = {64, 1, cuuint32_t(rows)}, element_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type =
      std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return head_stride > 0 && token_stride > 0 &&
         encode(&map, type, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One block per SM (registers allow no more) walks the items; the grid is sized for the
// bucket, so no more blocks than it.
template <typename T, int D, int Keys, int Groups, bool Pinned>
cudaError_t launch(const KernelParams& kp, int tail_limit, dim3 grid, cudaStream_t stream) {
  auto kernel = flash_fwd_sm90_kernel<T, D, Keys, Groups, Pinned>;
  // Whole Q tiles and K/V blocks by TMA (NOTES CUDA 23); test knob: VISATTN_CUDA_SM90_TMA=0
  // copies everything with cp.async, as partial tiles always are.
  static const bool tma = [] {
    const char* set = std::getenv("VISATTN_CUDA_SM90_TMA");
    return !(set && std::strcmp(set, "0") == 0);
  }();
  TensorMaps maps{};
  maps.enabled = tma &&
                 encode_map<T>(maps.q, kp.q, kp.head_dim, kp.num_heads, kp.q_token_stride, kp.q_head_stride, kGroupRows) &&
                 encode_map<T>(maps.k, kp.k, kp.head_dim, kp.num_kv_heads, kp.k_token_stride, kp.k_head_stride, Keys) &&
                 encode_map<T>(maps.v, kp.v, kp.head_dim, kp.num_kv_heads, kp.v_token_stride, kp.v_head_stride, Keys);
  static std::atomic<bool> told{false};  // said once: the call still runs, on cp.async copies
  if (tma && !maps.enabled && !told.exchange(true)) {
    std::fprintf(stderr, "visattn: the driver encoded no TMA tensor map for a call "
                         "(heads %d/%d, head_dim %d, token/head strides q %lld/%lld, k %lld/%lld, v %lld/%lld): "
                         "it copies with cp.async\n",
                 kp.num_heads, kp.num_kv_heads, kp.head_dim,
                 (long long)kp.q_token_stride, (long long)kp.q_head_stride, (long long)kp.k_token_stride,
                 (long long)kp.k_head_stride, (long long)kp.v_token_stride, (long long)kp.v_head_stride);
  }
  constexpr int kBytes = Tiles<D, Keys, Groups, Pinned>::kBytes;
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  int device = 0, sms = 0;
  if (status == cudaSuccess) status = cudaGetDevice(&device);
  if (status == cudaSuccess) status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return status;
  // Test knob: VISATTN_CUDA_SM90_GRID=N caps the grid at N blocks, so that every block walks
  // many items (phases carried across items, Q reloaded early, the snake order's turns).
  static const int cap = [] {
    const char* set = std::getenv("VISATTN_CUDA_SM90_GRID");
    return set ? std::max(1, std::atoi(set)) : INT_MAX;
  }();
  grid.x = std::min<unsigned>(grid.x, unsigned(std::min(sms, cap)));
  kernel<<<grid, Block<Groups>::kThreads, kBytes, stream>>>(kp, tail_limit, maps);
  return cudaGetLastError();
}

// The pin at head dim 128 only (bench/NOTES.md CUDA entry 42: internvit +7%, hd128-long4 +2% on
// an H100; at head dims 64-80, where P V is shorter, it lost 1-7%). Test knob:
// VISATTN_CUDA_SM90_PIN=0 turns it off.
template <typename T, int D, int Keys>
cudaError_t launch_two_groups(const KernelParams& kp, int tail_limit, dim3 grid, cudaStream_t stream) {
  if constexpr (D == 128) {
    static const bool pinned = [] {
      const char* set = std::getenv("VISATTN_CUDA_SM90_PIN");
      return !(set && std::strcmp(set, "0") == 0);
    }();
    if (pinned) return launch<T, D, Keys, 2, true>(kp, tail_limit, grid, stream);
  }
  return launch<T, D, Keys, 2, false>(kp, tail_limit, grid, stream);
}

template <typename T>
cudaError_t dispatch(const KernelParams& kp, int head_dim_pad, Kernel kernel, int tail_limit, dim3 grid,
                     cudaStream_t stream) {
  if (kernel == Kernel::sm90_three_groups) {
    return head_dim_pad == 64 ? launch<T, 64, kSm90Keys, 3, false>(kp, tail_limit, grid, stream) : cudaErrorInvalidValue;
  }
  return Sm90HeadDims::visit(head_dim_pad, cudaErrorInvalidValue, [&](auto d) {
    constexpr int D = decltype(d)::value;
    if constexpr (sm90_wide_keys(D) != kSm90Keys) {
      if (kernel == Kernel::sm90_wide_keys) return launch_two_groups<T, D, sm90_wide_keys(D)>(kp, tail_limit, grid, stream);
    }
    return launch_two_groups<T, D, kSm90Keys>(kp, tail_limit, grid, stream);
  });
}

}  // namespace

cudaError_t launch_flash_forward_sm90(const KernelParams& params, bool bf16, int head_dim_pad, Kernel kernel,
                                      int tail_limit, dim3 grid, cudaStream_t stream) {
  return bf16 ? dispatch<__nv_bfloat16>(params, head_dim_pad, kernel, tail_limit, grid, stream)
              : dispatch<__half>(params, head_dim_pad, kernel, tail_limit, grid, stream);
}

}  // namespace visattn::cuda
