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

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

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

  // qa[c][i] = Q[i][c] for a tile of `rows` rows (zeros elsewhere); qa is d_pad x bm.
  static void pack_q(const AttentionParams& p, int64_t token, int rows, int head, int bm,
                     int d_pad, float* row, Elem* qa) {
    std::fill(qa, qa + int64_t(d_pad) * bm, 0.0f);
    for (int i = 0; i < rows; ++i) {
      load_row(p.q, p.dtype, (token + i) * p.q_token_stride + head * p.q_head_stride, p.head_dim, row);
      for (int c = 0; c < p.head_dim; ++c) qa[int64_t(c) * bm + i] = row[c];
    }
  }
  // kb[j][c] = K[j][c], rows of d_pad; rows past `keys` are zero up to `keys_pad`.
  static void pack_k(const AttentionParams& p, int64_t token, int keys, int keys_pad, int kv_head,
                     int d_pad, Elem* kb) {
    std::fill(kb, kb + int64_t(keys_pad) * d_pad, 0.0f);
    for (int j = 0; j < keys; ++j) {
      load_row(p.k, p.dtype, (token + j) * p.k_token_stride + kv_head * p.k_head_stride,
               p.head_dim, kb + int64_t(j) * d_pad);
    }
  }
  static void pack_v(const AttentionParams& p, int64_t token, int keys, int keys_pad, int kv_head,
                     int d_pad, Elem* vb) {
    std::fill(vb, vb + int64_t(keys_pad) * d_pad, 0.0f);
    for (int j = 0; j < keys; ++j) {
      load_row(p.v, p.dtype, (token + j) * p.v_token_stride + kv_head * p.v_head_stride,
               p.head_dim, vb + int64_t(j) * d_pad);
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
    parallel_for(int64_t(items.size()), threads, [&](int64_t i) {
      thread_local Scratch scratch;
      run_item(p, items[i], scratch);
    });
  }

 private:
  struct Scratch {
    std::vector<Elem> q, k, v, p;
    std::vector<float> s, o, row;
    alignas(64) float m[BM], l[BM];
  };

  // C[r][i] (+)= Σ_k A[k][i] · B[k·b_k + r·b_r], for R rows r and the BM lanes i.
  template <int R>
  static void micro(const Elem* a, int64_t steps, const Elem* b, int64_t b_k, int64_t b_r,
                    float* c, bool accumulate) {
    V acc[R][IV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < IV; ++v)
        acc[r][v] = accumulate ? Ops::load(c + r * BM + v * W) : Ops::zero();
    for (int64_t k = 0; k < steps; ++k) {
      typename Mma::A av[IV];
      for (int v = 0; v < IV; ++v) av[v] = Mma::load_a(a + k * BM + v * W);
      for (int r = 0; r < R; ++r) {
        const typename Mma::B bv = Mma::broadcast(b + k * b_k + r * b_r);
        for (int v = 0; v < IV; ++v) acc[r][v] = Mma::madd(acc[r][v], av[v], bv);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < IV; ++v) Ops::store(c + r * BM + v * W, acc[r][v]);
  }

  static void run_item(const AttentionParams& p, const WorkItem& item, Scratch& s) {
    const int64_t start = p.cu_seqlens[item.image];
    const int64_t n = p.cu_seqlens[item.image + 1] - start;
    const int kv_head = item.head / (p.num_heads / p.num_kv_heads);
    const int d_pad = int(round_up(p.head_dim, 4));
    const int64_t wl = p.window_left, wr = p.window_right;

    // Keys any row of the item can see, packed once for all its tiles.
    const int64_t key_begin = wl < 0 ? 0 : std::max<int64_t>(0, item.row_begin - wl);
    const int64_t key_end = wr < 0 ? n : std::min<int64_t>(n, item.row_end + wr);
    const int keys = int(key_end - key_begin);
    const int keys_pad = int(round_up(keys, 2)) + BN;  // any block start reads in bounds
    s.k.resize(int64_t(keys_pad) * d_pad / Mma::kPack);
    s.v.resize(int64_t(keys_pad) * d_pad / Mma::kPack);
    s.q.resize(int64_t(d_pad) * BM / Mma::kPack);
    s.p.resize(int64_t(BN) * BM / Mma::kPack);
    s.s.resize(int64_t(BN) * BM);
    s.o.resize(int64_t(d_pad) * BM);
    s.row.resize(d_pad);
    Mma::pack_k(p, start + key_begin, keys, keys_pad, kv_head, d_pad, s.k.data());
    Mma::pack_v(p, start + key_begin, keys, keys_pad, kv_head, d_pad, s.v.data());

    const float log2e = 1.4426950408889634f;
    const float scale2 = float(p.softmax_scale * 1.4426950408889634);
    const float sink2 = p.sinks ? p.sinks[item.head * p.sinks_stride] * log2e : 0.0f;

    for (int64_t q0 = item.row_begin; q0 < item.row_end; q0 += BM) {
      const int rows = int(std::min<int64_t>(BM, item.row_end - q0));
      Mma::pack_q(p, start + q0, rows, item.head, BM, d_pad, s.row.data(), s.q.data());
      std::fill(s.m, s.m + BM, p.sinks ? sink2 : -std::numeric_limits<float>::infinity());
      std::fill(s.l, s.l + BM, p.sinks ? 1.0f : 0.0f);
      std::fill(s.o.begin(), s.o.end(), 0.0f);

      // Keys this tile can see; the first block starts at an even offset (pair formats).
      const int64_t last_row = q0 + rows - 1;
      int64_t kb = wl < 0 ? 0 : std::max<int64_t>(0, q0 - wl);
      const int64_t kb_end = wr < 0 ? n : std::min<int64_t>(n, last_row + wr + 1);
      kb = key_begin + ((kb - key_begin) & ~int64_t(1));
      for (; kb < kb_end; kb += BN) {
        const Elem* k_block = s.k.data() + (kb - key_begin) * d_pad / Mma::kPack;
        for (int j = 0; j < BN; j += kMicroRows) {
          micro<kMicroRows>(s.q.data(), d_pad / Mma::kPack, k_block + int64_t(j) * d_pad / Mma::kPack,
                            1, d_pad / Mma::kPack, s.s.data() + int64_t(j) * BM, false);
        }
        const bool full = kb + BN <= kb_end && (wl < 0 || kb >= last_row - wl) &&
                          (wr < 0 || kb + BN - 1 <= q0 + wr);
        softmax_block(s, kb - q0, full ? -1 : kb_end - q0, wl, wr, scale2, d_pad);
        const Elem* v_block = s.v.data() + (kb - key_begin) * d_pad / Mma::kPack;
        for (int c = 0; c < d_pad; c += kMicroRows) {
          micro<kMicroRows>(s.p.data(), BN / Mma::kPack, v_block + c, d_pad, 1,
                            s.o.data() + int64_t(c) * BM, true);
        }
      }
      store_tile(p, s, start, q0, rows, item.head);
    }
  }

  // Scales the block's logits, masks what rows cannot see (unless mask_end < 0: all visible),
  // updates m and l, rescales O and writes P. Key j of the block is key j0 + j relative to the
  // tile's first row; keys at or past mask_end are outside the image or the tile's window.
  static void softmax_block(Scratch& s, int64_t j0, int64_t mask_end, int64_t wl, int64_t wr,
                            float scale2, int d_pad) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    const V scale = Ops::set1(scale2);
    V row_max[IV];
    for (int v = 0; v < IV; ++v) row_max[v] = Ops::load(s.m + v * W);
    for (int j = 0; j < BN; ++j) {
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
      for (int j = 0; j < BN; j += 2) {
        const V pj = Ops::exp2(Ops::sub(Ops::load(s.s.data() + j * BM + v * W), m_use));
        const V pj1 = Ops::exp2(Ops::sub(Ops::load(s.s.data() + (j + 1) * BM + v * W), m_use));
        sum = Ops::add(sum, Ops::add(pj, pj1));
        Mma::store_p(s.p.data(), j, BM, v * W, pj, pj1);
      }
      Ops::store(s.l + v * W, Ops::fmadd(Ops::load(s.l + v * W), alpha[v], sum));
      Ops::store(s.m + v * W, row_max[v]);
    }
    for (int c = 0; c < d_pad; ++c) {
      for (int v = 0; v < IV; ++v) {
        float* o = s.o.data() + int64_t(c) * BM + v * W;
        Ops::store(o, Ops::mul(Ops::load(o), alpha[v]));
      }
    }
  }

  // out[i][c] = Oᵀ[c][i] / l[i] for the tile's rows; lse[i] = ln(2) · (m[i] + log2 l[i]).
  static void store_tile(const AttentionParams& p, Scratch& s, int64_t start, int64_t q0, int rows,
                         int head) {
    float* row = s.row.data();
    for (int i = 0; i < rows; ++i) {
      const float inv = 1.0f / s.l[i];
      for (int c = 0; c < p.head_dim; ++c) row[c] = s.o[int64_t(c) * BM + i] * inv;
      const int64_t token = start + q0 + i;
      store_row(p.out, p.dtype, token * p.out_token_stride + head * p.out_head_stride, row, p.head_dim);
      if (p.lse) {
        p.lse[head * p.lse_head_stride + token * p.lse_token_stride] =
            float((double(s.m[i]) + std::log2(double(s.l[i]))) * 0.6931471805599453);
      }
    }
  }
};

}  // namespace visattn::cpu::VISATTN_CPU_ISA
