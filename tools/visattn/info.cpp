#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "visattn/visattn.h"

namespace visattn::cli {

namespace {

nlohmann::json backend_json(const BackendInfo& b) {
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType d : b.dtypes) dtypes.push_back(dtype_name(d));
  return {{"name", b.name},
          {"description", b.description},
          {"device", b.device == DeviceType::cpu ? "cpu" : "cuda"},
          {"available", b.available},
          {"unavailable_reason", b.unavailable_reason},
          {"dtypes", dtypes},
          {"head_dims", b.head_dims},
          {"max_head_dim", b.max_head_dim},
          {"detail", b.detail},
          {"plans_built", b.plans_built}};
}

std::string auto_choice(DeviceType device) {
  try {
    return auto_backend(device);
  } catch (const Error& e) {
    return std::string("none (") + e.what() + ")";
  }
}

}  // namespace

int run_info(const InfoOptions& options) {
  const SystemInfo sys = system_info();
  const std::vector<BackendInfo> all = backends();
  if (options.json) {
    nlohmann::json j = {
        {"version", sys.version},
        {"build", {{"compiler", sys.compiler}, {"build_type", sys.build_type},
                   {"sanitizers", sys.sanitizers}, {"cuda", sys.cuda_compiled}}},
        {"cpu", {{"model", sys.cpu_model}, {"features", sys.cpu_features},
                 {"threads", sys.num_threads}}},
        {"gpus", sys.gpus},
        {"auto", {{"cpu", auto_choice(DeviceType::cpu)}, {"cuda", auto_choice(DeviceType::cuda)}}},
        {"layer_gemm", {{"cpu", VisionAttentionLayer::gemm_detail(DeviceType::cpu)},
                        {"cuda", VisionAttentionLayer::gemm_detail(DeviceType::cuda)}}},
        {"backends", nlohmann::json::array()}};
    for (const BackendInfo& b : all) j["backends"].push_back(backend_json(b));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("visattn %s (%s, %s%s%s)\n", sys.version.c_str(), sys.compiler.c_str(),
              sys.build_type.c_str(), sys.sanitizers.empty() ? "" : ", sanitizers ",
              sys.sanitizers.c_str());
  std::printf("cuda:     %s\n", sys.cuda_compiled ? "compiled in" : "not compiled in");
  std::printf("cpu:      %s, %d threads\n", sys.cpu_model.c_str(), sys.num_threads);
  std::string features;
  for (const std::string& f : sys.cpu_features) features += " " + f;
  std::printf("features:%s\n", features.empty() ? " (none detected)" : features.c_str());
  std::printf("gpus:     %s\n", sys.gpus.empty() ? "none" : "");
  for (const std::string& g : sys.gpus) std::printf("  %s\n", g.c_str());
  std::printf("backends:\n");
  for (const BackendInfo& b : all) {
    std::printf("  %-10s %-4s %s%s\n", b.name.c_str(), b.device == DeviceType::cpu ? "cpu" : "cuda",
                b.available ? "available: " : "unavailable: ",
                b.available ? b.description.c_str() : b.unavailable_reason.c_str());
    if (b.available && !b.detail.empty()) std::printf("  %-15s %s\n", "", b.detail.c_str());
  }
  std::printf("auto:     cpu -> %s; cuda -> %s\n", auto_choice(DeviceType::cpu).c_str(),
              auto_choice(DeviceType::cuda).c_str());
  std::printf("layer:    GEMMs on cpu: %s; on cuda: %s\n", VisionAttentionLayer::gemm_detail(DeviceType::cpu).c_str(),
              VisionAttentionLayer::gemm_detail(DeviceType::cuda).c_str());
  return 0;
}

}  // namespace visattn::cli
