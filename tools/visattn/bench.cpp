// visattn bench: times backends on a workload suite and reports TFLOP/s beside the machine's
// own GEMM rate, measured in the same run (DESIGN.md, "Performance method").
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "bench_layer.h"
#include "check/case_data.h"
#include "check/oracle.h"
#include "commands.h"
#include "core/half.h"
#include "sgemm.h"
#include "visattn/visattn.h"
#include "workloads.h"

namespace visattn::cli {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMinSecondsPerResult = 0.5;  // keep replaying until this much time has passed
constexpr int kMinReplays = 3, kMaxReplays = 50;
constexpr int64_t kRotateBytes = 64 << 20;     // input sets rotated beyond the caches
constexpr double kErrorCheckBudget = 4e8;      // oracle multiply-adds spent on max_abs_err

struct Result {
  std::string workload, backend;
  DType dtype;
  Workload shape;  // as run (after scaling)
  double scale;
  double ms, tflops;
  std::optional<double> max_abs_err;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

DType parse_dtype(const std::string& name) {
  for (DType d : {DType::f32, DType::f16, DType::bf16}) {
    if (name == dtype_name(d)) return d;
  }
  throw Error(ErrorCode::invalid_value, "--dtype: '" + name + "' is not one of bf16, f16, f32");
}

std::vector<DType> parse_dtypes(const std::string& list) {
  std::vector<DType> dtypes;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) dtypes.push_back(parse_dtype(item));
  if (dtypes.empty()) throw Error(ErrorCode::invalid_value, "--dtype: empty list");
  return dtypes;
}

std::vector<std::string> pick_backends(const std::string& requested) {
  if (requested == "auto") return {auto_backend(DeviceType::cpu)};
  if (requested != "all") return {requested};
  std::vector<std::string> names;
  for (const BackendInfo& b : backends()) {
    if (b.available && b.device == DeviceType::cpu) names.push_back(b.name);
  }
  return names;
}

// Random unit-variance q, k, v and an out tensor for one workload, contiguous.
struct Tensors {
  std::vector<uint32_t> storage;  // 4-byte words, 64 bytes more than q, k, v and out need
  TensorView q, k, v, out;
  VarlenBatch batch = VarlenBatch::uniform(0, 0);

  Tensors(const Workload& w, DType dtype, std::mt19937_64& rng) {
    batch = VarlenBatch::from_lengths(w.seqlens);
    const int64_t T = w.tokens(), per_tensor = T * w.heads * w.head_dim;
    storage.resize((4 * per_tensor * dtype_size(dtype) + 3) / 4 + 1 + 16);
    // Aligned to 64 bytes as PyTorch's CPU allocator aligns tensors (malloc alone gives 16).
    char* base = reinterpret_cast<char*>(storage.data());
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    TensorView* views[] = {&q, &k, &v, &out};
    for (int i = 0; i < 4; ++i) {
      *views[i] = TensorView::contiguous(base + i * per_tensor * dtype_size(dtype), dtype,
                                         {T, w.heads, w.head_dim});
    }
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < 3 * per_tensor; ++i) store_from_float(base, dtype, i, normal(rng));
  }
};

// max|out - fp64 oracle| on the smallest non-empty image (at most two heads), or nothing when
// even that is too costly to check here.
std::optional<double> max_abs_error(const Tensors& t, const Workload& w) {
  const auto& cu = t.batch.cu_seqlens();
  int64_t image = -1;
  for (int64_t i = 0; i < t.batch.num_images(); ++i) {
    const int64_t n = t.batch.lengths()[i];
    if (n > 0 && (image < 0 || n < t.batch.lengths()[image])) image = i;
  }
  if (image < 0) return std::nullopt;
  const int64_t n = t.batch.lengths()[image], heads = std::min(w.heads, 2);
  if (double(n) * n * heads * w.head_dim > kErrorCheckBudget) return std::nullopt;

  check::CaseData slice;
  auto sub = [&](const TensorView& view) {
    TensorView s = view;
    s.data = static_cast<char*>(view.data) + cu[image] * view.stride[0] * dtype_size(view.dtype);
    s.shape[0] = n;
    s.shape[1] = heads;
    return s;
  };
  slice.q = sub(t.q), slice.k = sub(t.k), slice.v = sub(t.v), slice.out = sub(t.out);
  slice.batch = VarlenBatch::uniform(1, n);
  const check::OracleResult ref = check::run_oracle(slice);
  const std::vector<float> out = check::read_all(slice.out);
  double error = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    error = std::max(error, std::isfinite(out[i]) ? std::fabs(out[i] - ref.out[i]) : INFINITY);
  }
  return error;
}

// Median milliseconds of replays after a warm-up, rotating input sets beyond the caches.
double time_backend(std::vector<Tensors>& sets, const std::string& backend) {
  auto run = [&](Tensors& t) { attention(t.q, t.k, t.v, t.out, t.batch, {}, backend); };
  run(sets[0]);  // warm-up; also surfaces argument errors before timing
  std::vector<double> ms;
  const auto start = Clock::now();
  while (ms.size() < size_t(kMaxReplays) &&
         (ms.size() < size_t(kMinReplays) || seconds_since(start) < kMinSecondsPerResult)) {
    Tensors& t = sets[ms.size() % sets.size()];
    const auto replay = Clock::now();
    run(t);
    ms.push_back(1e3 * seconds_since(replay));
  }
  return median(ms);
}

// Picks the FLOPs fraction that makes one backend's run of the suite take about `budget` s.
double auto_scale(const std::vector<Workload>& suite, const std::vector<DType>& dtypes,
                  const std::string& backend, double budget) {
  Workload probe{"probe", "", 2, 64, {512}};
  std::mt19937_64 rng(7);
  std::vector<Tensors> sets;
  sets.emplace_back(probe, dtypes[0], rng);
  const double gflops_per_s = probe.flops() / (time_backend(sets, backend) * 1e-3) / 1e9;
  double suite_gflop = 0;
  for (const Workload& w : suite) suite_gflop += w.flops() / 1e9 * double(dtypes.size());
  // Each result costs a warm-up plus at least kMinReplays replays.
  const double fraction = budget * gflops_per_s / ((1 + kMinReplays) * suite_gflop);
  std::fprintf(stderr, "  %s runs about %.3g GFLOP/s; --scale auto picks %.3g for a %.0f s budget\n",
               backend.c_str(), gflops_per_s, std::min(1.0, fraction), budget);
  return std::min(1.0, fraction);
}

nlohmann::json machine_json() {
  const SystemInfo sys = system_info();
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"hostname", host}, {"date", date}, {"cpu", sys.cpu_model},
          {"cpu_features", sys.cpu_features}, {"threads", sys.num_threads}, {"gpus", sys.gpus},
          {"visattn", sys.version}, {"compiler", sys.compiler}, {"build_type", sys.build_type}};
}

}  // namespace

int run_bench(const BenchOptions& options) {
  double fixed_scale = 1.0;
  if (options.scale != "auto") {
    try {
      fixed_scale = std::stod(options.scale);
    } catch (const std::exception&) {
      fixed_scale = NAN;
    }
    if (!(fixed_scale > 0 && fixed_scale <= 1)) {
      throw Error(ErrorCode::invalid_value,
                  "--scale: '" + options.scale + "' must be a number in (0, 1] or auto");
    }
  }

  const std::string file =
      options.workloads_file.empty() ? default_workloads_file() : options.workloads_file;
  const std::vector<Workload> suite = load_workloads(file);
  const std::vector<DType> dtypes = parse_dtypes(options.dtypes);
  const std::vector<std::string> names = pick_backends(options.backend);
  const int threads = system_info().num_threads;
  std::fprintf(stderr, "visattn bench: %zu workloads from %s, backends:", suite.size(), file.c_str());
  for (const auto& n : names) std::fprintf(stderr, " %s", n.c_str());
  std::fprintf(stderr, "\n  measuring the sgemm ceiling (OpenBLAS, %d threads)...\n", threads);
  const std::optional<double> sgemm = measure_sgemm_gflops(2048, threads);
  if (sgemm) {
    std::fprintf(stderr, "  sgemm: %.1f GFLOP/s\n", *sgemm);
  } else {
    std::fprintf(stderr, "  sgemm: not measured (built without OpenBLAS)\n");
  }
  // Ratio to the ceiling, NaN without one (printed as nan, written as null).
  const double sgemm_gflops = sgemm.value_or(NAN);
  auto ratio = [&](double tflops) { return tflops * 1e3 / sgemm_gflops; };

  std::vector<Result> results;
  std::mt19937_64 rng(1);
  const size_t total = names.size() * suite.size() * dtypes.size();
  size_t done = 0;
  for (const std::string& backend : names) {
    const double scale = options.scale == "auto"
                             ? auto_scale(suite, dtypes, backend, options.budget_seconds)
                             : fixed_scale;
    for (const Workload& full : suite) {
      const Workload w = scale_workload(full, scale);
      for (DType dtype : dtypes) {
        const int64_t set_bytes = 3 * w.tokens() * w.heads * w.head_dim * dtype_size(dtype);
        const int64_t copies = std::clamp<int64_t>(kRotateBytes / std::max<int64_t>(set_bytes, 1), 1, 4);
        std::vector<Tensors> sets;
        for (int64_t c = 0; c < copies; ++c) sets.emplace_back(w, dtype, rng);
        Result r{full.name, backend, dtype, w, scale, 0, 0, std::nullopt};
        r.ms = time_backend(sets, backend);
        r.tflops = w.flops() / (r.ms * 1e-3) / 1e12;
        r.max_abs_err = max_abs_error(sets[0], w);
        results.push_back(r);
        std::fprintf(stderr, "  [%zu/%zu] %-24s %-10s %-4s %5zu images %7lld tokens %10.3f ms "
                     "%9.4f TFLOP/s (%.3f x sgemm)\n", ++done, total, full.name.c_str(),
                     backend.c_str(), dtype_name(dtype), w.seqlens.size(),
                     static_cast<long long>(w.tokens()), r.ms, r.tflops, ratio(r.tflops));
        if (!options.layer || backend == "reference") continue;  // the layer around the oracle says nothing
        // The whole layer (qkv GEMM, rope, this attention, proj GEMM) beside attention alone.
        const LayerTiming layer = time_layer(w, dtype, backend);
        Result l{full.name, "layer:" + backend, dtype, w, scale, layer.ms, layer.flops / (layer.ms * 1e-3) / 1e12,
                 std::nullopt};
        results.push_back(l);
        std::fprintf(stderr, "  [layer] %-24s %-10s %-4s embed %d: %10.3f ms %9.4f TFLOP/s (%.3f x sgemm), "
                     "%.0f tokens/s\n", full.name.c_str(), backend.c_str(), dtype_name(dtype), w.heads * w.head_dim,
                     l.ms, l.tflops, ratio(l.tflops), double(w.tokens()) / (l.ms * 1e-3));
      }
    }
  }

  std::printf("%-24s %-16s %-5s %6s %8s %6s %11s %9s %9s %10s\n", "workload", "backend", "dtype",
              "images", "tokens", "scale", "ms", "TFLOP/s", "x sgemm", "max_err");
  for (const Result& r : results) {
    std::printf("%-24s %-16s %-5s %6zu %8lld %6.3g %11.3f %9.4f %9.3f %10s\n", r.workload.c_str(),
                r.backend.c_str(), dtype_name(r.dtype), r.shape.seqlens.size(),
                static_cast<long long>(r.shape.tokens()), r.scale, r.ms, r.tflops,
                ratio(r.tflops), r.max_abs_err ? std::to_string(*r.max_abs_err).c_str() : "-");
  }

  if (!options.json_file.empty()) {
    nlohmann::json doc = {{"machine", machine_json()},
                          {"ceilings", {{"sgemm_gflops", sgemm ? nlohmann::json(*sgemm) : nlohmann::json(nullptr)},
                                        {"gemm_bf16_tflops", nullptr}}},
                          {"results", nlohmann::json::array()}};
    for (const Result& r : results) {
      doc["results"].push_back({{"workload", r.workload}, {"backend", r.backend},
                                {"dtype", dtype_name(r.dtype)}, {"heads", r.shape.heads},
                                {"head_dim", r.shape.head_dim}, {"images", r.shape.seqlens.size()},
                                {"tokens", r.shape.tokens()}, {"scale", r.scale}, {"ms", r.ms},
                                {"tflops", r.tflops},
                                {"ratio_to_sgemm", sgemm ? nlohmann::json(ratio(r.tflops)) : nlohmann::json(nullptr)},
                                {"max_abs_err", r.max_abs_err ? nlohmann::json(*r.max_abs_err)
                                                              : nlohmann::json(nullptr)}});
    }
    std::ofstream(options.json_file) << doc.dump(1) << "\n";
    std::fprintf(stderr, "  wrote %s\n", options.json_file.c_str());
  }
  return 0;
}

}  // namespace visattn::cli
