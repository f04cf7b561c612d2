// The buffers and views of one check case: random unit-variance inputs rounded to the dtype,
// NaN in every element no view covers (so reading padding shows up), and a poisoned output
// buffer whose untouched parts are verified after the run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "check/case.h"
#include "visattn/attention.h"

namespace visattn::check {

struct CaseData {
  // Storage in 4-byte words, so f32 views are aligned; 16-bit views may start at any element.
  std::vector<uint32_t> input_storage, output_storage, lse_storage;
  std::vector<float> sink_values;
  TensorView q, k, v, out;
  std::optional<TensorView> sinks, lse;
  VarlenBatch batch = VarlenBatch::uniform(0, 0);
  AttentionOptions options;
};

CaseData make_case_data(const CaseSpec& spec);

// Element (token, head, c) of a [tokens, heads, head_dim] view, as float.
float element(const TensorView& view, int64_t token, int64_t head, int64_t c);

// Every element of a [tokens, heads, head_dim] view in (token, head, c) order.
std::vector<float> read_all(const TensorView& view);

// Checks that no element of the output storage outside `out` (and of the lse storage
// outside `lse`) changed. Returns the first violation, or an empty string.
std::string check_untouched(const CaseData& data);

}  // namespace visattn::check
