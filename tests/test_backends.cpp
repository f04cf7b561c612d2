// Every backend against the fp64 oracle under the one tolerance rule, on random cases and on
// fixed adversarial shapes; plus layout equivalences, determinism, isolation and threading.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "check/case_data.h"
#include "check/run_case.h"
#include "core/backend.h"
#include "visattn/visattn.h"

namespace visattn {
namespace {

// Backends on `device` that run on this machine (GPU backends only where a GPU is present).
std::vector<std::string> available_backends(std::optional<DeviceType> device = std::nullopt) {
  std::vector<std::string> names;
  for (const BackendInfo& b : backends()) {
    if (b.available && (!device || b.device == *device)) names.push_back(b.name);
  }
  return names;
}
std::vector<std::string> cpu_backends() { return available_backends(DeviceType::cpu); }

void expect_pass(const check::CaseSpec& spec, const std::string& backend) {
  if (const std::string reason = check::unsupported_by(backend, spec); !reason.empty()) {
    GTEST_SKIP() << backend << " does not run " << reason;
  }
  const check::CaseResult r = check::run_case(spec, backend);
  if (!r.skipped.empty()) GTEST_SKIP() << backend << " declines " << r.skipped;
  EXPECT_TRUE(r.verdict.passed) << check::describe(spec) << ": " << r.verdict.failure
                                << "\n  reproduce: " << check::reproduce_command(spec, backend);
}

// ---- random suite: every backend, the same cases `visattn check` draws ----
class RandomCases : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RandomCases, MatchOracle) {
  const auto& [backend, index] = GetParam();
  expect_pass(check::make_case(/*seed=*/11, index), backend);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, RandomCases,
                         testing::Combine(testing::ValuesIn(available_backends()), testing::Range(0, 42)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_case" +
                                  std::to_string(std::get<1>(info.param));
                         });

// ---- fixed adversarial shapes ----
struct Adversarial {
  const char* name;
  std::vector<int64_t> lengths;
  int heads, kv_heads, head_dim;
};

// `windows` 64-token windows followed by `tail`.
std::vector<int64_t> windows_then(int windows, std::vector<int64_t> tail) {
  std::vector<int64_t> lengths(windows, 64);
  lengths.insert(lengths.end(), tail.begin(), tail.end());
  return lengths;
}

void PrintTo(const Adversarial& a, std::ostream* os) { *os << a.name; }

const Adversarial kAdversarial[] = {
    {"single_token", {1}, 2, 2, 64},
    {"zero_first_middle_last", {0, 5, 0, 0, 7, 0}, 2, 1, 32},
    {"all_zero_but_one", {0, 0, 0, 1, 0}, 4, 2, 80},
    {"tile_edges", {63, 64, 65, 127, 128, 129}, 1, 1, 72},
    {"primes", {2, 3, 5, 7, 11, 13, 101, 211}, 3, 1, 96},
    {"thousands_of_tiny_segments", std::vector<int64_t>(2000, 1), 2, 2, 32},
    {"tiny_and_large", {1, 509, 1, 1}, 1, 1, 256},
    {"head_dim_128_gqa4", {300, 17}, 8, 2, 128},
    // On an H200 these lengths pick the sm90 kernel's wide key blocks (176 and 192 keys; within
    // 5% of the padded work of 128-key blocks): their block edges.
    {"head_dim_128_key_block_edges", {352, 353, 528, 529}, 2, 2, 128},
    {"head_dim_80_key_block_edges", {192, 193, 384, 385, 576}, 2, 1, 80},
    // These pick the sm90 kernel's three consumer warpgroups (192-row tiles; bench/NOTES.md CUDA
    // 40): tiles of 191-193 rows, 1 and 2 rows past whole ones.
    {"head_dim_64_tall_tile_edges", {191, 192, 193, 384, 385, 576}, 2, 2, 64},
    // A last query tile of 1-5 rows after whole 128-row tiles (a class token): on sm90 an item
    // for one warpgroup, and with 1025/129/257 a last key block of one key (the mma.sync tail).
    {"class_token_tails_head_dim_128", {1025, 129, 132, 133, 257}, 4, 2, 128},
    {"class_token_tails_head_dim_64", {257, 131, 577, 260}, 2, 2, 64},
    // 8.5 MB of bf16 output (17 MB of fp32): the cpu backend streams it past the caches
    // (non-temporal stores), in fp32 straight from its O transposes where out is 64-byte
    // aligned (the separate-input run); in the fused-input run out starts mid-line.
    {"windows_past_8MB_of_output", std::vector<int64_t>(92, 64), 9, 9, 80},
    // The same with 16 heads, a partial tile and a 4-tile image after the windows.
    {"windows_and_tails_past_8MB_of_output", windows_then(26, {100, 256}), 16, 16, 80},
};

class AdversarialShapes
    : public testing::TestWithParam<std::tuple<std::string, Adversarial, DType>> {};

TEST_P(AdversarialShapes, MatchOracle) {
  const auto& [backend, shape, dtype] = GetParam();
  check::CaseSpec spec;
  spec.dtype = dtype;
  spec.lengths = shape.lengths;
  spec.num_heads = shape.heads;
  spec.num_kv_heads = shape.kv_heads;
  spec.head_dim = shape.head_dim;
  for (auto layout : {check::InputLayout::separate, check::InputLayout::fused_qkv}) {
    spec.input_layout = layout;
    spec.index = layout == check::InputLayout::separate ? 0 : 1;  // out 64-byte aligned, or not
    spec.lse = layout == check::InputLayout::fused_qkv;
    expect_pass(spec, backend);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllBackends, AdversarialShapes,
    testing::Combine(testing::ValuesIn(available_backends()), testing::ValuesIn(kAdversarial),
                     testing::Values(DType::f32, DType::f16, DType::bf16)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" +
             dtype_name(std::get<2>(info.param));
    });

// ---- properties of one backend's output (CPU backends: they run on the host data) ----
class BackendProperties : public testing::TestWithParam<std::string> {};

check::CaseSpec property_case(check::InputLayout layout) {
  check::CaseSpec spec;
  spec.dtype = DType::bf16;
  spec.lengths = {37, 0, 64, 5};
  spec.num_heads = 4;
  spec.num_kv_heads = 4;
  spec.head_dim = 80;
  spec.input_layout = layout;
  return spec;
}

TEST_P(BackendProperties, FusedQkvViewEqualsContiguous) {
  check::CaseData separate = check::make_case_data(property_case(check::InputLayout::separate));
  check::CaseData fused = check::make_case_data(property_case(check::InputLayout::fused_qkv));
  // Same values, different storage: copy the separate inputs into the fused views.
  for (auto [from, to] : {std::pair{&separate.q, &fused.q}, std::pair{&separate.k, &fused.k},
                          std::pair{&separate.v, &fused.v}}) {
    for (int64_t t = 0; t < from->shape[0]; ++t)
      for (int64_t h = 0; h < from->shape[1]; ++h)
        std::memcpy(static_cast<uint16_t*>(to->data) + t * to->stride[0] + h * to->stride[1],
                    static_cast<uint16_t*>(from->data) + t * from->stride[0] + h * from->stride[1],
                    from->shape[2] * sizeof(uint16_t));
  }
  attention(separate.q, separate.k, separate.v, separate.out, separate.batch, {}, GetParam());
  attention(fused.q, fused.k, fused.v, fused.out, fused.batch, {}, GetParam());
  EXPECT_EQ(check::read_all(separate.out), check::read_all(fused.out));
}

TEST_P(BackendProperties, RepeatedRunsAreBitwiseIdentical) {
  check::CaseData d = check::make_case_data(property_case(check::InputLayout::separate));
  attention(d.q, d.k, d.v, d.out, d.batch, {}, GetParam());
  const std::vector<float> first = check::read_all(d.out);
  for (int i = 0; i < 5; ++i) {
    attention(d.q, d.k, d.v, d.out, d.batch, {}, GetParam());
    ASSERT_EQ(check::read_all(d.out), first);
  }
}

TEST_P(BackendProperties, OtherImagesDoNotAffectAnImage) {
  check::CaseData d = check::make_case_data(property_case(check::InputLayout::separate));
  attention(d.q, d.k, d.v, d.out, d.batch, {}, GetParam());
  const std::vector<float> before = check::read_all(d.out);
  // Overwrite the keys of image 2 (tokens 37..100); images 0 and 3 must not change.
  for (int64_t t = 37; t < 101; ++t)
    for (int64_t i = 0; i < d.k.shape[1] * d.k.shape[2]; ++i)
      static_cast<uint16_t*>(d.k.data)[t * d.k.stride[0] + i] = 0x3f80;  // 1.0 in bf16
  attention(d.q, d.k, d.v, d.out, d.batch, {}, GetParam());
  const std::vector<float> after = check::read_all(d.out);
  const size_t row = size_t(d.out.shape[1] * d.out.shape[2]);
  EXPECT_TRUE(std::equal(before.begin(), before.begin() + 37 * row, after.begin()));
  EXPECT_TRUE(std::equal(before.begin() + 101 * row, before.end(), after.begin() + 101 * row));
  EXPECT_FALSE(std::equal(before.begin() + 37 * row, before.begin() + 101 * row, after.begin() + 37 * row));
}

TEST_P(BackendProperties, ConcurrentCallsOnDifferentTensors) {
  constexpr int kThreads = 4;
  std::vector<check::CaseData> data;
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < kThreads; ++i) {
    check::CaseSpec spec = property_case(check::InputLayout::separate);
    spec.index = i;
    data.push_back(check::make_case_data(spec));
    attention(data[i].q, data[i].k, data[i].v, data[i].out, data[i].batch, {}, GetParam());
    expected.push_back(check::read_all(data[i].out));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 3; ++rep) {
        attention(data[i].q, data[i].k, data[i].v, data[i].out, data[i].batch, {}, GetParam());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(check::read_all(data[i].out), expected[i]);
}

TEST_P(BackendProperties, ThreadCountDoesNotChangeTheResult) {
  // Without a window every row walks the same key blocks however rows are split into items.
  check::CaseData d = check::make_case_data(property_case(check::InputLayout::fused_qkv));
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3, 8}) {
    AttentionOptions options;
    options.num_threads = threads;
    attention(d.q, d.k, d.v, d.out, d.batch, options, GetParam());
    results.push_back(check::read_all(d.out));
  }
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendProperties, testing::ValuesIn(cpu_backends()));

}  // namespace
}  // namespace visattn
