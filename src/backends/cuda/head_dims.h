// The padded head dims each CUDA kernel is compiled for: the one table that the host's
// rounding, the runtime-to-template dispatch of each kernel and the sm90 kernel's eligibility
// all read, so that adding a head dim is one edit.
#pragma once

#include <type_traits>

namespace visattn::cuda {

template <int... Dims>
struct HeadDimList {
  static constexpr int kDims[] = {Dims...};  // ascending
  static constexpr bool has(int d) { return ((d == Dims) || ...); }
  // f(std::integral_constant<int, D>{}) for the D equal to d; `otherwise` when there is none.
  template <class R, class F>
  static R visit(int d, R otherwise, F&& f) {
    R result = otherwise;
    (void)((d == Dims && (result = f(std::integral_constant<int, Dims>{}), true)) || ...);
    return result;
  }
};

// The mma.sync kernel (sm80+): a head dim runs at the smallest of these that holds it.
using Sm80HeadDims = HeadDimList<32, 64, 80, 96, 128, 256>;
// The wgmma kernel (sm90a), for the padded head dims it has.
using Sm90HeadDims = HeadDimList<64, 80, 96, 128>;
// Its keys per block: 128, or this wider block where the lengths pad it to little more work
// (kernel_for): at head dim 128 the most keys whose S, P and O the consumers' registers hold
// without spills, else 192 (at 64 only where it saves work: bench/NOTES.md CUDA entry 18).
constexpr int kSm90Keys = 128;
constexpr int sm90_wide_keys(int head_dim_pad) { return head_dim_pad == 128 ? 176 : 192; }
// An image's last key block of at most this many keys (a class token after whole blocks) is
// added by mma.sync, not as a block of wgmmas: clip (577 tokens, 3 blocks of 192 and one key)
// ran 10% faster with it on the CUDA cores (bench/NOTES.md CUDA entry 21), about 1% faster
// again by mma.sync (entry 38).
constexpr int kSm90TailKeys = 4;

}  // namespace visattn::cuda
