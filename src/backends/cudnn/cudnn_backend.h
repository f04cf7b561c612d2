// The `cudnn` backend: cuDNN's fused attention (graph SDPA forward through the cuDNN frontend)
// on the ragged (packed) layout: one call for every image of a batch, each tensor read and
// written through its own strides. cuDNN is loaded at first use, never linked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "visattn/params.h"

namespace visattn::cudnn {

// Empty when a GPU and a usable cuDNN (>= 9.5) are present; otherwise why not. Loads cuDNN
// only when a GPU is present.
std::string unavailable_reason();
// The loaded cuDNN and what the backend runs.
std::string describe();
// Why this backend does not take these (validated) params, or nothing. Pure: reads no memory
// and asks no device, so `auto` and the check harness can ask it before anything runs. Each
// reason starts with a short category and a colon ("window: ..."), which the check harness
// groups skipped cases by.
std::optional<std::string> declines(const AttentionParams& params);
void run(const AttentionParams& params);
// Whether "auto" should try cudnn before cuda for this call: batches whose mean image length
// reaches the measured crossover (auto_table.h: except at head dims 72-80 where the cuda
// backend's sm90 kernel leads), outside stream capture (a capture may not build a plan; cuda
// needs none).
bool auto_prefers(const AttentionParams& params);
// Plans built so far (plan_cache.cpp), for `visattn info` and Python's backends().
int64_t plans_built();
// VarlenBatch::prepare's hook: see the workspace rule in plan_cache.h.
void reserve_workspace(int device);

}  // namespace visattn::cudnn
