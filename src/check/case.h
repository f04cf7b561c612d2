// Random attention cases for `visattn check` and the tests: one spec per (seed, index), so
// any single case can be rebuilt from the two numbers printed with a failure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "visattn/attention.h"

namespace visattn::check {

// Where q, k and v live: separate contiguous tensors, views into one fused
// [tokens, heads + 2 * kv_heads, head_dim] buffer, rows padded past heads * head_dim, or
// head-major [heads, tokens, head_dim] storage.
enum class InputLayout { separate, fused_qkv, padded_tokens, head_major };
// Where out lives: contiguous, rows padded (padding must stay untouched), or head-major.
enum class OutputLayout { contiguous, padded_tokens, head_major };

const char* layout_name(InputLayout layout);
const char* layout_name(OutputLayout layout);

struct CaseSpec {
  uint64_t seed = 0;
  int index = 0;
  DType dtype = DType::f32;
  int num_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 64;
  std::vector<int64_t> lengths;  // tokens per image
  std::optional<double> softmax_scale;
  int64_t window_left = -1, window_right = -1;
  bool sinks = false;
  bool lse = false;
  InputLayout input_layout = InputLayout::separate;
  OutputLayout output_layout = OutputLayout::contiguous;
};

// The head dims every backend is checked on.
inline constexpr int kCheckedHeadDims[] = {32, 64, 72, 80, 96, 128, 256};

// Case `index` of the suite seeded by `seed`. dtype and head_dim cycle so that every
// 21 consecutive cases cover every pair; the rest is drawn at random within a work budget.
CaseSpec make_case(uint64_t seed, int index);

// Multiply-adds of q·k per case (what the budget bounds).
double case_cost(const CaseSpec& spec);

// One line: "bf16 d=72 heads 8/2 images 12 tokens 901 (0..129) window(7,-1) sinks lse fused_qkv".
std::string describe(const CaseSpec& spec);

}  // namespace visattn::check
