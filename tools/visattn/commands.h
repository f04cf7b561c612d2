// The subcommands of the `visattn` tool. Each returns the process exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace visattn::cli {

struct InfoOptions {
  bool json = false;
};
int run_info(const InfoOptions& options);

struct CheckOptions {
  std::string backend = "auto";
  int cases = 100;
  uint64_t seed = 1;
  std::optional<int> only_case;  // rerun a single case of the suite
  bool verbose = false;          // one line per case
};
int run_check(const CheckOptions& options);

struct BenchOptions {
  std::string backend = "auto";  // a name, "auto" or "all"
  std::string workloads_file;    // empty: the public suite ../shared/workloads.json
  std::string scale = "1";       // fraction of each workload's FLOPs, or "auto"
  double budget_seconds = 60;    // what --scale auto aims the whole run at
  std::string dtypes = "bf16";   // comma-separated
  std::string json_file;         // empty: no JSON written
  bool layer = true;             // also time the whole attention layer (rows layer:<backend>)
};
int run_bench(const BenchOptions& options);

}  // namespace visattn::cli
