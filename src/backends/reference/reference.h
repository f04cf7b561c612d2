// The reference backend: plain loops with fp64 accumulation, the test oracle of every other
// backend. Correct on every input the API accepts; not fast.
#pragma once

#include "visattn/params.h"

namespace visattn::reference {

void run(const AttentionParams& params);

}  // namespace visattn::reference
