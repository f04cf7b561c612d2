// The CPU kernel for bf16 inputs on AVX512-BF16: both products use vdpbf16ps, which
// multiplies pairs of bf16 along the reduction and accumulates in fp32 (twice the fp32 rate).
// Operands are packed as pairs: q and k pair adjacent head-dim elements (as stored), p and v
// pair adjacent keys. P is rounded to bf16 before P·V, as in every flash kernel.
#include "backends/cpu/kernel_prelude.h"

#include "backends/cpu/target.h"

VISATTN_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")

#define VISATTN_CPU_ISA avx512_bf16
#include "backends/cpu/ops_avx512.h"
#include "backends/cpu/flash_kernel.h"

namespace visattn::cpu::avx512_bf16 {

struct Bf16PairMma {
  using Elem = uint32_t;  // two bf16 adjacent along the reduction dimension
  using A = __m512bh;
  using B = __m512bh;
  static constexpr int kPack = 2;

  static A load_a(const Elem* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static B broadcast(const Elem* p) { return (__m512bh)_mm512_set1_epi32(int(*p)); }
  static __m512 madd(__m512 acc, A a, B b) { return _mm512_dpbf16_ps(acc, a, b); }

  static const uint16_t* row(const void* base, int64_t offset) {
    return static_cast<const uint16_t*>(base) + offset;
  }

  static constexpr bool kStagedQ = false;  // reads q straight from the tensor, as bf16
  // qa[c/2][i] = (Q[i][c], Q[i][c+1]): a transpose of 32-bit pairs, 16 rows x 16 pairs at a
  // time through two 1 KB blocks (masked loads: nothing is read past head_dim).
  static void pack_q(const AttentionParams& p, int64_t token, int rows, int head, int bm,
                     int d_pad, const float*, Elem* qa) {
    const int pair_rows = d_pad / 2;
    std::fill(qa, qa + int64_t(pair_rows) * bm, 0u);
    if (p.head_dim % 2 != 0) {  // odd head dims: pairs straddle rows' ends; element by element
      for (int i = 0; i < rows; ++i) {
        const uint16_t* q = row(p.q, (token + i) * p.q_token_stride + head * p.q_head_stride);
        for (int c = 0; c + 1 < p.head_dim; c += 2) qa[int64_t(c / 2) * bm + i] = bf16_pair(q[c], q[c + 1]);
        qa[int64_t(p.head_dim / 2) * bm + i] = q[p.head_dim - 1];
      }
      return;
    }
    const int pairs = p.head_dim / 2;
    alignas(64) uint32_t in[16][16], out[16][16];
    for (int i0 = 0; i0 < rows; i0 += 16) {
      for (int c0 = 0; c0 < pairs; c0 += 16) {
        const __mmask16 cols = pairs - c0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (pairs - c0)) - 1);
        for (int i = 0; i < 16; ++i) {
          const uint16_t* q = row(p.q, (token + i0 + i) * p.q_token_stride + head * p.q_head_stride) + 2 * c0;
          _mm512_store_si512(in[i], i0 + i < rows ? _mm512_maskz_loadu_epi32(cols, q) : _mm512_setzero_si512());
        }
        Avx512Ops::transpose(reinterpret_cast<const float*>(in[0]), 16, reinterpret_cast<float*>(out[0]), 16);
        for (int c = 0; c < 16 && c0 + c < pair_rows; ++c) {
          _mm512_storeu_si512(qa + int64_t(c0 + c) * bm + i0, _mm512_load_si512(out[c]));
        }
      }
    }
  }
  // kb[h][j][c/2] = (K[j][c], K[j][c+1]): rows as stored, zero-padded to d_pad, token-major.
  static void pack_k(const AttentionParams& p, int64_t token, int keys, int keys_pad, int kv_begin,
                     int kv_count, int d_pad, Elem* kb) {
    const int64_t per_head = int64_t(keys_pad) * d_pad / 2;
    std::fill(kb, kb + kv_count * per_head, 0u);
    for (int j = 0; j < keys; ++j) {
      for (int h = 0; h < kv_count; ++h) {
        std::memcpy(kb + h * per_head + int64_t(j) * d_pad / 2,
                    row(p.k, (token + j) * p.k_token_stride + (kv_begin + h) * p.k_head_stride),
                    p.head_dim * sizeof(uint16_t));
      }
    }
  }
  // vb[h][j/2][c] = (V[j][c], V[j+1][c]).
  static void pack_v(const AttentionParams& p, int64_t token, int keys, int keys_pad, int kv_begin,
                     int kv_count, int d_pad, Elem* vb) {
    const int64_t per_head = int64_t(keys_pad / 2) * d_pad;
    std::fill(vb, vb + kv_count * per_head, 0u);
    for (int j = 0; j < keys; j += 2) {
      for (int h = 0; h < kv_count; ++h) {
        const int64_t offset = (kv_begin + h) * p.v_head_stride;
        const uint16_t* v0 = row(p.v, (token + j) * p.v_token_stride + offset);
        const uint16_t* v1 = j + 1 < keys ? row(p.v, (token + j + 1) * p.v_token_stride + offset) : nullptr;
        interleave_rows(v0, v1, p.head_dim, vb + h * per_head + int64_t(j / 2) * d_pad);
      }
    }
  }
  // out[c] = (row0[c], row1[c]) for c < d, 16 at a time; row1 may be null (zeros).
  static void interleave_rows(const uint16_t* row0, const uint16_t* row1, int d, uint32_t* out) {
    for (int c = 0; c < d; c += 16) {
      const __mmask16 m = d - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (d - c)) - 1);
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row0 + c));
      const __m512i hi = row1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row1 + c)) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(out + c, m, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
  // pa[j/2][i] = (bf16 P[i][j], bf16 P[i][j+1]) for 16 rows at lane offset `lane`.
  static void store_p(Elem* pa, int j, int bm, int lane, __m512 pj, __m512 pj1) {
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(pj1, pj);  // [pj (16) | pj1 (16)]
    const __m512i interleave = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
        23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    _mm512_storeu_si512(pa + int64_t(j / 2) * bm + lane, _mm512_permutexvar_epi16(interleave, both));
  }
};

}  // namespace visattn::cpu::avx512_bf16

namespace visattn::cpu {

void run_avx512_bf16(const AttentionParams& p, int threads) {
  avx512_bf16::FlashKernel<avx512_bf16::Avx512Ops, avx512_bf16::Bf16PairMma>::run(p, threads);
}

}  // namespace visattn::cpu

VISATTN_TARGET_END
