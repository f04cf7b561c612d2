#include "check/case.h"

#include <algorithm>
#include <random>
#include <sstream>

namespace visattn::check {

namespace {

// Lengths that break tiling and masking code: empty, single, primes, tile edges.
constexpr int64_t kAdversarialLengths[] = {0,   1,   2,   3,   5,   7,   13,  17,  31,  61,  63,  64,  65,  97,  127,
                                           128, 129, 175, 176, 177, 191, 192, 193, 255, 257, 353, 385, 509};
constexpr int64_t kLongLengths[] = {4096, 4093, 2049, 1023, 3001, 1600};
constexpr double kCaseBudget = 4e7;       // q·k multiply-adds of an ordinary case
constexpr double kLongCaseBudget = 6e8;   // ... of a long case (one in 25)

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T, size_t N>
T pick(std::mt19937_64& rng, const T (&values)[N]) {
  return values[std::uniform_int_distribution<size_t>(0, N - 1)(rng)];
}

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

bool chance(std::mt19937_64& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// Keys a query sees, on average bounded by the window.
double keys_per_query(const CaseSpec& s, int64_t length) {
  if (s.window_left < 0 && s.window_right < 0) return double(length);
  const int64_t left = s.window_left < 0 ? length : s.window_left;
  const int64_t right = s.window_right < 0 ? length : s.window_right;
  return double(std::min<int64_t>(length, left + right + 1));
}

}  // namespace

const char* layout_name(InputLayout layout) {
  switch (layout) {
    case InputLayout::separate: return "separate";
    case InputLayout::fused_qkv: return "fused_qkv";
    case InputLayout::padded_tokens: return "padded_tokens";
    case InputLayout::head_major: return "head_major";
  }
  return "?";
}

const char* layout_name(OutputLayout layout) {
  switch (layout) {
    case OutputLayout::contiguous: return "contiguous";
    case OutputLayout::padded_tokens: return "padded_tokens";
    case OutputLayout::head_major: return "head_major";
  }
  return "?";
}

double case_cost(const CaseSpec& s) {
  double cost = 0;
  for (int64_t length : s.lengths) cost += double(length) * keys_per_query(s, length);
  return cost * s.num_heads * s.head_dim;
}

CaseSpec make_case(uint64_t seed, int index) {
  std::mt19937_64 rng(mix(mix(seed) ^ uint64_t(index)));
  CaseSpec s;
  s.seed = seed;
  s.index = index;
  constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};
  s.dtype = kDTypes[index % 3];
  s.head_dim = kCheckedHeadDims[(index / 3) % std::size(kCheckedHeadDims)];

  const bool long_case = index % 25 == 24;
  if (long_case) {
    s.num_kv_heads = 1;
    s.num_heads = int(uniform(rng, 1, 2));
    const int images = int(uniform(rng, 1, 2));
    for (int i = 0; i < images; ++i) s.lengths.push_back(pick(rng, kLongLengths));
  } else {
    s.num_kv_heads = int(pick(rng, {1, 1, 2, 4}));
    s.num_heads = s.num_kv_heads * int(pick(rng, {1, 1, 2, 3, 4}));
    const bool many = chance(rng, 0.4);
    const int images = many ? int(uniform(rng, 16, 64)) : int(uniform(rng, 1, 8));
    const int64_t longest = many ? 129 : 700;
    for (int i = 0; i < images; ++i) {
      const int64_t adversarial = pick(rng, kAdversarialLengths);
      s.lengths.push_back(chance(rng, 0.5) && adversarial <= longest ? adversarial
                                                                     : uniform(rng, 0, longest));
    }
  }

  if (chance(rng, 0.25)) {
    constexpr int64_t kWindowSides[] = {-1, 0, 1, 7, 32, 100};
    do {
      s.window_left = pick(rng, kWindowSides);
      s.window_right = pick(rng, kWindowSides);
    } while (s.window_left < 0 && s.window_right < 0);
  }
  s.sinks = chance(rng, 0.25);
  s.lse = chance(rng, 0.5);
  if (chance(rng, 0.2)) {
    // Occasionally large logits (scale 8 on unit inputs) to exercise the running max.
    s.softmax_scale = chance(rng, 0.3) ? 8.0 : std::uniform_real_distribution<double>(0.02, 0.5)(rng);
  }
  s.input_layout = pick(rng, {InputLayout::separate, InputLayout::fused_qkv,
                              InputLayout::padded_tokens, InputLayout::head_major});
  s.output_layout = pick(rng, {OutputLayout::contiguous, OutputLayout::padded_tokens,
                               OutputLayout::head_major});

  // Fit the budget: fewer heads, then fewer images, then a window on what is left.
  const double budget = long_case ? kLongCaseBudget : kCaseBudget;
  while (case_cost(s) > budget && s.num_heads > s.num_kv_heads) s.num_heads -= s.num_kv_heads;
  while (case_cost(s) > budget && s.lengths.size() > 1) s.lengths.pop_back();
  if (case_cost(s) > budget) {
    const int64_t side = std::max<int64_t>(
        1, int64_t(budget / (double(s.lengths[0]) * s.num_heads * s.head_dim) / 2));
    s.window_left = s.window_left < 0 ? side : std::min(s.window_left, side);
    s.window_right = s.window_right < 0 ? side : std::min(s.window_right, side);
  }
  return s;
}

std::string describe(const CaseSpec& s) {
  std::ostringstream os;
  int64_t tokens = 0;
  for (int64_t length : s.lengths) tokens += length;
  const auto [lo, hi] = std::minmax_element(s.lengths.begin(), s.lengths.end());
  os << dtype_name(s.dtype) << " d=" << s.head_dim << " heads " << s.num_heads << "/"
     << s.num_kv_heads << " images " << s.lengths.size() << " tokens " << tokens << " ("
     << *lo << ".." << *hi << ")";
  if (s.window_left >= 0 || s.window_right >= 0) {
    os << " window(" << s.window_left << "," << s.window_right << ")";
  }
  if (s.softmax_scale) os << " scale " << *s.softmax_scale;
  if (s.sinks) os << " sinks";
  if (s.lse) os << " lse";
  os << " in:" << layout_name(s.input_layout) << " out:" << layout_name(s.output_layout);
  return os.str();
}

}  // namespace visattn::check
