// A check case's buffers mirrored on a GPU, for backends whose tensors live there. The views
// keep their offsets and strides; outputs are copied back for judging (poison included, so the
// untouched-memory check covers the GPU run too).
#pragma once

#include "check/case_data.h"

namespace visattn::check {

// True when this build can run cases on a GPU.
bool device_cases_supported();

class DeviceCase {
 public:
  DeviceCase(const CaseData& host, int device);
  ~DeviceCase();
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;

  TensorView q, k, v, out;
  AttentionOptions options;

  void copy_outputs_to(CaseData& host) const;

 private:
  void* input_ = nullptr;
  void* output_ = nullptr;
  void* lse_ = nullptr;
  void* sinks_ = nullptr;
};

}  // namespace visattn::check
