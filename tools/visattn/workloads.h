// Benchmark workloads: the public suite (../shared/workloads.json) or any file of its form,
// {"workloads": [{"name", "heads", "head_dim", "seqlens": [...], "model"?}]}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace visattn::cli {

struct Workload {
  std::string name;
  std::string model;
  int heads = 0;
  int head_dim = 0;
  std::vector<int64_t> seqlens;

  double flops() const;  // 4 * sum(s^2) * heads * head_dim, forward, non-causal
  int64_t tokens() const;
};

// Reads and validates a suite file; errors name the file, the workload and the field.
std::vector<Workload> load_workloads(const std::string& path);

// The default suite file: ../shared/workloads.json from the working directory or the source tree.
std::string default_workloads_file();

// A workload with about `fraction` of the FLOPs: it keeps every n-th image while images last
// (so segment lengths, e.g. 64-token windows, stay as they are), then shrinks lengths.
Workload scale_workload(const Workload& w, double fraction);

}  // namespace visattn::cli
