// Argument validation of attention(): turns user views into AttentionParams or throws.
#pragma once

#include "visattn/attention.h"
#include "visattn/params.h"

#include <cstdint>

namespace visattn {

// Checks of one view, shared by attention() and the layer. Each throws visattn::Error naming
// the argument.
void check_rank_and_strides(const TensorView& t, const char* name);  // shapes, strides >= 0
void check_aligned(const TensorView& t, const char* name);  // data aligned to its elements

// Byte range [begin, end) a view can touch (empty when it has no elements); throws when the
// view reaches past the address space.
struct ByteSpan {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return begin == end; }
  bool overlaps(const ByteSpan& other) const {
    return !empty() && !other.empty() && begin < other.end && other.begin < end;
  }
};
ByteSpan byte_span(const TensorView& t, const char* name);
void check_disjoint(const ByteSpan& output, const char* output_name, const ByteSpan& other,
                    const char* other_name);

// Checks shapes, dtypes, devices, strides, aliasing and options against each other and the
// batch. Reads nothing through the data pointers and writes nothing.
AttentionParams validate_attention_args(const TensorView& q, const TensorView& k,
                                        const TensorView& v, const TensorView& out,
                                        const VarlenBatch& batch,
                                        const AttentionOptions& options);

}  // namespace visattn
