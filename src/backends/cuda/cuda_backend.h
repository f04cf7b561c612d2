// The `cuda` backend: varlen flash attention on NVIDIA GPUs (sm80 and newer), one launch for
// every image and head of a batch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "visattn/params.h"
#include "visattn/varlen_batch.h"

namespace visattn::cuda {

// VarlenBatch::prepare / update_device for cuda devices.
std::shared_ptr<DeviceMetadata> prepare(const VarlenBatch& batch, int device, void* stream);
void update(DeviceMetadata& prepared, const VarlenBatch& batch, void* stream);
int metadata_device(const DeviceMetadata& prepared);

void run(const AttentionParams& params);
bool runs_sm90(const AttentionParams& params);  // whether run() would take the sm90 (wgmma) kernel
std::string unavailable_reason();  // empty when a usable GPU is present
std::string describe();            // the GPUs and the kernel that runs
std::vector<std::string> gpu_names();

}  // namespace visattn::cuda
