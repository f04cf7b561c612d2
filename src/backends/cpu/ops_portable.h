// fp32 "vector" operations on 8-lane arrays in plain C++: the path for CPUs without
// AVX2 (and for other architectures). Compilers vectorize these loops where they can.
#pragma once
// Include after kernel_prelude.h with VISATTN_CPU_ISA defined (see flash_kernel.h).

namespace visattn::cpu::VISATTN_CPU_ISA {

struct PortableOps {
  static constexpr int W = 8;
  static constexpr int kRegisters = 32;  // FlashKernel::micro: plain arrays, no reason to split rows
  struct V {
    float lane[W];
  };

  template <typename F>
  static V map(F f) {
    V r;
    for (int i = 0; i < W; ++i) r.lane[i] = f(i);
    return r;
  }
  static V zero() { return map([](int) { return 0.0f; }); }
  static V set1(float x) { return map([x](int) { return x; }); }
  static V load(const float* p) { return map([p](int i) { return p[i]; }); }
  static void store(float* p, V v) { std::copy(v.lane, v.lane + W, p); }
  static void stream_bytes(void* dst, const void* src, int64_t bytes) { std::memcpy(dst, src, bytes); }
  static void fence() {}
  static void load_row(const void* base, DType dtype, int64_t offset, int n, float* dst) {
    cpu::load_row(base, dtype, offset, n, dst);
  }
  static void store_row(void* base, DType dtype, int64_t offset, const float* src, int n) {
    cpu::store_row(base, dtype, offset, src, n);
  }
  static V add(V a, V b) { return map([&](int i) { return a.lane[i] + b.lane[i]; }); }
  static V sub(V a, V b) { return map([&](int i) { return a.lane[i] - b.lane[i]; }); }
  static V mul(V a, V b) { return map([&](int i) { return a.lane[i] * b.lane[i]; }); }
  static V max(V a, V b) { return map([&](int i) { return std::max(a.lane[i], b.lane[i]); }); }
  static V fmadd(V a, V b, V c) {
    return map([&](int i) { return std::fma(a.lane[i], b.lane[i], c.lane[i]); });
  }
  static V mask_outside(V x, float index0, float lo, float hi) {
    return map([&](int i) {
      const float idx = index0 + float(i);
      return idx >= lo && idx <= hi ? x.lane[i] : -std::numeric_limits<float>::infinity();
    });
  }
  static V finite_or_zero(V x) {
    return map([&](int i) { return x.lane[i] == -std::numeric_limits<float>::infinity() ? 0.0f : x.lane[i]; });
  }
  // dst[c][r] = src[r][c] · lane_scale[c] for a W x W block (strides in floats); no scaling
  // where lane_scale is null.
  static void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                        const float* lane_scale = nullptr) {
    for (int r = 0; r < W; ++r)
      for (int c = 0; c < W; ++c)
        dst[c * dst_stride + r] = src[r * src_stride + c] * (lane_scale ? lane_scale[c] : 1.0f);
  }
  static V exp2(V x) { return map([&](int i) { return std::exp2(x.lane[i]); }); }
};

}  // namespace visattn::cpu::VISATTN_CPU_ISA
