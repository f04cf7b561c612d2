// The tensor-core and copy instructions of sm80 the forward kernel is built from, as small
// inline-PTX wrappers: mma.sync m16n8k16 and m16n8k8 (bf16/f16 in, f32 accumulate), ldmatrix
// (plain and transposed), cp.async 16-byte copies with zero fill, and the fast exp2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace visattn::cuda {

__device__ inline uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Four 8x8 matrices of 16-bit elements; lane i supplies the address of row i % 8 of matrix
// i / 8. Lane l receives, of each matrix, row l / 4 and columns 2 (l % 4) and 2 (l % 4) + 1.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// As ldmatrix_x4, each matrix transposed: lane l receives column l / 4, rows 2 (l % 4) and +1.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// Two 8x8 matrices (lanes 0-15 supply the rows' addresses), as ldmatrix_x4's first two.
__device__ inline void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}

__device__ inline void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}

// d += a (16x16, row-major fragment) * b (16x8, column-major fragment), f32 accumulators.
template <typename T>
__device__ inline void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ inline void mma_16x8x16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ inline void mma_16x8x16<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a (16x8, row-major fragment: rows l / 4 and + 8, columns 2 (l % 4) and + 1) * b (8x8,
// column-major: rows 2 (l % 4) and + 1 of column l / 4), f32 accumulators d[0..3].
template <typename T>
__device__ inline void mma_16x8x8(float* d, uint32_t a0, uint32_t a1, uint32_t b);

template <>
__device__ inline void mma_16x8x8<__nv_bfloat16>(float* d, uint32_t a0, uint32_t a1, uint32_t b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(b));
}

template <>
__device__ inline void mma_16x8x8<__half>(float* d, uint32_t a0, uint32_t a1, uint32_t b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(b));
}

// Two floats as one register of two 16-bit elements, `lo` in the low half (the lower column).
template <typename T>
__device__ inline uint32_t pack2(float lo, float hi);

template <>
__device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <>
__device__ inline uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// One register of two 16-bit elements as two floats (x: the low half).
template <typename T>
__device__ inline float2 unpack2(uint32_t pair);

template <>
__device__ inline float2 unpack2<__nv_bfloat16>(uint32_t pair) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pair));
}

template <>
__device__ inline float2 unpack2<__half>(uint32_t pair) {
  return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}

// 16 bytes global -> shared without passing through registers; `bytes` = 0 writes zeros and
// reads nothing (rows past the end of an image, padded head-dim columns).
__device__ inline void cp_async_16(void* shared, const void* global, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared)),
               "l"(global), "r"(bytes));
}

__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Waits for every committed group but the newest.
__device__ inline void cp_async_wait_all_but_newest() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// 2^x, approximate (2 ulp); 2^-inf = 0.
__device__ inline float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace visattn::cuda
