// fp32 vector operations on AVX2 + FMA (8 lanes).
#pragma once
// Include after kernel_prelude.h with VISATTN_CPU_ISA defined (see flash_kernel.h).

namespace visattn::cpu::VISATTN_CPU_ISA {

struct Avx2Ops {
  static constexpr int W = 8;
  static constexpr int kRegisters = 16;  // vector registers (FlashKernel::micro)
  using V = __m256;

  static V zero() { return _mm256_setzero_ps(); }
  // An empty asm that takes v in a register: the load before it cannot be folded into the
  // instructions after it (FlashKernel::micro).
  static V keep_in_register(V v) {
    asm("" : "+x"(v));
    return v;
  }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  // As Avx512Ops::stream_bytes, 32 bytes at a time.
  static void stream_bytes(void* dst, const void* src, int64_t bytes) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    int64_t i = std::min<int64_t>(bytes, (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32);
    std::memcpy(d, s, i);
    for (; i + 32 <= bytes; i += 32) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    }
    std::memcpy(d + i, s + i, bytes - i);
  }
  static void fence() { _mm_sfence(); }
  // As Avx512Ops::load_row and store_row: f16 by F16C, 8 at a time (the tail as rows.h).
  static void load_row(const void* base, DType dtype, int64_t offset, int n, float* dst) {
    if (dtype != DType::f16) return cpu::load_row(base, dtype, offset, n, dst);
    const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
    int c = 0;
    for (; c + 8 <= n; c += 8) {
      _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c))));
    }
    cpu::load_row(src + c, dtype, 0, n - c, dst + c);
  }
  static void store_row(void* base, DType dtype, int64_t offset, const float* src, int n) {
    if (dtype != DType::f16) return cpu::store_row(base, dtype, offset, src, n);
    uint16_t* dst = static_cast<uint16_t*>(base) + offset;
    int c = 0;
    for (; c + 8 <= n; c += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + c), _MM_FROUND_TO_NEAREST_INT));
    }
    cpu::store_row(dst + c, dtype, 0, src + c, n - c);
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mask_outside(V x, float index0, float lo, float hi) {
    const V idx = _mm256_add_ps(_mm256_set1_ps(index0), _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
    const V keep = _mm256_and_ps(_mm256_cmp_ps(idx, _mm256_set1_ps(lo), _CMP_GE_OQ),
                                 _mm256_cmp_ps(idx, _mm256_set1_ps(hi), _CMP_LE_OQ));
    return _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), x, keep);
  }
  static V finite_or_zero(V x) {
    const V is_neg_inf = _mm256_cmp_ps(x, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm256_blendv_ps(x, _mm256_setzero_ps(), is_neg_inf);
  }
  // dst[c][r] = src[r][c] · lane_scale[c] for a W x W block (strides in floats); no scaling
  // where lane_scale is null.
  static void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                        const float* lane_scale = nullptr) {
    for (int r = 0; r < W; ++r)
      for (int c = 0; c < W; ++c)
        dst[c * dst_stride + r] = src[r * src_stride + c] * (lane_scale ? lane_scale[c] : 1.0f);
  }
  static V exp2(V x_in) {
    const V x = _mm256_max_ps(x_in, _mm256_set1_ps(-126.0f));
    const V n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const V f = _mm256_sub_ps(x, n);
    V p = _mm256_set1_ps(1.5252733804059840e-5f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381606e-4f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    // Multiply by 2^n through the exponent field.
    const __m256i bits = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const V in_range = _mm256_cmp_ps(x_in, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), in_range);  // underflow -> 0
  }
};

}  // namespace visattn::cpu::VISATTN_CPU_ISA
