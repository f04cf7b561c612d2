// The process's cuDNN plans (one per PlanKey), one cuDNN handle and one workspace per device,
// all behind one lock. The only interface to the file that includes the cuDNN frontend.
//
// Workspace rule: a device's workspace only grows, and only in calls that are not being
// captured: in VarlenBatch::prepare (to the largest workspace any plan built so far needs) and
// in the eager call that builds a plan needing more. Building a plan is refused while
// capturing, so a captured call never allocates; a grown workspace keeps its old buffer alive,
// since a graph captured earlier may still point at it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "backends/cudnn/plan_key.h"
#include "backends/cudnn/ragged_indices.h"

namespace visattn::cudnn {

// The device pointers of one call.
struct CallTensors {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;                              // null when the key has no lse
  const int32_t* seq_len;                  // key.batch entries; null for a dense key
  const int64_t* offsets[kRaggedTensors];  // key.batch + 1 entries each; null for a dense key
};

// Finds the plan of `key` or builds it (refused while `capturing`, with an error that says to
// warm up), makes sure the device's workspace holds it, runs `before_execute` (the launch that
// writes the index tensors) and executes the plan on `stream`. The caller has made
// key.device current. Throws visattn::Error; nothing is written to `out` before the plan exists.
void run_plan(const PlanKey& key, const CallTensors& tensors, CUstream_st* stream, bool capturing,
              const std::function<void()>& before_execute);

// Whether the dense plan `key` (key.dense) exists or builds now, on a device made current: no
// when cuDNN cannot build it, or when its image length is new and dense_length_limit() lengths
// have dense plans already (dense_batch.h). The caller then runs the ragged plan. Not while
// capturing.
bool dense_plan_available(const PlanKey& key);

// Whether a call of this image length may still get dense plans: its length has them already,
// or fewer than dense_length_limit() lengths do. auto asks before it weighs dense plans against
// the cuda kernel, so that a length past the limit is weighed as the ragged call it will run.
bool dense_length_admitted(int64_t length);

// Plans built so far in this process (failed builds not counted).
int64_t plans_built();

// "1.32.0": the cuDNN frontend this build was compiled with.
std::string frontend_version();

// Runs the frontend's checks of `key`'s graph (shapes, strides, alignment, the SDPA support
// surface of the loaded cuDNN) for a GPU of `sm_version`, without a GPU, for every SDPA
// implementation run_plan may build with; empty when they pass. Building a plan still needs
// the GPU. For tests.
std::string validate_graph(const PlanKey& key, int sm_version);

// VarlenBatch::prepare on `device`: grows that device's workspace to the largest any plan
// built so far needs (nothing before the first plan).
void reserve_workspace(int device);

}  // namespace visattn::cudnn
