#include "check/device_case.h"

#include "visattn/error.h"

#if VISATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace visattn::check {

#if VISATTN_WITH_CUDA

namespace {
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::internal, std::string("check: ") + what + ": " + cudaGetErrorString(status));
  }
}

template <typename Word>
void* upload(const std::vector<Word>& host) {
  void* device = nullptr;
  check(cudaMalloc(&device, std::max<size_t>(host.size() * sizeof(Word), 1)), "cudaMalloc");
  check(cudaMemcpy(device, host.data(), host.size() * sizeof(Word), cudaMemcpyHostToDevice), "cudaMemcpy");
  return device;
}

// The view `v` (into host storage `base`) moved onto `device_base`.
TensorView moved(TensorView v, const void* base, void* device_base, int device) {
  v.data = static_cast<char*>(device_base) +
           (static_cast<const char*>(v.data) - static_cast<const char*>(base));
  v.device = {DeviceType::cuda, device};
  return v;
}
}  // namespace

bool device_cases_supported() { return true; }

DeviceCase::DeviceCase(const CaseData& host, int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  input_ = upload(host.input_storage);
  output_ = upload(host.output_storage);
  q = moved(host.q, host.input_storage.data(), input_, device);
  k = moved(host.k, host.input_storage.data(), input_, device);
  v = moved(host.v, host.input_storage.data(), input_, device);
  out = moved(host.out, host.output_storage.data(), output_, device);
  options = host.options;
  if (host.lse) {
    lse_ = upload(host.lse_storage);
    options.lse = moved(*host.lse, host.lse_storage.data(), lse_, device);
  }
  if (host.sinks) {
    sinks_ = upload(host.sink_values);
    options.sinks = moved(*host.sinks, host.sink_values.data(), sinks_, device);
  }
}

DeviceCase::~DeviceCase() {
  for (void* buffer : {input_, output_, lse_, sinks_}) {
    if (buffer) cudaFree(buffer);
  }
}

void DeviceCase::copy_outputs_to(CaseData& host) const {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaMemcpy(host.output_storage.data(), output_, host.output_storage.size() * 4,
                   cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (lse_) {
    check(cudaMemcpy(host.lse_storage.data(), lse_, host.lse_storage.size() * 4,
                     cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
}

#else

bool device_cases_supported() { return false; }
DeviceCase::DeviceCase(const CaseData&, int) {
  throw Error(ErrorCode::backend_unavailable, "check: this build has no CUDA support");
}
DeviceCase::~DeviceCase() = default;
void DeviceCase::copy_outputs_to(CaseData&) const {}

#endif

}  // namespace visattn::check
