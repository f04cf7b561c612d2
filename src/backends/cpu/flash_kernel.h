// The CPU flash-attention kernel, generic over the vector instruction set (Ops) and the
// matrix-multiply element format (Mma). Included by one translation unit per ISA.
//
// Per work item (query rows of one image and head): pack the keys and values the rows can see,
// then for each query tile of BM rows walk key blocks of BN, keeping a running max m, sum l
// and output O per row (online softmax, fp32, log2 domain). Tiles are stored transposed
// (queries along the vector lanes) so the softmax is vertical vector work:
//   Sᵀ[j][i] = Σ_c K[j][c] Qᵀ[c][i]        Oᵀ[c][i] += Σ_j V[j][c] Pᵀ[j][i]
// Both products are the same micro-kernel C[r][i] (+)= Σ_k A[k][i] · B[k][r].
// A sink starts a row at m = sink·log2(e), l = 1: it then takes mass like an extra key.
//
// Include after kernel_prelude.h, with VISATTN_CPU_ISA naming the instruction set: every
// symbol lands in namespace visattn::cpu::VISATTN_CPU_ISA, unique to that TU's target.
#pragma once

#include "backends/cpu/kernel_prelude.h"

#ifndef VISATTN_CPU_ISA
#error "define VISATTN_CPU_ISA before including flash_kernel.h"
#endif

namespace visattn::cpu::VISATTN_CPU_ISA {

inline constexpr int kQueryVectors = 4;  // a query tile is 4 vectors of rows
inline constexpr int kKeyBlock = 64;     // keys per block (BN)
inline constexpr int kMicroRows = 4;     // rows r of the micro-kernel's register tile

// fp32 products from any input dtype (converted while packing).
template <class Ops>
struct F32Mma {
  using Elem = float;
  using A = typename Ops::V;
  using B = typename Ops::V;
  static constexpr int kPack = 1;  // reduction elements per Elem

  static A load_a(const Elem* p) { return Ops::load(p); }
  static B broadcast(const Elem* p) { return Ops::set1(*p); }
  static typename Ops::V madd(typename Ops::V acc, A a, B b) { return Ops::fmadd(a, b, acc); }

  static constexpr bool kStagedQ = true;  // reads q rows staged as float by the kernel
  // qa[c][i] = staged[i][c] for the bm rows of a tile (zeros past the item's rows); qa is
  // d_t x bm, d_t the head dim rounded up to W, by W x W transposes. Without staged rows (see
  // reads_q_in_place) the transposes read the tile's bm rows of `head` from q itself.
  static void pack_q(const AttentionParams& p, int64_t token, int, int head, int bm, int d_t,
                     const float* staged, Elem* qa) {
    if (!staged) {
      const float* q = static_cast<const float*>(p.q) + token * p.q_token_stride + head * p.q_head_stride;
      for (int c = 0; c < d_t; c += Ops::W)
        for (int i = 0; i < bm; i += Ops::W)
          Ops::transpose(q + i * p.q_token_stride + c, p.q_token_stride, qa + int64_t(c) * bm + i, bm);
      return;
    }
    for (int c = 0; c < d_t; c += Ops::W)
      for (int i = 0; i < bm; i += Ops::W)
        Ops::transpose(staged + int64_t(i) * d_t + c, d_t, qa + int64_t(c) * bm + i, bm);
  }
  // kb[h][j][c] = K[j][kv_begin + h][c] for kv_count heads, each [keys_pad][d_pad] with zeros
  // past `keys` and past head_dim. Token-major: each token's heads are read together.
  static void pack_k(const AttentionParams& p, int64_t token, int keys, int keys_pad, int kv_begin,
                     int kv_count, int d_pad, Elem* kb) {
    pack_rows(p.k, p.dtype, token, p.k_token_stride, p.k_head_stride, kv_begin, kv_count,
              p.head_dim, keys, keys_pad, d_pad, kb);
  }
  static void pack_v(const AttentionParams& p, int64_t token, int keys, int keys_pad, int kv_begin,
                     int kv_count, int d_pad, Elem* vb) {
    pack_rows(p.v, p.dtype, token, p.v_token_stride, p.v_head_stride, kv_begin, kv_count,
              p.head_dim, keys, keys_pad, d_pad, vb);
  }
  static void pack_rows(const void* base, DType dtype, int64_t token, int64_t token_stride,
                        int64_t head_stride, int kv_begin, int kv_count, int d, int keys,
                        int keys_pad, int d_pad, float* dst) {
    const int64_t per_head = int64_t(keys_pad) * d_pad;
    for (int j = 0; j < keys; ++j) {
      for (int h = 0; h < kv_count; ++h) {
        float* row = dst + h * per_head + int64_t(j) * d_pad;
        Ops::load_row(base, dtype, (token + j) * token_stride + (kv_begin + h) * head_stride, d, row);
        std::fill(row + d, row + d_pad, 0.0f);
      }
    }
    for (int h = 0; h < kv_count; ++h) {
      std::fill(dst + h * per_head + int64_t(keys) * d_pad, dst + (h + 1) * per_head, 0.0f);
    }
  }
  // Stores probabilities of keys j and j + 1 for W rows at lane offset `lane`.
  static void store_p(Elem* pa, int j, int bm, int lane, typename Ops::V pj, typename Ops::V pj1) {
    Ops::store(pa + int64_t(j) * bm + lane, pj);
    Ops::store(pa + int64_t(j + 1) * bm + lane, pj1);
  }
};

template <class Ops, class Mma>
class FlashKernel {
 public:
  static constexpr int W = Ops::W;
  static constexpr int IV = kQueryVectors;
  static constexpr int BM = W * IV;
  static constexpr int BN = kKeyBlock;
  using V = typename Ops::V;
  using Elem = typename Mma::Elem;

  static void run(const AttentionParams& p, int threads) {
    const std::vector<WorkItem> items = plan_work(p, BM, threads);
    // Outputs are streamed from out_rows (rounded to the dtype first), whose heads are adjacent
    // when W divides head_dim.
    const bool stream = output_streamable(p) && p.head_dim % W == 0;
    const bool lookahead = !items.empty() && NextItemPrefetch::helps(p, items.front());
    parallel_for(int64_t(items.size()), threads, lookahead, [&](int64_t i, int64_t next) {
      thread_local Scratch scratch;
      // softmax_block ticks once per key of each block it runs.
      NextItemPrefetch prefetch(p, next < 0 ? nullptr : &items[next], keys_of(p, items[i]), stream);
      run_item(p, items[i], stream, prefetch, scratch);
    });
  }

 private:
  struct Scratch {
    std::vector<Elem> q, k, v, p;
    std::vector<float> s, o;
    std::vector<float> q_rows;    // [heads][kGroupRows][d_t]: a row group's q, token-major read
    std::vector<float> out_rows;  // [kGroupRows][heads][d_t]: its output, written token-major
    std::vector<uint16_t> out_row16;  // one token's outputs in a 16-bit dtype, when streamed
    alignas(64) float m[BM], l[BM];
  };
  // Rows are staged in groups of this many: the q rows of all the item's heads are read, and
  // the outputs written, token by token (each token's heads are adjacent in memory), instead of
  // one strided head at a time.
  static constexpr int kGroupRows = 4 * BM;

  // C[r][i] (+)= Σ_k A[k][i] · B[k·b_k + r·b_r], for R rows r and the BM lanes i.
  // R x IV accumulators, IV A vectors and a broadcast must fit the ISA's vector registers: on
  // AVX2 (16) four rows would keep two accumulators on the stack, a store-to-load chain every
  // step, so the rows are done in two passes over A instead.
  template <int R>
  static void micro(const Elem* a, int64_t steps, const Elem* b, int64_t b_k, int64_t b_r,
                    float* c, bool accumulate) {
    if constexpr (R > 1 && (R + 1) * IV + 1 > Ops::kRegisters) {
      micro<R / 2>(a, steps, b, b_k, b_r, c, accumulate);
      micro<R - R / 2>(a, steps, b + R / 2 * b_r, b_k, b_r, c + R / 2 * BM, accumulate);
      return;
    }
    V acc[R][IV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < IV; ++v)
        acc[r][v] = accumulate ? Ops::load(c + r * BM + v * W) : Ops::zero();
    for (int64_t k = 0; k < steps; ++k) {
      typename Mma::A av[IV];
      for (int v = 0; v < IV; ++v) av[v] = Mma::load_a(a + k * BM + v * W);
      // Loaded once per step: where the compiler would fold the loads into every row's FMAs
      // (AVX2, whose ports then carry twice the loads), the ISA pins them in registers.
      if constexpr (requires(typename Mma::A x) { Ops::keep_in_register(x); }) {
        for (int v = 0; v < IV; ++v) av[v] = Ops::keep_in_register(av[v]);
      }
      for (int r = 0; r < R; ++r) {
        const typename Mma::B bv = Mma::broadcast(b + k * b_k + r * b_r);
        for (int v = 0; v < IV; ++v) acc[r][v] = Mma::madd(acc[r][v], av[v], bv);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < IV; ++v) Ops::store(c + r * BM + v * W, acc[r][v]);
  }

  // Rows and keys of one work item, shared by its heads.
  struct Span {
    int64_t start, n;                 // the image's first token and length
    int64_t key_begin, key_end;       // keys any row of the item can see
    int keys, keys_pad, d_pad, d_t;
    int64_t kv_stride;                // elements between the packed k (or v) of two kv heads
  };

  // Keys softmax_block walks for an item (query tiles x key blocks x BN), about.
  static int64_t keys_of(const AttentionParams& p, const WorkItem& item) {
    const int64_t n = p.cu_seqlens[item.image + 1] - p.cu_seqlens[item.image];
    const KeyRange tile_keys = visible_keys(p, n, item.row_begin, std::min(n, item.row_begin + BM));
    const int64_t blocks = (tile_keys.end - tile_keys.begin + BN - 1) / BN;
    return (item.row_end - item.row_begin + BM - 1) / BM * std::max<int64_t>(blocks, 1) * BN *
           (item.head_end - item.head_begin);
  }

  // stream: outputs go past the caches, a token's heads at a time (see output_streamable).
  static void run_item(const AttentionParams& p, const WorkItem& item, bool stream, NextItemPrefetch& next,
                       Scratch& s) {
    Span g;
    g.start = p.cu_seqlens[item.image];
    g.n = p.cu_seqlens[item.image + 1] - g.start;
    const KeyRange item_keys = visible_keys(p, g.n, item.row_begin, item.row_end);
    g.key_begin = item_keys.begin;
    g.key_end = item_keys.end;
    g.keys = int(g.key_end - g.key_begin);
    // Blocks start at even offsets, so with a window the last can start anywhere below keys;
    // without one they start at multiples of BN.
    g.keys_pad = int(p.window_left < 0 ? round_up(g.keys, BN) : round_up(g.keys, 2) + BN);
    g.d_pad = int(round_up(p.head_dim, 4));
    const int group = p.num_heads / p.num_kv_heads;
    const int kv_begin = item.head_begin / group;
    const int kv_count = (item.head_end - 1) / group - kv_begin + 1;
    g.kv_stride = int64_t(g.keys_pad) * g.d_pad / Mma::kPack;
    s.k.resize(kv_count * g.kv_stride);
    s.v.resize(kv_count * g.kv_stride);
    // Q and O tiles are transposed in W x W blocks: their head-dim extent rounds up to W.
    g.d_t = int(round_up(p.head_dim, W));
    s.q.resize(int64_t(g.d_t) * BM / Mma::kPack);
    s.p.resize(int64_t(BN) * BM / Mma::kPack);
    s.s.resize(int64_t(BN) * BM);
    s.o.resize(int64_t(g.d_t) * BM);
    const int heads = item.head_end - item.head_begin;
    if (Mma::kStagedQ) s.q_rows.resize(int64_t(heads) * kGroupRows * g.d_t);
    s.out_rows.resize(int64_t(kGroupRows) * heads * g.d_t);
    if (stream && p.dtype != DType::f32) s.out_row16.resize(int64_t(heads) * p.head_dim);
    Mma::pack_k(p, g.start + g.key_begin, g.keys, g.keys_pad, kv_begin, kv_count, g.d_pad, s.k.data());
    Mma::pack_v(p, g.start + g.key_begin, g.keys, g.keys_pad, kv_begin, kv_count, g.d_pad, s.v.data());
    for (int64_t r0 = item.row_begin; r0 < item.row_end; r0 += kGroupRows) {
      const int rows = int(std::min<int64_t>(kGroupRows, item.row_end - r0));
      const bool staged = Mma::kStagedQ && !reads_q_in_place(p, rows);
      const bool direct = streams_tiles(p, stream, rows);
      if (staged) stage_q(p, g, item, r0, rows, s);
      for (int head = item.head_begin; head < item.head_end; ++head) {
        const int64_t kv_offset = (head / group - kv_begin) * g.kv_stride;
        attend_head(p, item, g, head, r0, rows, s.k.data() + kv_offset, s.v.data() + kv_offset, staged,
                    direct, next, s);
      }
      if (direct) continue;
      for (int i = 0; i < rows; ++i) {
        const int64_t token = g.start + r0 + i;
        if (stream) {  // the item's heads of a token: one contiguous run in out and in out_rows
          const float* row = s.out_rows.data() + int64_t(i) * heads * g.d_t;
          const int n = heads * p.head_dim;
          const int64_t first = token * p.out_token_stride + item.head_begin * p.head_dim;
          if (p.dtype == DType::f32) {
            Ops::stream_bytes(static_cast<float*>(p.out) + first, row, int64_t(n) * 4);
          } else {
            Ops::store_row(s.out_row16.data(), p.dtype, 0, row, n);
            Ops::stream_bytes(static_cast<uint16_t*>(p.out) + first, s.out_row16.data(), int64_t(n) * 2);
          }
          continue;
        }
        for (int h = 0; h < heads; ++h) {
          Ops::store_row(p.out, p.dtype, token * p.out_token_stride + (item.head_begin + h) * p.out_head_stride,
                         s.out_rows.data() + (int64_t(i) * heads + h) * g.d_t, p.head_dim);
        }
      }
    }
    if (stream) Ops::fence();
  }

  // fp32 q of whole tiles (no rows to zero past the image) and of a head dim of whole vectors
  // (no columns to zero) needs no staged copy: pack_q transposes it from the tensor. This
  // saves a copy of every q row, most of the time where an image is one or two tiles (64-token
  // windows +5%; bench/NOTES.md CPU entry 17).
  static bool reads_q_in_place(const AttentionParams& p, int rows) {
    return p.dtype == DType::f32 && p.head_dim % W == 0 && rows % BM == 0;
  }

  // Whether the ISA can stream an O transpose's rows as whole lines (AVX-512: 16 floats).
  static constexpr bool kStreamsTransposes =
      requires(const float* src, float* dst) { Ops::stream_transpose(src, 0, dst, 0, src); };

  // fp32 outputs of whole tiles, streamed, go from the O transposes straight into `out`: every
  // W-column run of a row is then one aligned 64-byte line, written past the caches with no
  // out_rows copy (64-token windows +4%; bench/NOTES.md CPU entry 18).
  static bool streams_tiles(const AttentionParams& p, bool stream, int rows) {
    return kStreamsTransposes && stream && p.dtype == DType::f32 && p.head_dim % W == 0 && rows % BM == 0 &&
           reinterpret_cast<uintptr_t>(p.out) % 64 == 0 && p.out_token_stride * sizeof(float) % 64 == 0;
  }

  // q_rows[h][i] = Q[r0 + i][head_begin + h] as float, zero past head_dim and past `rows` (up
  // to whole tiles).
  static void stage_q(const AttentionParams& p, const Span& g, const WorkItem& item, int64_t r0,
                      int rows, Scratch& s) {
    const int heads = item.head_end - item.head_begin;
    const int64_t per_head = int64_t(kGroupRows) * g.d_t;
    for (int i = 0; i < rows; ++i) {
      const int64_t token = g.start + r0 + i;
      for (int h = 0; h < heads; ++h) {
        float* row = s.q_rows.data() + h * per_head + int64_t(i) * g.d_t;
        Ops::load_row(p.q, p.dtype, token * p.q_token_stride + (item.head_begin + h) * p.q_head_stride,
                      p.head_dim, row);
        std::fill(row + p.head_dim, row + g.d_t, 0.0f);
      }
    }
    const int padded = int(round_up(rows, BM));
    for (int h = 0; h < heads; ++h) {
      std::fill(s.q_rows.data() + h * per_head + int64_t(rows) * g.d_t,
                s.q_rows.data() + h * per_head + int64_t(padded) * g.d_t, 0.0f);
    }
  }

  // Rows [r0, r0 + group_rows) of one head; outputs go to out_rows, or straight to out where
  // `direct` (streams_tiles). q_staged: its q rows are in q_rows (stage_q), else pack_q reads them.
  static void attend_head(const AttentionParams& p, const WorkItem& item, const Span& g, int head,
                          int64_t r0, int group_rows, const Elem* k_packed, const Elem* v_packed,
                          bool q_staged, bool direct, NextItemPrefetch& next, Scratch& s) {
    const int64_t n = g.n, key_begin = g.key_begin;
    const int d_pad = g.d_pad;
    const int64_t wl = p.window_left, wr = p.window_right;
    const float log2e = 1.4426950408889634f;
    const float scale2 = float(p.softmax_scale * 1.4426950408889634);
    const float sink2 = p.sinks ? p.sinks[head * p.sinks_stride] * log2e : 0.0f;

    // The staged q rows of this head (formats that read q from the tensor stage nothing).
    const float* staged =
        q_staged ? s.q_rows.data() + int64_t(head - item.head_begin) * kGroupRows * g.d_t : nullptr;
    for (int64_t q0 = r0; q0 < r0 + group_rows; q0 += BM) {
      const int rows = int(std::min<int64_t>(BM, r0 + group_rows - q0));
      Mma::pack_q(p, g.start + q0, rows, head, BM, Mma::kPack == 1 ? g.d_t : d_pad,
                  staged ? staged + (q0 - r0) * g.d_t : nullptr, s.q.data());
      std::fill(s.m, s.m + BM, p.sinks ? sink2 : -std::numeric_limits<float>::infinity());
      std::fill(s.l, s.l + BM, p.sinks ? 1.0f : 0.0f);

      // Keys this tile can see; the first block starts at an even offset (pair formats).
      const int64_t last_row = q0 + rows - 1;
      const KeyRange tile_keys = visible_keys(p, n, q0, q0 + rows);
      const int64_t kb_end = tile_keys.end;
      const int64_t kb0 = key_begin + ((tile_keys.begin - key_begin) & ~int64_t(1));
      for (int64_t kb = kb0; kb < kb_end; kb += BN) {
        const bool first = kb == kb0;  // O is not yet written: P·V stores it, nothing rescales it
        // Keys of the block that exist (the last block of an image, short images), in whole
        // micro-kernel rows; the padding past them is never computed.
        const int live = int(round_up(std::min<int64_t>(BN, kb_end - kb), kMicroRows));
        const Elem* k_block = k_packed + (kb - key_begin) * d_pad / Mma::kPack;
        for (int j = 0; j < live; j += kMicroRows) {
          micro<kMicroRows>(s.q.data(), d_pad / Mma::kPack, k_block + int64_t(j) * d_pad / Mma::kPack,
                            1, d_pad / Mma::kPack, s.s.data() + int64_t(j) * BM, false);
        }
        const bool full = block_unmasked(p, kb, BN, kb_end, q0, last_row);
        softmax_block(s, live, kb - q0, full ? -1 : kb_end - q0, wl, wr, scale2, first ? 0 : d_pad, next);
        const Elem* v_block = v_packed + (kb - key_begin) * d_pad / Mma::kPack;
        for (int c = 0; c < d_pad; c += kMicroRows) {
          micro<kMicroRows>(s.p.data(), live / Mma::kPack, v_block + c, d_pad, 1,
                            s.o.data() + int64_t(c) * BM, !first);
        }
      }
      store_tile(p, s, g, item, r0, q0, rows, head, direct);
    }
  }

  // Scales the block's logits, masks what rows cannot see (unless mask_end < 0: all visible),
  // updates m and l, rescales the first o_columns columns of Oᵀ (0 before O is written) and
  // writes P, for the block's first `live` keys. Key j of the block is key j0 + j relative to
  // the tile's first row; keys at or past mask_end are outside the image or the tile's window.
  static void softmax_block(Scratch& s, int live, int64_t j0, int64_t mask_end, int64_t wl,
                            int64_t wr, float scale2, int o_columns, NextItemPrefetch& next) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    const V scale = Ops::set1(scale2);
    V row_max[IV];
    for (int v = 0; v < IV; ++v) row_max[v] = Ops::load(s.m + v * W);
    for (int j = 0; j < live; ++j) {
      next.tick();
      const int64_t key = j0 + j;  // relative to the tile's first query
      // Rows i (relative) see this key when key - wr <= i <= key + wl.
      const float lo = key >= mask_end && mask_end >= 0 ? inf : wr < 0 ? -inf : float(key - wr);
      const float hi = wl < 0 ? inf : float(key + wl);
      for (int v = 0; v < IV; ++v) {
        V x = Ops::mul(Ops::load(s.s.data() + j * BM + v * W), scale);
        if (mask_end >= 0) x = Ops::mask_outside(x, float(v * W), lo, hi);
        Ops::store(s.s.data() + j * BM + v * W, x);
        row_max[v] = Ops::max(row_max[v], x);
      }
    }
    V alpha[IV];
    for (int v = 0; v < IV; ++v) {
      const V m_old = Ops::load(s.m + v * W);
      const V m_use = Ops::finite_or_zero(row_max[v]);
      alpha[v] = Ops::exp2(Ops::sub(m_old, m_use));
      V sum = Ops::zero();
      for (int j = 0; j < live; j += 2) {
        const V pj = Ops::exp2(Ops::sub(Ops::load(s.s.data() + j * BM + v * W), m_use));
        const V pj1 = Ops::exp2(Ops::sub(Ops::load(s.s.data() + (j + 1) * BM + v * W), m_use));
        sum = Ops::add(sum, Ops::add(pj, pj1));
        Mma::store_p(s.p.data(), j, BM, v * W, pj, pj1);
      }
      Ops::store(s.l + v * W, Ops::fmadd(Ops::load(s.l + v * W), alpha[v], sum));
      Ops::store(s.m + v * W, row_max[v]);
    }
    for (int c = 0; c < o_columns; ++c) {
      for (int v = 0; v < IV; ++v) {
        float* o = s.o.data() + int64_t(c) * BM + v * W;
        Ops::store(o, Ops::mul(Ops::load(o), alpha[v]));
      }
    }
  }

  // out_rows[q0 - r0 + i][head] = Oᵀ[c][i] / l[i] for the tile's rows (W x W transposes, each
  // scaling its lanes), or out's rows where `direct`; lse[i] = ln(2) · (m[i] + log2 l[i]).
  static void store_tile(const AttentionParams& p, Scratch& s, const Span& g, const WorkItem& item,
                         int64_t r0, int64_t q0, int rows, int head, bool direct) {
    alignas(64) float inv_l[BM];
    for (int i = 0; i < BM; ++i) inv_l[i] = s.l[i] > 0.0f ? 1.0f / s.l[i] : 0.0f;  // 0: padding rows
    const int64_t stride = direct ? p.out_token_stride : int64_t(item.head_end - item.head_begin) * g.d_t;
    float* first = direct ? static_cast<float*>(p.out) + (g.start + q0) * stride + head * p.head_dim
                          : s.out_rows.data() + (q0 - r0) * stride + int64_t(head - item.head_begin) * g.d_t;
    for (int c = 0; c < g.d_t; c += W) {
      for (int i = 0; i < BM; i += W) {
        const float* block = s.o.data() + int64_t(c) * BM + i;
        if constexpr (kStreamsTransposes) {
          if (direct) {
            Ops::stream_transpose(block, BM, first + i * stride + c, stride, inv_l + i);
            continue;
          }
        }
        Ops::transpose(block, BM, first + i * stride + c, stride, inv_l + i);
      }
    }
    if (!p.lse) return;
    for (int i = 0; i < rows; ++i) {
      p.lse[head * p.lse_head_stride + (g.start + q0 + i) * p.lse_token_stride] =
          float((double(s.m[i]) + std::log2(double(s.l[i]))) * 0.6931471805599453);
    }
  }
};

}  // namespace visattn::cpu::VISATTN_CPU_ISA
