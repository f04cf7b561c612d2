// Argument validation of attention(): turns user views into AttentionParams or throws.
#pragma once

#include "visattn/attention.h"
#include "visattn/params.h"

namespace visattn {

// Checks shapes, dtypes, devices, strides, aliasing and options against each other and the
// batch. Reads nothing through the data pointers and writes nothing.
AttentionParams validate_attention_args(const TensorView& q, const TensorView& k,
                                        const TensorView& v, const TensorView& out,
                                        const VarlenBatch& batch,
                                        const AttentionOptions& options);

}  // namespace visattn
