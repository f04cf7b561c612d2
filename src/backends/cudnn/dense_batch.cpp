#include "backends/cudnn/dense_batch.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

namespace visattn::cudnn {

int64_t dense_length_limit() {
  static const int64_t limit = [] {
    const char* set = std::getenv("VISATTN_CUDNN_DENSE_LENGTHS");
    return set && *set ? std::max<int64_t>(0, std::atoll(set)) : kDenseLengths;
  }();
  return limit;
}

int64_t uniform_length(std::span<const int32_t> cu_seqlens) {
  if (cu_seqlens.size() < 2) return 0;
  const int64_t length = cu_seqlens[1] - cu_seqlens[0];
  for (size_t i = 1; i + 1 < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i + 1] - cu_seqlens[i] != length) return 0;
  }
  return length;
}

std::vector<int64_t> dense_calls(int64_t images) {
  std::vector<int64_t> calls;
  for (uint64_t rest = uint64_t(images); rest > 0; rest -= std::bit_floor(rest)) {
    calls.push_back(int64_t(std::bit_floor(rest)));
  }
  return calls;
}

bool token_major(int64_t token_stride, int64_t head_stride, int heads, int64_t length) {
  return heads == 1 || length * token_stride >= heads * head_stride;
}

}  // namespace visattn::cudnn
