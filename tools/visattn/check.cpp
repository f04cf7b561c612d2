// visattn check: random varlen cases against the fp64 oracle, judged by the tolerance rule.
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "check/run_case.h"
#include "commands.h"
#include "visattn/visattn.h"

namespace visattn::cli {

namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

// What the cases of one run exercised, so a passing run shows what it proves.
struct Coverage {
  std::set<std::string> dtypes;
  std::set<int> head_dims;
  int64_t min_images = INT64_MAX, max_images = 0, min_length = INT64_MAX, max_length = 0;
  int zero = 0, one = 0, prime = 0, tile_edge = 0, gqa = 0, window = 0, sinks = 0, lse = 0,
      strided_in = 0, strided_out = 0, scaled = 0;

  void add(const check::CaseSpec& s) {
    dtypes.insert(dtype_name(s.dtype));
    head_dims.insert(s.head_dim);
    min_images = std::min<int64_t>(min_images, s.lengths.size());
    max_images = std::max<int64_t>(max_images, s.lengths.size());
    bool has[4] = {};
    for (int64_t n : s.lengths) {
      min_length = std::min(min_length, n);
      max_length = std::max(max_length, n);
      has[0] |= n == 0;
      has[1] |= n == 1;
      has[2] |= is_prime(n);
      has[3] |= n == 63 || n == 65 || n == 127 || n == 129;
    }
    zero += has[0], one += has[1], prime += has[2], tile_edge += has[3];
    gqa += s.num_heads != s.num_kv_heads;
    window += s.window_left >= 0 || s.window_right >= 0;
    sinks += s.sinks;
    lse += s.lse;
    strided_in += s.input_layout != check::InputLayout::separate;
    strided_out += s.output_layout != check::OutputLayout::contiguous;
    scaled += s.softmax_scale.has_value();
  }

  std::string summary() const {
    std::ostringstream os;
    os << "coverage: dtypes";
    for (const auto& d : dtypes) os << " " << d;
    os << "; head_dims";
    for (int d : head_dims) os << " " << d;
    os << "; images " << min_images << ".." << max_images << "; lengths " << min_length << ".."
       << max_length << "\n          cases with: zero-length " << zero << ", length-1 " << one
       << ", prime " << prime << ", 63/65/127/129 " << tile_edge << ", gqa " << gqa
       << ", window " << window << ", sinks " << sinks << ", lse " << lse << ", custom scale "
       << scaled << ", strided inputs " << strided_in << ", strided out " << strided_out;
    return os.str();
  }
};

}  // namespace

int run_check(const CheckOptions& options) {
  // "auto" is passed through, so the check exercises auto selection itself.
  const std::string& backend = options.backend;
  const std::string shown =
      backend == "auto" ? "auto (-> " + auto_backend(DeviceType::cpu) + ")" : backend;
  const int first = options.only_case.value_or(0);
  const int last = options.only_case ? first + 1 : options.cases;
  std::printf("visattn check: backend %s, seed %llu, cases %d..%d\n", shown.c_str(),
              static_cast<unsigned long long>(options.seed), first, last - 1);
  std::fflush(stdout);

  Coverage coverage;
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, int> skip_reasons;       // reason (declines: its category) -> cases
  std::map<std::string, std::string> declined;   // category -> the first full reason
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  for (int index = first; index < last; ++index) {
    const check::CaseSpec spec = check::make_case(options.seed, index);
    if (const std::string reason = check::unsupported_by(backend, spec); !reason.empty()) {
      ++skipped;
      ++skip_reasons[reason];
      continue;
    }
    const check::CaseResult r = check::run_case(spec, backend);
    if (!r.skipped.empty()) {  // declined before running (never an error it raised)
      ++skipped;
      const std::string category = check::skip_category(r.skipped);
      ++skip_reasons[category];
      declined.emplace(category, r.skipped);
      if (options.verbose || options.only_case) {
        std::printf("skip case %d: %s: %s\n", index, check::describe(spec).c_str(), r.skipped.c_str());
      }
      continue;
    }
    coverage.add(spec);
    if (r.verdict.passed) {
      ++passed;
      if (options.verbose || options.only_case) {
        std::printf("ok   case %d: %s: err %.3g <= %.3g\n", index, check::describe(spec).c_str(),
                    r.verdict.max_error, r.verdict.bound);
      }
    } else {
      ++failed;
      std::printf("FAIL case %d: %s: %s\n     reproduce: %s\n", index,
                  check::describe(spec).c_str(), r.verdict.failure.c_str(),
                  check::reproduce_command(spec, backend).c_str());
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(10)) {  // progress on long runs
      std::fprintf(stderr, "  ... %d/%d cases, %d failed, %.0f s\n", index - first + 1,
                   last - first, failed, std::chrono::duration<double>(now - start).count());
      last_report = now;
    }
    std::fflush(stdout);
  }
  std::printf("%s\n", coverage.summary().c_str());
  if (skipped) {
    std::string reasons;
    for (const auto& [reason, count] : skip_reasons) {
      reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(count);
    }
    std::printf("skipped: %d cases the backend does not support or declines (%s)\n", skipped,
                reasons.c_str());
    for (const auto& [category, reason] : declined) std::printf("  e.g. %s\n", reason.c_str());
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  } else {
    std::printf("%d passed, %d failed\n", passed, failed);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace visattn::cli
