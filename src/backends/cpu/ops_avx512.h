// fp32 vector operations on AVX-512 (16 lanes).
#pragma once
// Include after kernel_prelude.h with VISATTN_CPU_ISA defined (see flash_kernel.h).

namespace visattn::cpu::VISATTN_CPU_ISA {

struct Avx512Ops {
  static constexpr int W = 16;
  static constexpr int kRegisters = 32;  // vector registers (FlashKernel::micro)
  using V = __m512;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // Copies `bytes` bytes with non-temporal stores for the whole 64-byte lines of dst (no read
  // for ownership of lines nobody will read soon); fence() orders them before the call returns.
  static void stream_bytes(void* dst, const void* src, int64_t bytes) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    int64_t i = std::min<int64_t>(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
    std::memcpy(d, s, i);
    for (; i + 64 <= bytes; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
    std::memcpy(d + i, s + i, bytes - i);
  }
  static void fence() { _mm_sfence(); }
  // As cpu::load_row and cpu::store_row (rows.h), with f16 converted by F16C 16 at a time.
  static void load_row(const void* base, DType dtype, int64_t offset, int n, float* dst) {
    if (dtype != DType::f16) return cpu::load_row(base, dtype, offset, n, dst);
    const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
    for (int c = 0; c < n; c += 16) {
      const __mmask16 lanes = n - c >= 16 ? 0xffff : __mmask16((1u << (n - c)) - 1);
      _mm512_mask_storeu_ps(dst + c, lanes, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes, src + c)));
    }
  }
  static void store_row(void* base, DType dtype, int64_t offset, const float* src, int n) {
    if (dtype != DType::f16) return cpu::store_row(base, dtype, offset, src, n);
    uint16_t* dst = static_cast<uint16_t*>(base) + offset;
    for (int c = 0; c < n; c += 16) {
      const __mmask16 lanes = n - c >= 16 ? 0xffff : __mmask16((1u << (n - c)) - 1);
      _mm256_mask_storeu_epi16(dst + c, lanes,
                               _mm512_cvtps_ph(_mm512_maskz_loadu_ps(lanes, src + c), _MM_FROUND_TO_NEAREST_INT));
    }
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  // Lanes i with lo <= index0 + i <= hi keep x; the others become -inf.
  static V mask_outside(V x, float index0, float lo, float hi) {
    const V idx = _mm512_add_ps(_mm512_set1_ps(index0),
                                _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __mmask16 keep = _mm512_cmp_ps_mask(idx, _mm512_set1_ps(lo), _CMP_GE_OQ) &
                           _mm512_cmp_ps_mask(idx, _mm512_set1_ps(hi), _CMP_LE_OQ);
    return _mm512_mask_blend_ps(keep, _mm512_set1_ps(-__builtin_inff()), x);
  }
  // -inf lanes become 0 (the running max of a row that has seen no key yet).
  static V finite_or_zero(V x) {
    const __mmask16 is_neg_inf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm512_mask_blend_ps(is_neg_inf, x, _mm512_setzero_ps());
  }
  // dst[c][r] = src[r][c] · lane_scale[c] for a 16 x 16 block (strides in floats); no
  // scaling where lane_scale is null.
  static void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                        const float* lane_scale = nullptr) {
    __m512 r[16];
    load_rows(src, src_stride, lane_scale, r);
    transpose_store(r, dst, dst_stride);
  }
  // As transpose, with each row of dst a whole 64-byte-aligned line written past the caches
  // (fence() orders the stores).
  static void stream_transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                               const float* lane_scale) {
    __m512 r[16];
    load_rows(src, src_stride, lane_scale, r);
    transpose_store<true>(r, dst, dst_stride);
  }
  static void load_rows(const float* src, int64_t src_stride, const float* lane_scale, __m512 (&r)[16]) {
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_stride);
    if (!lane_scale) return;
    const __m512 scale = _mm512_loadu_ps(lane_scale);
    for (int i = 0; i < 16; ++i) r[i] = _mm512_mul_ps(r[i], scale);
  }
  // dst[c][i] = rows[i][c]: the 16 x 16 transpose of 16 vectors, stored (Stream: as
  // stream_transpose).
  template <bool Stream = false>
  static void transpose_store(__m512 (&r)[16], float* dst, int64_t dst_stride) {
    const auto put = [](float* at, __m512 x) {
      if constexpr (Stream) _mm512_stream_ps(at, x); else _mm512_storeu_ps(at, x);
    };
    __m512 u[16];
    for (int i = 0; i < 16; i += 2) {  // 32-bit pairs within 128-bit lanes
      u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // 64-bit pairs: u[i + k] holds columns k, k+4, k+8, k+12
      const __m512d a = _mm512_castps_pd(u[i]), b = _mm512_castps_pd(u[i + 1]);
      const __m512d c = _mm512_castps_pd(u[i + 2]), e = _mm512_castps_pd(u[i + 3]);
      r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
      r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
    }
    for (int k = 0; k < 4; ++k) {  // 128-bit blocks of rows 0-3, 4-7, 8-11, 12-15
      const __m512 v0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
      const __m512 v1 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
      const __m512 w0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
      const __m512 w1 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
      put(dst + k * dst_stride, _mm512_shuffle_f32x4(v0, v1, 0x88));
      put(dst + (k + 8) * dst_stride, _mm512_shuffle_f32x4(v0, v1, 0xdd));
      put(dst + (k + 4) * dst_stride, _mm512_shuffle_f32x4(w0, w1, 0x88));
      put(dst + (k + 12) * dst_stride, _mm512_shuffle_f32x4(w0, w1, 0xdd));
    }
  }
  // 2^x for x <= 0 (and -inf -> 0): degree-7 polynomial on [-0.5, 0.5], scaled by 2^round(x).
  static V exp2(V x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
    const V n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const V f = _mm512_sub_ps(x, n);
    V p = _mm512_set1_ps(1.5252733804059840e-5f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-4f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
};

}  // namespace visattn::cpu::VISATTN_CPU_ISA
