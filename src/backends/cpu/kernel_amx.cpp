// The CPU kernel for bf16 inputs on AMX (Sapphire Rapids and later). Both products run on the
// tile unit (TDPBF16PS: 16x16 fp32 += 16x32 bf16 · 32x16 bf16); the online softmax runs on
// AVX-512 between them. Per query tile of 32 rows (two tile rows) and key block of 64:
//   S[32][64] = Q[32][d] · Kᵀ        (Kᵀ packed as pairs of head-dim elements, key-major)
//   softmax rows of S -> P bf16 [32][64], rescale O rows
//   O[32][d] += P · V                 (V packed as pairs of keys)
// Only this file's own code is compiled for AMX (see kernel_prelude.h); it runs only when the
// CPU has AMX and the OS granted this process the tile state (cpu_backend.cpp).
#include "backends/cpu/kernel_prelude.h"

#include "backends/cpu/target.h"

VISATTN_TARGET_BEGIN("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")

#define VISATTN_CPU_ISA amx
#include "backends/cpu/ops_avx512.h"

namespace visattn::cpu::amx {

namespace {

constexpr int TM = 16;      // rows of a tile
constexpr int BM = 2 * TM;  // query rows per tile (two tile rows share each K and V tile)
constexpr int BN = 64;      // keys per block
using Ops = Avx512Ops;

// LDTILECFG's 64-byte operand. Tiles 0-4 are 16 rows of 64 bytes (C, C, A, A, B); tiles 5-7
// take a head-dim remainder of 16 in Q·Kᵀ: A halves of 16 x 32 bytes and a B of 8 x 64 bytes,
// so head_dim 72 and 80 run as 80, not 96.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 32, 32, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 8};
};

const uint16_t* bf16_row(const void* base, int64_t offset) {
  return static_cast<const uint16_t*>(base) + offset;
}

// Everything an item reads is packed once, token-major (each token's heads are adjacent in
// memory, so the rows stream in order), for all of the item's heads.
struct Scratch {
  std::vector<uint16_t> q;        // [heads][rows_pad][d_qk] bf16
  std::vector<uint32_t> kt, vp;   // [kv heads][pairs_t][keys_pad], [kv heads][keys_pad / 2][d_v]
  std::vector<uint16_t> p;        // [BM][BN] bf16
  std::vector<float> s, o;        // [BM][BN] and [BM][d_v]
  std::vector<uint16_t> out;      // [rows][heads][head_dim]: the item's output, when streamed
  alignas(64) float m[BM], l[BM];
};

struct Geometry {
  int64_t start, n, key_begin;
  int keys, keys_pad, d_qk, d_v;
  int pairs_t;  // head-dim pairs rounded up to the 16 x 16 transpose
  int rows_pad;                       // the item's query rows rounded up to BM
  int kv_begin, kv_count;             // the item's kv heads
  int64_t q_stride, kt_stride, vp_stride;  // elements between two heads' packed q, kt, vp
  // Q tiles load straight from the q tensor (no packed copy) for items of one key block per
  // tile (short images: the copy is not repaid by reuse; on long images the packed rows are
  // faster to reload), when its rows hold exactly the tile columns (head_dim a multiple of 16)
  // and the rows a tile reads past the item's end exist in the tensor (they belong to other
  // images: their rows of S are never used).
  bool q_direct;
  // Outputs are collected in Scratch::out and streamed past the caches, a token's heads at a
  // time (see output_streamable), instead of written head by head.
  bool stream;
};

// out[c] = (row0[c], row1[c]) for c < d (row1 null: zeros), 32 pairs per step.
void interleave_rows(const uint16_t* row0, const uint16_t* row1, int d, uint32_t* out) {
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int c = 0; c < d; c += 32) {
    const __mmask32 lanes = d - c >= 32 ? 0xffffffffu : (1u << (d - c)) - 1;
    const __m512i a = _mm512_maskz_loadu_epi16(lanes, row0 + c);
    const __m512i b = row1 ? _mm512_maskz_loadu_epi16(lanes, row1 + c) : _mm512_setzero_si512();
    // unpack interleaves within 128-bit lanes; the permutes put the pairs back in order.
    const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
    const int n = std::min(32, d - c);
    _mm512_mask_storeu_epi32(out + c, __mmask16(n >= 16 ? 0xffff : (1u << n) - 1),
                             _mm512_permutex2var_epi64(lo, first, hi));
    if (n > 16) {
      _mm512_mask_storeu_epi32(out + c + 16, __mmask16(n >= 32 ? 0xffff : (1u << (n - 16)) - 1),
                               _mm512_permutex2var_epi64(lo, second, hi));
    }
  }
}

// For every head h of the item: q[h][i] = Q rows; kt[kv][c/2][j] = (K[j][c], K[j][c+1]);
// vp[kv][j/2][c] = (V[j][c], V[j+1][c]); zeros elsewhere. K is transposed 16 keys x 16 pairs
// at a time straight from the tensor (masked loads: nothing past head_dim or the keys is read).
void pack_item(const AttentionParams& p, const WorkItem& item, const Geometry& g, Scratch& s) {
  const int heads = item.head_end - item.head_begin;
  const int d = p.head_dim;
  const int64_t rows = item.row_end - item.row_begin;
  // Rows get their values and a zero tail; only padding rows are cleared whole.
  auto copy_row = [d](uint16_t* dst, const uint16_t* src, int width) {
    std::memcpy(dst, src, d * sizeof(uint16_t));
    std::fill(dst + d, dst + width, uint16_t(0));
  };
  for (int64_t i = 0; i < rows && !g.q_direct; ++i) {
    const int64_t token = g.start + item.row_begin + i;
    for (int h = 0; h < heads; ++h) {
      copy_row(s.q.data() + h * g.q_stride + i * g.d_qk,
               bf16_row(p.q, token * p.q_token_stride + (item.head_begin + h) * p.q_head_stride), g.d_qk);
    }
  }
  for (int h = 0; h < heads && !g.q_direct; ++h) {
    std::fill(s.q.data() + h * g.q_stride + rows * g.d_qk, s.q.data() + (h + 1) * g.q_stride, uint16_t(0));
  }
  const int64_t first_key = g.start + g.key_begin;
  for (int h = 0; h < g.kv_count; ++h) {
    const uint16_t* k_head = bf16_row(p.k, first_key * p.k_token_stride + (g.kv_begin + h) * p.k_head_stride);
    for (int c = 0; c < g.pairs_t; c += TM) {
      const int elements = std::clamp(d - 2 * c, 0, 32);
      const __mmask32 lanes = elements == 32 ? ~__mmask32(0) : __mmask32((1u << elements) - 1);
      for (int j = 0; j < g.keys_pad; j += TM) {
        __m512 rows16[TM];
        for (int r = 0; r < TM; ++r) {
          rows16[r] = j + r < g.keys
              ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(lanes, k_head + (j + r) * p.k_token_stride + 2 * c))
              : _mm512_setzero_ps();
        }
        Ops::transpose_store(rows16, reinterpret_cast<float*>(s.kt.data() + h * g.kt_stride + int64_t(c) * g.keys_pad + j),
                             g.keys_pad);
      }
    }
  }
  const int key_pairs = (g.keys + 1) / 2;
  for (int j = 0; j < g.keys; j += 2) {
    for (int h = 0; h < g.kv_count; ++h) {
      const int64_t offset = (g.kv_begin + h) * p.v_head_stride;
      const uint16_t* v1 =
          j + 1 < g.keys ? bf16_row(p.v, (first_key + j + 1) * p.v_token_stride + offset) : nullptr;
      uint32_t* out = s.vp.data() + h * g.vp_stride + int64_t(j / 2) * g.d_v;
      interleave_rows(bf16_row(p.v, (first_key + j) * p.v_token_stride + offset), v1, d, out);
      std::fill(out + d, out + g.d_v, 0u);
    }
  }
  for (int h = 0; h < g.kv_count; ++h) {
    std::fill(s.vp.data() + h * g.vp_stride + int64_t(key_pairs) * g.d_v,
              s.vp.data() + (h + 1) * g.vp_stride, 0u);
  }
}

// The part of a (query tile, key block) pair that holds real rows and keys: short images and
// the last block of an image skip their all-padding 16-row halves and 32-key quarters.
struct Live {
  int64_t col;  // the block's first key, as a packed (even) column
  int keys;     // keys computed: the block's keys that exist, rounded up to 32 (<= BN)
  bool two;     // whether the tile's second 16 rows exist
  bool first;   // the tile's first block: O is not yet written (taken as zero)
};

// S = Q · Kᵀ for the query tile q and the live part of a key block.
// q: the tile's first row; q_bytes: bytes between its rows.
void scores(const Geometry& g, const uint16_t* q, int64_t q_bytes, const uint32_t* kt, const Live& b,
            Scratch& s) {
  const int64_t q_row = q_bytes / 2;
  for (int jt = 0; jt < b.keys / TM; ++jt) {
    _tile_zero(0);
    if (b.two) _tile_zero(1);
    int c = 0;
    for (; c + 32 <= g.d_qk; c += 32) {
      _tile_loadd(2, q + c, q_bytes);
      _tile_loadd(4, kt + int64_t(c / 2) * g.keys_pad + b.col + jt * TM, g.keys_pad * 4);
      _tile_dpbf16ps(0, 2, 4);
      if (b.two) {
        _tile_loadd(3, q + TM * q_row + c, q_bytes);
        _tile_dpbf16ps(1, 3, 4);
      }
    }
    if (c < g.d_qk) {  // the last 16 of the head dim
      _tile_loadd(5, q + c, q_bytes);
      _tile_loadd(7, kt + int64_t(c / 2) * g.keys_pad + b.col + jt * TM, g.keys_pad * 4);
      _tile_dpbf16ps(0, 5, 7);
      if (b.two) {
        _tile_loadd(6, q + TM * q_row + c, q_bytes);
        _tile_dpbf16ps(1, 6, 7);
      }
    }
    _tile_stored(0, s.s.data() + jt * TM, BN * 4);
    if (b.two) _tile_stored(1, s.s.data() + TM * BN + jt * TM, BN * 4);
  }
}

// O += P · V for the live part of a key block.
void accumulate(const Geometry& g, const uint32_t* vp, const Live& b, Scratch& s) {
  for (int ct = 0; ct < g.d_v / TM; ++ct) {
    float* o = s.o.data() + ct * TM;
    if (b.first) {
      _tile_zero(0);
      _tile_zero(1);
    } else {
      _tile_loadd(0, o, g.d_v * 4);
      if (b.two) _tile_loadd(1, o + TM * g.d_v, g.d_v * 4);
    }
    for (int kc = 0; kc < b.keys / 32; ++kc) {
      _tile_loadd(2, s.p.data() + kc * 32, BN * 2);
      _tile_loadd(4, vp + (b.col / 2 + kc * TM) * g.d_v + ct * TM, g.d_v * 4);
      _tile_dpbf16ps(0, 2, 4);
      if (b.two) {
        _tile_loadd(3, s.p.data() + TM * BN + kc * 32, BN * 2);
        _tile_dpbf16ps(1, 3, 4);
      }
    }
    _tile_stored(0, o, g.d_v * 4);
    if (b.two) _tile_stored(1, o + TM * g.d_v, g.d_v * 4);
  }
}

// Per-row maxima (or sums) of 16 rows at once: the rows' 16-lane partials are transposed so
// one vertical pass reduces them all, instead of 16 horizontal reductions.
template <bool kMax>
__m512 reduce_rows(const __m512 (&partial)[TM]) {
  alignas(64) float rows[TM * TM], columns[TM * TM];
  for (int r = 0; r < TM; ++r) _mm512_store_ps(rows + r * TM, partial[r]);
  Ops::transpose(rows, TM, columns, TM);
  __m512 total = _mm512_load_ps(columns);
  for (int c = 1; c < TM; ++c) {
    const __m512 column = _mm512_load_ps(columns + c * TM);
    total = kMax ? _mm512_max_ps(total, column) : _mm512_add_ps(total, column);
  }
  return total;
}

// Online softmax over the block's rows (log2 domain), 16 rows at a time. Keys are relative to
// the tile's first row: key0 is the block's first key; keys at or past key_end, or outside a
// row's window, are masked unless `unmasked`.
void softmax_rows(const AttentionParams& p, const Geometry& g, const Live& b, int64_t key0,
                  int64_t key_end, bool unmasked, float scale2, NextItemPrefetch& next, Scratch& s) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const __m512 scale = _mm512_set1_ps(scale2);
  // Unmasked blocks with a positive scale take the max of the raw scores and fold the scale
  // into the exponent (one FMA), so the scores are read twice and never rewritten.
  const bool fused = unmasked && scale2 > 0;
  for (int r0 = 0; r0 < (b.two ? BM : TM); r0 += TM) {
    __m512 partial[TM];
    for (int r = 0; r < TM; ++r) {
      const int i = r0 + r;
      // Row i sees key j when i - wl <= j <= i + wr (and j < key_end).
      const float lo = p.window_left < 0 ? -inf : float(i - p.window_left);
      const float hi = std::min(p.window_right < 0 ? inf : float(i + p.window_right), float(key_end - 1));
      partial[r] = _mm512_set1_ps(-inf);
      for (int v = 0; v < b.keys / 16; ++v) {
        float* x_ptr = s.s.data() + i * BN + v * 16;
        __m512 x = _mm512_loadu_ps(x_ptr);
        if (!fused) {
          x = _mm512_mul_ps(x, scale);
          if (!unmasked) x = Ops::mask_outside(x, float(key0 + v * 16), lo, hi);
          _mm512_storeu_ps(x_ptr, x);
        }
        partial[r] = _mm512_max_ps(partial[r], x);
      }
      if (fused) partial[r] = _mm512_mul_ps(partial[r], scale);
    }
    const __m512 m_old = _mm512_loadu_ps(s.m + r0);
    const __m512 m_new = _mm512_max_ps(m_old, reduce_rows<true>(partial));
    const __m512 m_use = Ops::finite_or_zero(m_new);
    alignas(64) float alpha[TM], shift[TM];
    _mm512_store_ps(alpha, Ops::exp2(_mm512_sub_ps(m_old, m_use)));
    _mm512_store_ps(shift, m_use);
    for (int r = 0; r < TM; ++r) {
      next.tick();
      const int i = r0 + r;
      const __m512 m = _mm512_set1_ps(shift[r]);
      const __m512 x_scale = fused ? scale : _mm512_set1_ps(1.0f);
      partial[r] = _mm512_setzero_ps();
      for (int v = 0; v < b.keys / 16; v += 2) {
        const float* x = s.s.data() + i * BN + v * 16;
        const __m512 p0 = Ops::exp2(_mm512_fmsub_ps(_mm512_loadu_ps(x), x_scale, m));
        const __m512 p1 = Ops::exp2(_mm512_fmsub_ps(_mm512_loadu_ps(x + 16), x_scale, m));
        partial[r] = _mm512_add_ps(partial[r], _mm512_add_ps(p0, p1));
        _mm512_storeu_si512(s.p.data() + i * BN + v * 16, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
      }
      // Once a row's max stops growing (most blocks of a long image), O needs no rescale; in
      // the first block there is no O yet.
      if (alpha[r] != 1.0f && !b.first) {
        const __m512 a = _mm512_set1_ps(alpha[r]);
        float* o = s.o.data() + int64_t(i) * g.d_v;
        for (int c = 0; c < g.d_v; c += 16) _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_loadu_ps(o + c), a));
      }
    }
    const __m512 sums = reduce_rows<false>(partial);
    _mm512_storeu_ps(s.l + r0, _mm512_fmadd_ps(_mm512_loadu_ps(s.l + r0), _mm512_load_ps(alpha), sums));
    _mm512_storeu_ps(s.m + r0, m_new);
  }
}

void run_head(const AttentionParams& p, const WorkItem& item, const Geometry& g, int head,
              const uint32_t* kt, const uint32_t* vp, NextItemPrefetch& next, Scratch& s) {
  const float log2e = 1.4426950408889634f;
  const float scale2 = float(p.softmax_scale * 1.4426950408889634);
  const float sink2 = p.sinks ? p.sinks[head * p.sinks_stride] * log2e : 0.0f;
  for (int64_t q0 = item.row_begin; q0 < item.row_end; q0 += BM) {
    const int rows = int(std::min<int64_t>(BM, item.row_end - q0));
    const uint16_t* q = g.q_direct
        ? bf16_row(p.q, (g.start + q0) * p.q_token_stride + head * p.q_head_stride)
        : s.q.data() + (head - item.head_begin) * g.q_stride + (q0 - item.row_begin) * g.d_qk;
    const int64_t q_bytes = 2 * (g.q_direct ? p.q_token_stride : g.d_qk);
    std::fill(s.m, s.m + BM, p.sinks ? sink2 : -std::numeric_limits<float>::infinity());
    std::fill(s.l, s.l + BM, p.sinks ? 1.0f : 0.0f);

    const int64_t last_row = q0 + rows - 1;
    const KeyRange tile_keys = visible_keys(p, g.n, q0, q0 + rows);
    const int64_t kb0 = g.key_begin + ((tile_keys.begin - g.key_begin) & ~int64_t(1));
    for (int64_t kb = kb0; kb < tile_keys.end; kb += BN) {
      const Live live{kb - g.key_begin, int(round_up(std::min<int64_t>(BN, tile_keys.end - kb), 32)),
                      rows > TM, kb == kb0};
      scores(g, q, q_bytes, kt, live, s);
      softmax_rows(p, g, live, kb - q0, tile_keys.end - q0,
                   block_unmasked(p, kb, BN, tile_keys.end, q0, last_row), scale2, next, s);
      accumulate(g, vp, live, s);
    }

    const int heads = item.head_end - item.head_begin;
    for (int i = 0; i < rows; ++i) {
      const __m512 inv = _mm512_set1_ps(1.0f / s.l[i]);
      const int64_t token = g.start + q0 + i;
      uint16_t* out = g.stream
          ? s.out.data() + ((q0 + i - item.row_begin) * heads + head - item.head_begin) * p.head_dim
          : static_cast<uint16_t*>(p.out) + token * p.out_token_stride + head * p.out_head_stride;
      for (int c = 0; c < p.head_dim; c += 16) {
        const __m512 o = _mm512_mul_ps(_mm512_loadu_ps(s.o.data() + int64_t(i) * g.d_v + c), inv);
        const __mmask16 lanes = p.head_dim - c >= 16 ? 0xffff : __mmask16((1u << (p.head_dim - c)) - 1);
        _mm256_mask_storeu_epi16(out + c, lanes, (__m256i)_mm512_cvtneps_pbh(o));
      }
      if (p.lse) {
        p.lse[head * p.lse_head_stride + token * p.lse_token_stride] =
            float((double(s.m[i]) + std::log2(double(s.l[i]))) * 0.6931471805599453);
      }
    }
  }
}

// Rows softmax_rows processes for an item (query tiles x key blocks x BM), about.
int64_t softmax_rows_of(const AttentionParams& p, const WorkItem& item) {
  const int64_t n = p.cu_seqlens[item.image + 1] - p.cu_seqlens[item.image];
  const KeyRange tile_keys = visible_keys(p, n, item.row_begin, std::min(n, item.row_begin + BM));
  const int64_t blocks = (tile_keys.end - tile_keys.begin + BN - 1) / BN;
  return round_up(item.row_end - item.row_begin, BM) * std::max<int64_t>(blocks, 1) *
         (item.head_end - item.head_begin);
}

void run_item(const AttentionParams& p, const WorkItem& item, bool stream, NextItemPrefetch& next, Scratch& s) {
  Geometry g;
  g.start = p.cu_seqlens[item.image];
  g.n = p.cu_seqlens[item.image + 1] - g.start;
  const KeyRange keys = visible_keys(p, g.n, item.row_begin, item.row_end);
  g.key_begin = keys.begin;
  g.keys = int(keys.end - keys.begin);
  // Blocks start at even offsets (any, with a window; multiples of BN without one); whole
  // 16-key columns for the transpose.
  g.keys_pad = int(p.window_left < 0 ? round_up(g.keys, BN) : round_up(g.keys, TM) + BN);
  g.d_qk = int(round_up(p.head_dim, TM));
  g.pairs_t = int(round_up(g.d_qk / 2, TM));
  g.d_v = int(round_up(p.head_dim, TM));
  const int group = p.num_heads / p.num_kv_heads;
  g.rows_pad = int(round_up(item.row_end - item.row_begin, BM));
  g.kv_begin = item.head_begin / group;
  g.kv_count = (item.head_end - 1) / group - g.kv_begin + 1;
  g.q_stride = int64_t(g.rows_pad) * g.d_qk;
  g.kt_stride = int64_t(g.pairs_t) * g.keys_pad;
  g.vp_stride = int64_t(g.keys_pad / 2) * g.d_v;
  g.q_direct = g.keys <= BN && p.head_dim % TM == 0 && g.start + item.row_begin + g.rows_pad <= p.cu_seqlens[p.num_images];
  g.stream = stream;
  const int heads = item.head_end - item.head_begin;
  if (g.stream) s.out.resize((item.row_end - item.row_begin) * heads * p.head_dim);
  if (!g.q_direct) s.q.resize(heads * g.q_stride);  // rows_pad x d_qk per head
  s.kt.resize(g.kv_count * g.kt_stride);
  s.vp.resize(g.kv_count * g.vp_stride);
  s.p.resize(int64_t(BM) * BN);
  s.s.resize(int64_t(BM) * BN);
  s.o.resize(int64_t(BM) * g.d_v);

  const TileConfig config;
  _tile_loadconfig(&config);
  pack_item(p, item, g, s);
  for (int head = item.head_begin; head < item.head_end; ++head) {
    const int kv = head / group - g.kv_begin;
    run_head(p, item, g, head, s.kt.data() + kv * g.kt_stride, s.vp.data() + kv * g.vp_stride, next, s);
  }
  for (int64_t i = 0; g.stream && i < item.row_end - item.row_begin; ++i) {
    Ops::stream_bytes(static_cast<uint16_t*>(p.out) + (g.start + item.row_begin + i) * p.out_token_stride +
                          item.head_begin * p.head_dim,
                      s.out.data() + i * heads * p.head_dim, int64_t(heads) * p.head_dim * 2);
  }
  if (g.stream) Ops::fence();
  _tile_release();
}

}  // namespace

}  // namespace visattn::cpu::amx

namespace visattn::cpu {

void run_amx(const AttentionParams& p, int threads) {
  const std::vector<WorkItem> items = plan_work(p, amx::BM, threads);
  const bool stream = output_streamable(p);
  const bool lookahead = !items.empty() && NextItemPrefetch::helps(p, items.front());
  parallel_for(int64_t(items.size()), threads, lookahead, [&](int64_t i, int64_t next) {
    thread_local amx::Scratch scratch;
    // softmax_rows ticks once per row of each key block it runs.
    NextItemPrefetch prefetch(p, next < 0 ? nullptr : &items[next], amx::softmax_rows_of(p, items[i]), stream);
    amx::run_item(p, items[i], stream, prefetch, scratch);
  });
}

}  // namespace visattn::cpu

VISATTN_TARGET_END
