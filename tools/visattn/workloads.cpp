#include "workloads.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "visattn/error.h"

namespace visattn::cli {

namespace {
[[noreturn]] void bad_suite(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::invalid_value, "workloads file " + path + ": " + what);
}
}  // namespace

double Workload::flops() const {
  double sum = 0;
  for (int64_t s : seqlens) sum += double(s) * double(s);
  return 4.0 * sum * heads * head_dim;
}

int64_t Workload::tokens() const {
  int64_t total = 0;
  for (int64_t s : seqlens) total += s;
  return total;
}

std::vector<Workload> load_workloads(const std::string& path) {
  std::ifstream file(path);
  if (!file) bad_suite(path, "cannot be opened (pass --workloads FILE)");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(file);
  } catch (const nlohmann::json::exception& e) {
    bad_suite(path, std::string("is not valid JSON: ") + e.what());
  }
  if (!doc.is_object() || !doc.contains("workloads") || !doc["workloads"].is_array()) {
    bad_suite(path, "needs an object with a \"workloads\" array");
  }
  std::vector<Workload> suite;
  for (size_t i = 0; i < doc["workloads"].size(); ++i) {
    const auto& item = doc["workloads"][i];
    const std::string where = "workloads[" + std::to_string(i) + "]";
    try {
      Workload w;
      w.name = item.at("name").get<std::string>();
      w.model = item.value("model", "");
      w.heads = item.at("heads").get<int>();
      w.head_dim = item.at("head_dim").get<int>();
      w.seqlens = item.at("seqlens").get<std::vector<int64_t>>();
      if (w.heads < 1 || w.head_dim < 1) bad_suite(path, where + ": heads and head_dim must be >= 1");
      for (int64_t s : w.seqlens) {
        if (s < 0) bad_suite(path, where + " (" + w.name + "): seqlens must be >= 0");
      }
      suite.push_back(std::move(w));
    } catch (const nlohmann::json::exception& e) {
      bad_suite(path, where + ": " + e.what());
    }
  }
  return suite;
}

std::string default_workloads_file() {
  for (const std::filesystem::path& candidate :
       {std::filesystem::path("../shared/workloads.json"),
        std::filesystem::path(VISATTN_SOURCE_DIR) / "../shared/workloads.json"}) {
    if (std::filesystem::exists(candidate)) return candidate.lexically_normal().string();
  }
  return "../shared/workloads.json";
}

Workload scale_workload(const Workload& w, double fraction) {
  if (fraction >= 1.0 || w.seqlens.empty()) return w;
  const int64_t images = static_cast<int64_t>(w.seqlens.size());
  const int64_t keep = std::max<int64_t>(1, std::llround(double(images) * fraction));
  const double length_factor = std::sqrt(std::min(1.0, fraction * double(images) / double(keep)));
  Workload scaled = w;
  scaled.seqlens.clear();
  for (int64_t i = 0; i < keep; ++i) {
    const int64_t s = w.seqlens[i * images / keep];
    scaled.seqlens.push_back(s == 0 ? 0 : std::max<int64_t>(1, std::llround(s * length_factor)));
  }
  return scaled;
}

}  // namespace visattn::cli
