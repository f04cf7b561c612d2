// Issue 8 groundwork: does our encoding of Hopper's wgmma operands give the right products?
// Three checks on one H200, each against a host fp32 reference of the same bf16 values:
//   1. S = Q Kᵀ with both operands in shared memory, K-major, 128-byte swizzle (the layout a TMA
//      load with SWIZZLE_128B writes), head dim 128 = two 64-element column atoms, the
//      descriptor advanced 32 bytes per k-step inside the swizzle atom (as CUTLASS does).
//   2. O = P V with P from registers (the mma.sync A-fragment layout) and V in shared memory,
//      MN-major (head dim contiguous), 128-byte swizzle, transposed-B flag; two candidate
//      readings of the descriptor's byte offsets (LBO/SBO) for the K direction.
//   3. Throughput of back-to-back m64n64k16 wgmmas (2 warpgroups a block, 2 blocks an SM).
//   4. The roles swapped, for a few query rows (m64n8k16, both operands in shared memory):
//      Sᵀ = K Qᵀ with K (64 keys) as A and 8 Q rows as B, both K-major as TMA lands them; and
//      Oᵀ = Vᵀ Pᵀ with V as A, MN-major (transposed-A flag; two readings of LBO/SBO, as in 2),
//      and Pᵀ as B, K-major (8 rows of keys, 128-byte swizzle).
// Build and run (on the GPU machine): bash scripts/wgmma_probe/run.sh
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "wgmma_ops.inc"

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// Shared-memory matrix descriptor: start address, leading and stride byte offsets (all >> 4),
// swizzle mode in bits 62-63 (1: 128-byte).
__device__ uint64_t descriptor(const void* smem, uint32_t lbo, uint32_t sbo, uint64_t swizzle) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t((addr >> 4) & 0x3FFF) | uint64_t((lbo >> 4) & 0x3FFF) << 16 |
         uint64_t((sbo >> 4) & 0x3FFF) << 32 | swizzle << 62;
}

// Byte offset of element (row, col) in a tile of 64-element (128-byte) rows, 8-row atoms whose
// 16-byte chunks are XOR-swizzled by the row; wider tiles are column atoms of `rows` rows each.
__host__ __device__ int swizzled(int row, int col, int rows) {
  return (col / 64) * rows * 128 + row * 128 + (((col % 64) / 8) ^ (row % 8)) * 16 + (col % 8) * 2;
}

__device__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

// Accumulator (row, col) of register i of this thread, for an m64nN f32 accumulator.
__device__ void accumulator_position(int i, int& row, int& col) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  row = 16 * warp + lane / 4 + 8 * (i % 4 / 2);
  col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
}

constexpr int kD = 128;  // head dim of check 1
constexpr int kKeys = 64;

// q[64][kD] and k[kKeys][kD] into their swizzled tiles, visible to the tensor cores.
__device__ void swizzle_q_and_k(const __nv_bfloat16* q, const __nv_bfloat16* k, unsigned char* q_tile,
                                unsigned char* k_tile) {
  for (int i = threadIdx.x; i < 64 * kD; i += blockDim.x) {
    const int r = i / kD, c = i % kD;
    *reinterpret_cast<__nv_bfloat16*>(q_tile + swizzled(r, c, 64)) = q[i];
    *reinterpret_cast<__nv_bfloat16*>(k_tile + swizzled(r, c, kKeys)) = k[i];
  }
  fence_async_shared();
  __syncthreads();
}

// Waits for the issued wgmmas and writes their m64nN accumulators (N / 2 registers a thread) to
// out[64][N].
template <int kRegisters>
__device__ void finish(const float (&d)[kRegisters], float* out) {
  wgmma_commit();
  wgmma_wait_all();
  for (int i = 0; i < kRegisters; ++i) {
    int row, col;
    accumulator_position(i, row, col);
    out[row * 2 * kRegisters + col] = d[i];
  }
}

// 1. s[64][64] = q[64][kD] · k[64][kD]ᵀ; swapped (4a): st[64 keys][8 rows] = k · q[8][kD]ᵀ, K
// as A (M = keys) and the first 8 Q rows as B (N = 8), both K-major.
template <bool kSwapped>
__global__ void qk_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, float* s) {
  __shared__ __align__(1024) unsigned char q_tile[64 * kD * 2], k_tile[kKeys * kD * 2];
  swizzle_q_and_k(q, k, q_tile, k_tile);
  float d[kSwapped ? 4 : 32] = {};
  wgmma_fence();
  for (int kk = 0; kk < kD / 16; ++kk) {
    const int atom = kk * 16 / 64, inside = kk % 4 * 32;  // column atom, bytes into the 128-byte row
    const uint64_t dq = descriptor(q_tile + atom * 64 * 128 + inside, 16, 1024, 1);
    const uint64_t dk = descriptor(k_tile + atom * kKeys * 128 + inside, 16, 1024, 1);
    if constexpr (kSwapped) {
      wgmma_ss_m64n8k16<0, 0>(d, dk, dq, kk > 0);
    } else {
      wgmma_ss_m64n64k16<0>(d, dq, dk, kk > 0);
    }
  }
  finish(d, s);
}

__device__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2. o[64][kD] = p[64][kKeys] · v[kKeys][kD], P from registers, V MN-major; the K-direction
// offset between 8-key groups (1024 bytes) given as LBO (candidate 0) or SBO (candidate 1).
__global__ void pv_kernel(const float* p, const __nv_bfloat16* v, float* o, int candidate) {
  __shared__ __align__(1024) unsigned char v_tile[kKeys * kD * 2];
  for (int i = threadIdx.x; i < kKeys * kD; i += blockDim.x) {
    const int key = i / kD, c = i % kD;
    *reinterpret_cast<__nv_bfloat16*>(v_tile + swizzled(key, c, kKeys)) = v[i];
  }
  fence_async_shared();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int n_atom = 0; n_atom < kD / 64; ++n_atom) {
    float d[32] = {};
    wgmma_fence();
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const float* rows = p + (16 * warp + g) * kKeys + 16 * kk + 2 * t;
      const uint32_t a[4] = {pack_bf16(rows[0], rows[1]), pack_bf16(rows[8 * kKeys], rows[8 * kKeys + 1]),
                             pack_bf16(rows[8], rows[9]), pack_bf16(rows[8 * kKeys + 8], rows[8 * kKeys + 9])};
      const unsigned char* start = v_tile + n_atom * kKeys * 128 + kk * 16 * 128;
      const uint64_t db = candidate == 0 ? descriptor(start, 1024, 8192, 1) : descriptor(start, 8192, 1024, 1);
      wgmma_rs_m64n64k16<1>(d, a, db, kk > 0);
    }
    wgmma_commit();
    wgmma_wait_all();
    for (int i = 0; i < 32; ++i) {
      int row, col;
      accumulator_position(i, row, col);
      o[row * kD + n_atom * 64 + col] = d[i];
    }
  }
}

// 4b. ot[kD][8 rows] = v[kKeys][kD]ᵀ · p[8][kKeys]ᵀ: V as A, MN-major (head dim contiguous, as
// the stage holds it), one m64 per 64-column atom; Pᵀ as B from a tile of 8 rows of keys,
// K-major. The K-direction offset between 8-key groups of A (1024 bytes) as LBO (candidate 0)
// or SBO (candidate 1).
__global__ void ot_kernel(const float* p, const __nv_bfloat16* v, float* ot, int candidate) {
  __shared__ __align__(1024) unsigned char v_tile[kKeys * kD * 2], p_tile[8 * kKeys * 2];
  for (int i = threadIdx.x; i < kKeys * kD; i += blockDim.x) {
    const int key = i / kD, c = i % kD;
    *reinterpret_cast<__nv_bfloat16*>(v_tile + swizzled(key, c, kKeys)) = v[i];
  }
  for (int i = threadIdx.x; i < 8 * kKeys; i += blockDim.x) {
    const int r = i / kKeys, key = i % kKeys;
    *reinterpret_cast<__nv_bfloat16*>(p_tile + swizzled(r, key, 8)) = __float2bfloat16(p[r * kKeys + key]);
  }
  fence_async_shared();
  __syncthreads();
  for (int m_atom = 0; m_atom < kD / 64; ++m_atom) {
    float d[4] = {};
    wgmma_fence();
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const unsigned char* start = v_tile + m_atom * kKeys * 128 + kk * 16 * 128;
      const uint64_t da = candidate == 0 ? descriptor(start, 1024, 8192, 1) : descriptor(start, 8192, 1024, 1);
      const uint64_t db = descriptor(p_tile + kk * 16 / 64 * 8 * 128 + kk % 4 * 32, 16, 1024, 1);
      wgmma_ss_m64n8k16<1, 0>(d, da, db, kk > 0);
    }
    finish(d, ot + m_atom * 64 * 8);
  }
}

// 3. Back-to-back wgmmas on resident tiles: 4 k-steps of m64n64k16 per iteration.
__global__ void throughput_kernel(int iterations, float* sink) {
  __shared__ __align__(1024) unsigned char a_tile[64 * 64 * 2], b_tile[64 * 64 * 2];
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    reinterpret_cast<__nv_bfloat16*>(a_tile)[i] = __float2bfloat16(0.001f * (i % 7));
    reinterpret_cast<__nv_bfloat16*>(b_tile)[i] = __float2bfloat16(0.001f * (i % 5));
  }
  fence_async_shared();
  __syncthreads();
  float d[32] = {};
  for (int it = 0; it < iterations; ++it) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma_ss_m64n64k16<0>(d, descriptor(a_tile + kk * 32, 16, 1024, 1), descriptor(b_tile + kk * 32, 16, 1024, 1), 1);
    }
    wgmma_commit();
    wgmma_wait_all();
  }
  float total = 0;
  for (float x : d) total += x;
  if (total == 12345.0f) *sink = total;  // keeps the loop
}

float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// The largest |reference(i, j) - out[i][j]| of a rows x cols result on the device.
template <class Reference>
double max_error(const float* device, int rows, int cols, Reference reference) {
  std::vector<float> out(size_t(rows) * cols);
  CHECK(cudaMemcpy(out.data(), device, out.size() * 4, cudaMemcpyDeviceToHost));
  double err = 0;
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) err = std::max(err, std::fabs(reference(i, j) - out[size_t(i) * cols + j]));
  }
  return err;
}

int main(int argc, char** argv) {
  // One check per process (an illegal descriptor poisons the context): qk, pv0, pv1, st, ot0, ot1 or throughput.
  const std::string mode = argc > 1 ? argv[1] : "qk";
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<__nv_bfloat16> q(64 * kD), k(kKeys * kD), v(kKeys * kD);
  std::vector<float> qf(q.size()), kf(k.size()), vf(v.size()), pf(64 * kKeys);
  for (size_t i = 0; i < q.size(); ++i) q[i] = __float2bfloat16(normal(rng)), qf[i] = __bfloat162float(q[i]);
  for (size_t i = 0; i < k.size(); ++i) k[i] = __float2bfloat16(normal(rng)), kf[i] = __bfloat162float(k[i]);
  for (size_t i = 0; i < v.size(); ++i) v[i] = __float2bfloat16(normal(rng)), vf[i] = __bfloat162float(v[i]);
  for (float& x : pf) x = bf16_round(std::fabs(normal(rng)) * 0.1f);

  __nv_bfloat16 *dq, *dk, *dv;
  float *ds, *dp, *dout, *dsink;
  CHECK(cudaMalloc(&dq, q.size() * 2));
  CHECK(cudaMalloc(&dk, k.size() * 2));
  CHECK(cudaMalloc(&dv, v.size() * 2));
  CHECK(cudaMalloc(&ds, 64 * kKeys * 4));
  CHECK(cudaMalloc(&dp, pf.size() * 4));
  CHECK(cudaMalloc(&dout, 64 * kD * 4));
  CHECK(cudaMalloc(&dsink, 4));
  CHECK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dp, pf.data(), pf.size() * 4, cudaMemcpyHostToDevice));

  if (mode == "qk") {
  qk_kernel<false><<<1, 128>>>(dq, dk, ds);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> s(64 * kKeys);
  CHECK(cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost));
  double err = 0;
  for (int r = 0; r < 64; ++r) {
    for (int j = 0; j < kKeys; ++j) {
      double ref = 0;
      for (int c = 0; c < kD; ++c) ref += double(qf[r * kD + c]) * kf[j * kD + c];
      err = std::max(err, std::fabs(ref - s[r * kKeys + j]));
    }
  }
  std::printf("1. Q K^T, SS, K-major, 128B swizzle, d=%d: max error %.3g (%s)\n", kD, err, err < 1e-2 ? "OK" : "WRONG");
  }

  for (int candidate = 0; candidate < 2; ++candidate) {
    if (mode != "pv" + std::to_string(candidate)) continue;
    CHECK(cudaMemset(dout, 0, 64 * kD * 4));
    pv_kernel<<<1, 128>>>(dp, dv, dout, candidate);
    CHECK(cudaDeviceSynchronize());
    std::vector<float> o(64 * kD);
    CHECK(cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost));
    double err = 0;
    for (int r = 0; r < 64; ++r) {
      for (int c = 0; c < kD; ++c) {
        double ref = 0;
        for (int j = 0; j < kKeys; ++j) ref += double(pf[r * kKeys + j]) * vf[j * kD + c];
        err = std::max(err, std::fabs(ref - o[r * kD + c]));
      }
    }
    std::printf("2. P V, RS, V MN-major, 128B swizzle, transposed B, 8-key groups 1024 B apart as %s: "
                "max error %.3g (%s)\n", candidate == 0 ? "LBO" : "SBO", err, err < 1e-2 ? "OK" : "WRONG");
  }

  if (mode == "st") {
    qk_kernel<true><<<1, 128>>>(dq, dk, ds);
    CHECK(cudaDeviceSynchronize());
    const double err = max_error(ds, kKeys, 8, [&](int j, int r) {
      double ref = 0;
      for (int c = 0; c < kD; ++c) ref += double(kf[j * kD + c]) * qf[r * kD + c];
      return ref;
    });
    std::printf("4a. K Q^T (roles swapped), m64n8k16 SS, both K-major: max error %.3g (%s)\n", err,
                err < 1e-2 ? "OK" : "WRONG");
  }

  for (int candidate = 0; candidate < 2; ++candidate) {
    if (mode != "ot" + std::to_string(candidate)) continue;
    CHECK(cudaMemset(dout, 0, kD * 8 * 4));
    ot_kernel<<<1, 128>>>(dp, dv, dout, candidate);
    CHECK(cudaDeviceSynchronize());
    const double err = max_error(dout, kD, 8, [&](int c, int r) {
      double ref = 0;
      for (int j = 0; j < kKeys; ++j) ref += double(vf[j * kD + c]) * pf[r * kKeys + j];
      return ref;
    });
    std::printf("4b. V^T P^T (roles swapped), m64n8k16 SS, V MN-major as A (transposed A), 8-key groups 1024 B "
                "apart as %s: max error %.3g (%s)\n", candidate == 0 ? "LBO" : "SBO", err, err < 1e-2 ? "OK" : "WRONG");
  }

  if (mode != "throughput") return 0;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int iterations = 20000;
  throughput_kernel<<<2 * sms, 256>>>(100, dsink);  // warm-up
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  throughput_kernel<<<2 * sms, 256>>>(iterations, dsink);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  const double flops = 2.0 * 64 * 64 * 64 * iterations * (2.0 * 2 * sms);  // per warpgroup: 4 k16 steps
  std::printf("3. m64n64k16 SS wgmma, 4 warpgroups per SM, wait after every 4: %.0f TFLOP/s\n", flops / ms / 1e9);
  return 0;
}
