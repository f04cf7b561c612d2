// The cudnn backend's host side, on any machine (no GPU needed): the ragged index math, the
// plan key, what it declines and the messages, and loading libcudnn.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <vector>

#include "backends/cudnn/auto_table.h"
#include "backends/cudnn/cudnn_backend.h"
#include "backends/cudnn/dense_batch.h"
#include "backends/cudnn/library.h"
#include "backends/cudnn/plan_cache.h"
#include "backends/cudnn/plan_key.h"
#include "backends/cudnn/ragged_indices.h"
#include "check/case_data.h"
#include "check/run_case.h"
#include "expect_error.h"
#include "visattn/visattn.h"

namespace visattn::cudnn {
namespace {

// ---- ragged index math (the kernel runs ragged_indices_host's loop body per entry) ----

struct HostIndices {
  std::vector<int32_t> seq_len;
  std::vector<std::vector<int64_t>> offsets;
};

HostIndices compute(const std::vector<int32_t>& cu_padded, int64_t batch,
                    const int64_t (&strides)[kRaggedTensors]) {
  HostIndices h{std::vector<int32_t>(batch, -1),
                std::vector<std::vector<int64_t>>(kRaggedTensors, std::vector<int64_t>(batch + 1, -1))};
  RaggedIndexArgs args{};
  args.cu_seqlens = cu_padded.data();
  args.batch = batch;
  args.seq_len = h.seq_len.data();
  for (int t = 0; t < kRaggedTensors; ++t) {
    args.offsets[t] = h.offsets[t].data();
    args.token_stride[t] = strides[t];
  }
  ragged_indices_host(args);
  return h;
}

// ---- uniform batches on dense plans (dense_batch.h) ----

TEST(CudnnDense, UniformBatchesSplitIntoPowersOfTwo) {
  EXPECT_EQ(uniform_length(std::vector<int32_t>{0, 577, 1154, 1731}), 577);
  EXPECT_EQ(uniform_length(std::vector<int32_t>{0, 577, 1154, 1730}), 0);  // one image shorter
  EXPECT_EQ(uniform_length(std::vector<int32_t>{0, 0, 0}), 0);             // empty images
  EXPECT_EQ(uniform_length(std::vector<int32_t>{0}), 0);                   // no image
  EXPECT_EQ(uniform_length(std::vector<int32_t>{0, 1}), 1);
  EXPECT_EQ(dense_calls(64), (std::vector<int64_t>{64}));
  EXPECT_EQ(dense_calls(63), (std::vector<int64_t>{32, 16, 8, 4, 2, 1}));
  EXPECT_EQ(dense_calls(5), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(dense_calls(1000), (std::vector<int64_t>{512, 256, 128, 64, 32, 8}));
  EXPECT_TRUE(dense_calls(0).empty());
  if (!std::getenv("VISATTN_CUDNN_DENSE_LENGTHS")) EXPECT_EQ(dense_length_limit(), kDenseLengths);
}

TEST(CudnnDense, OnlyTokenMajorLayoutsAreDense) {
  EXPECT_TRUE(token_major(3 * 16 * 64, 64, 16, 577));   // fused qkv [tokens, 3, heads, d]
  EXPECT_TRUE(token_major(16 * 64, 64, 16, 1));         // [tokens, heads, d], one token
  EXPECT_FALSE(token_major(64, 577 * 4 * 64, 16, 577));  // [heads, tokens, d] of four images
  EXPECT_FALSE(token_major(1, 577 * 4, 16, 577));        // lse [heads, tokens]
  EXPECT_TRUE(token_major(16, 1, 16, 577));              // lse [tokens, heads]
  EXPECT_TRUE(token_major(64, 12345, 1, 577));           // one head: its stride is never stepped
}

// auto's table (auto_table.h): cuda below the measured crossover, cudnn above it; at head dims
// 65-80 on the sm90 kernel, cuda again from 192 tokens per image.
TEST(CudnnAutoTable, PrefersCudnnFromTheMeasuredCrossover) {
  for (const bool sm90 : {false, true}) {
    const auto runs_sm90 = [sm90] { return sm90; };
    EXPECT_FALSE(cudnn::auto_prefers_shape(1089 * 55, 1089, 80, runs_sm90));  // qwen25vl-window: 64-token windows
    EXPECT_FALSE(cudnn::auto_prefers_shape(512 * 64, 512, 128, runs_sm90));
    EXPECT_TRUE(cudnn::auto_prefers_shape(256 * 128, 256, 80, runs_sm90));
    EXPECT_TRUE(cudnn::auto_prefers_shape(64 * 577, 64, 64, runs_sm90));        // clip-l336
    EXPECT_TRUE(cudnn::auto_prefers_shape(16 * 1025, 16, 128, runs_sm90));      // internvit6b
    EXPECT_FALSE(cudnn::auto_prefers_shape(0, 0, 80, runs_sm90));               // nothing to run
  }
  EXPECT_TRUE(cudnn::auto_prefers_shape(64 * 729, 64, 72, [] { return false; }));   // siglip on the sm80 kernel
  EXPECT_FALSE(cudnn::auto_prefers_shape(64 * 729, 64, 72, [] { return true; }));   // ... and on the sm90 kernel
  EXPECT_FALSE(cudnn::auto_prefers_shape(44544, 4, 80, [] { return true; }));       // qwen25vl-large4
  EXPECT_TRUE(cudnn::auto_prefers_shape(8 * 4096, 8, 96, [] { return true; }));     // head dim 96: not measured, cudnn
}

// Batches that run dense have their own crossover: cudnn from 64 tokens, but at head dims
// 65-80 only from 128, and where the sm90 kernel runs only below 384 tokens and at powers of two
// below 2048.
TEST(CudnnAutoTable, PrefersDensePlansFromTheirMeasuredCrossover) {
  for (const bool sm90 : {false, true}) {
    const auto runs_sm90 = [sm90] { return sm90; };
    EXPECT_FALSE(cudnn::auto_prefers_dense(32, 64, runs_sm90));
    EXPECT_TRUE(cudnn::auto_prefers_dense(64, 64, runs_sm90));
    EXPECT_TRUE(cudnn::auto_prefers_dense(577, 64, runs_sm90));     // clip-l336
    EXPECT_TRUE(cudnn::auto_prefers_dense(1025, 128, runs_sm90));   // internvit6b
    EXPECT_TRUE(cudnn::auto_prefers_dense(16384, 128, runs_sm90));  // hd128-long4's images
    EXPECT_FALSE(cudnn::auto_prefers_dense(64, 80, runs_sm90));     // cuda's sm80 kernel leads
    EXPECT_EQ(cudnn::auto_prefers_dense(729, 72, runs_sm90), !sm90);   // siglip
    EXPECT_EQ(cudnn::auto_prefers_dense(1536, 80, runs_sm90), !sm90);
    EXPECT_TRUE(cudnn::auto_prefers_dense(1024, 80, runs_sm90));       // cuDNN's power-of-two plans
    EXPECT_TRUE(cudnn::auto_prefers_dense(383, 72, runs_sm90));
    EXPECT_EQ(cudnn::auto_prefers_dense(2048, 80, runs_sm90), !sm90);
    EXPECT_EQ(cudnn::auto_prefers_dense(4096, 80, runs_sm90), !sm90);
  }
}

TEST(CudnnRaggedIndices, LengthsAndOffsetsOfAPaddedBatch) {
  // Three images (the middle one empty) padded to a bucket of 8 the way the prepared metadata
  // pads cu_seqlens: the end repeated.
  const std::vector<int32_t> cu = {0, 3, 3, 10, 10, 10, 10, 10, 10};
  // q, k, v: views of one fused [tokens, 8 + 2 * 2, 64] buffer; out [tokens, 8, 64]; lse
  // [heads, tokens] (token stride 1).
  const int64_t fused = (8 + 2 * 2) * 64, strides[kRaggedTensors] = {fused, fused, fused, 8 * 64, 1};
  const HostIndices h = compute(cu, 8, strides);
  EXPECT_EQ(h.seq_len, (std::vector<int32_t>{3, 0, 7, 0, 0, 0, 0, 0}));
  for (int t = 0; t < kRaggedTensors; ++t) {
    for (int64_t b = 0; b <= 8; ++b) EXPECT_EQ(h.offsets[t][b], int64_t{cu[b]} * strides[t]) << t << " " << b;
  }
  EXPECT_EQ(h.offsets[kRaggedQ][3], 10 * fused);  // the end: where an image after the last would start
}

TEST(CudnnRaggedIndices, OffsetsPastInt32StayExact) {
  // 2^31 - 1 tokens of a fused qkv row: the offset needs 64 bits (why they are int64).
  const int32_t last = std::numeric_limits<int32_t>::max();
  const std::vector<int32_t> cu = {0, last - 5, last};
  const int64_t stride = 3 * 16 * 128, strides[kRaggedTensors] = {stride, stride, stride, stride, 1};
  const HostIndices h = compute(cu, 2, strides);
  EXPECT_EQ(h.seq_len, (std::vector<int32_t>{last - 5, 5}));
  EXPECT_EQ(h.offsets[kRaggedV][2], int64_t{last} * stride);
  EXPECT_GT(h.offsets[kRaggedV][2], int64_t{std::numeric_limits<int32_t>::max()});
}

// ---- validated params, as core hands them to backends ----

// bf16 q, k, v as views of a fused [tokens, heads + 2 * kv_heads, head_dim] buffer at a 16-byte
// aligned address; contiguous out. No memory behind them: these tests never run a kernel.
AttentionParams fused_params(int64_t tokens, int heads = 8, int kv_heads = 2, int head_dim = 64) {
  static const std::vector<int32_t> cu = {0, 100, 100, 300};
  AttentionParams p{};
  p.dtype = DType::bf16;
  p.device = {DeviceType::cuda, 0};
  const auto base = reinterpret_cast<char*>(uintptr_t{1} << 20);
  const int64_t row = int64_t(heads + 2 * kv_heads) * head_dim;
  p.q = base;
  p.k = base + 2 * heads * head_dim;
  p.v = base + 2 * (heads + kv_heads) * head_dim;
  p.out = base + (64 << 20);
  p.q_token_stride = p.k_token_stride = p.v_token_stride = row;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = head_dim;
  p.out_token_stride = int64_t(heads) * head_dim;
  p.total_tokens = tokens;
  p.num_heads = heads, p.num_kv_heads = kv_heads, p.head_dim = head_dim;
  p.num_images = 3;
  p.cu_seqlens = cu.data();
  p.max_seqlen = 200;
  p.softmax_scale = 0.125;
  p.window_left = p.window_right = -1;
  return p;
}

TEST(CudnnPlanKey, TokenCountAndPointersDoNotSplitPlans) {
  AttentionParams a = fused_params(300), b = fused_params(5000);
  b.q = static_cast<const char*>(b.q) + 4096;
  EXPECT_EQ(plan_key(a, 64, 1024, 91900), plan_key(b, 64, 1024, 91900));
}

TEST(CudnnPlanKey, EverythingTheGraphBakesInSplitsPlans) {
  const AttentionParams base = fused_params(300);
  const PlanKey key = plan_key(base, 64, 1024, 91900);
  EXPECT_NE(key, plan_key(base, 128, 1024, 91900));  // batch bucket
  EXPECT_NE(key, plan_key(base, 64, 2048, 91900));   // max_seqlen bucket
  EXPECT_NE(key, plan_key(base, 64, 1024, 91400));   // cuDNN version
  auto changed = [&](auto&& edit) {
    AttentionParams p = base;
    edit(p);
    return plan_key(p, 64, 1024, 91900);
  };
  EXPECT_NE(key, changed([](AttentionParams& p) { p.dtype = DType::f16; }));
  EXPECT_NE(key, changed([](AttentionParams& p) { p.softmax_scale = 0.1; }));
  EXPECT_NE(key, changed([](AttentionParams& p) { p.device.index = 1; }));
  EXPECT_NE(key, changed([](AttentionParams& p) { p.v_token_stride += 8; }));  // each stride counts
  EXPECT_NE(key, changed([](AttentionParams& p) { p.k_head_stride += 8; }));
  EXPECT_NE(key, changed([](AttentionParams& p) { p.out_token_stride += 8; }));
  static float lse_memory[4];
  const PlanKey with_lse = changed([](AttentionParams& p) {
    p.lse = lse_memory, p.lse_head_stride = 300, p.lse_token_stride = 1;
  });
  EXPECT_NE(key, with_lse);
  EXPECT_NE(with_lse, changed([](AttentionParams& p) {
    p.lse = lse_memory, p.lse_head_stride = 400, p.lse_token_stride = 1;  // [heads, tokens] of another T
  }));
}

TEST(CudnnPlanKey, AHeadStrideNeverSteppedOverDoesNotCount) {
  // One head: a head-major view's head stride (tokens x head_dim) changes with every batch.
  AttentionParams a = fused_params(300, 1, 1), b = a;
  a.q_head_stride = 300 * 64, b.q_head_stride = 900 * 64;
  EXPECT_EQ(plan_key(a, 8, 1024, 91900), plan_key(b, 8, 1024, 91900));
}

// ---- what the backend declines, and how it says so (before touching a GPU) ----

void expect_declined(const AttentionParams& p, const std::string& category,
                     std::initializer_list<const char*> fragments) {
  const std::optional<std::string> why = declines(p);
  ASSERT_TRUE(why.has_value()) << "not declined";
  EXPECT_EQ(check::skip_category(*why), category) << *why;
  std::vector<const char*> all = {"backend='cudnn': "};
  all.insert(all.end(), fragments.begin(), fragments.end());
  // run() gives the same reason as an `unsupported` error, before it loads cuDNN or asks a GPU
  // (there is none here).
  expect_error([&] { run(p); }, ErrorCode::unsupported, {"backend='cudnn': ", why->c_str()});
  for (const char* fragment : fragments) EXPECT_NE(why->find(fragment), std::string::npos) << *why;
}

TEST(CudnnDeclines, TakesAlignedStridedViewsOfAFusedQkvBuffer) {
  EXPECT_FALSE(declines(fused_params(300)).has_value());
  EXPECT_FALSE(declines(fused_params(300, 16, 16, 72)).has_value());   // head dims: multiples of 8
  EXPECT_FALSE(declines(fused_params(300, 16, 16, 256)).has_value());
  AttentionParams head_major = fused_params(300);
  head_major.q_token_stride = 64, head_major.q_head_stride = 300 * 64;
  EXPECT_FALSE(declines(head_major).has_value());
}

TEST(CudnnDeclines, WindowsAndSinks) {
  AttentionParams p = fused_params(300);
  p.window_left = 7;
  expect_declined(p, "window", {"window_left=7", "window_right=-1", "backend 'cuda'"});
  p = fused_params(300);
  static float sinks[8];
  p.sinks = sinks;
  expect_declined(p, "sinks", {"sinks", "backend 'cuda'"});
}

TEST(CudnnDeclines, HeadDimsAndDtypesItCannotRunListWhatItCan) {
  expect_declined(fused_params(300, 8, 2, 36), "head_dim", {"36", "multiples of 8 up to 256", "8, 16, 24"});
  expect_declined(fused_params(300, 8, 2, 264), "head_dim", {"264"});
  AttentionParams p = fused_params(300);
  p.dtype = DType::f32;
  expect_declined(p, "dtype", {"f32", "f16 and bf16"});
}

TEST(CudnnDeclines, MisalignedStridesAndPointersNameTheTensor) {
  AttentionParams p = fused_params(300);
  p.out_token_stride = 8 * 64 + 3;  // rows padded by 3 elements
  expect_declined(p, "alignment", {"out token stride 515 (1030 bytes)", "16 bytes"});
  p = fused_params(300);
  p.k_head_stride = 68;
  expect_declined(p, "alignment", {"k head stride 68"});
  p = fused_params(300);
  p.v = static_cast<const char*>(p.v) + 2;  // one bf16 element off
  expect_declined(p, "alignment", {"v starts at"});
  p = fused_params(300, 1, 1);
  p.q_head_stride = 3;  // one head: never stepped over, so it does not matter
  EXPECT_FALSE(declines(p).has_value());
  p = fused_params(300);
  static float lse[64];
  p.lse = lse + 1, p.lse_head_stride = 300, p.lse_token_stride = 1;
  expect_declined(p, "alignment", {"lse starts at"});
}

// ---- the graphs, checked by the cuDNN frontend itself (no GPU: it is told sm90) ----

// Skips unless the loaded cuDNN can check graphs here.
#define SKIP_WITHOUT_CUDNN_LIBRARY()                                                  \
  if (!library().usable) GTEST_SKIP() << "no usable cuDNN here: " << library().problem

TEST(CudnnGraphs, TheFrontendAcceptsTheGraphsOfTheCallsWeTake) {
  SKIP_WITHOUT_CUDNN_LIBRARY();
  const int64_t v = library().version;
  static float lse[16];
  struct Named {
    const char* name;
    AttentionParams params;
    int64_t batch;
  };
  std::vector<Named> calls;
  for (int d : {32, 64, 72, 80, 96, 128, 256}) {
    calls.push_back({"fused qkv, gqa 8/2", fused_params(300, 8, 2, d), 8});
  }
  AttentionParams p = fused_params(300, 16, 16, 80);
  p.lse = lse, p.lse_head_stride = 300, p.lse_token_stride = 1;  // [heads, tokens]
  calls.push_back({"lse head-major", p, 64});
  p.lse_head_stride = 1, p.lse_token_stride = 16;  // [tokens, heads] viewed as [heads, tokens]
  calls.push_back({"lse token-major", p, 2048});
  p = fused_params(300, 4, 4, 64);
  p.dtype = DType::f16;
  p.q_token_stride = p.k_token_stride = p.v_token_stride = p.out_token_stride = 64;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = 300 * 64;
  calls.push_back({"head-major storage, f16", p, 16});
  for (const Named& call : calls) {
    const PlanKey key = plan_key(call.params, call.batch, 1024, v);
    EXPECT_EQ(validate_graph(key, 90), "") << call.name << ": " << describe(key);
    // The dense plans of uniform batches of 577-token images, where the layout allows them.
    const AttentionParams& c = call.params;
    const bool dense = token_major(c.q_token_stride, c.q_head_stride, c.num_heads, 577) &&
                       (!c.lse || token_major(c.lse_token_stride, c.lse_head_stride, c.num_heads, 577));
    EXPECT_EQ(dense, std::string(call.name).find("head-major") == std::string::npos) << call.name;
    if (!dense) continue;
    for (int64_t images : {1, 4, 64}) {
      const PlanKey dense_key = plan_key(c, images, 577, v, true);
      EXPECT_NE(dense_key, plan_key(c, images, 577, v));
      EXPECT_EQ(validate_graph(dense_key, 90), "") << call.name << ": " << describe(dense_key);
    }
  }
}

TEST(CudnnGraphs, WhatWeDeclineTheFrontendRejectsToo) {
  SKIP_WITHOUT_CUDNN_LIBRARY();
  AttentionParams p = fused_params(300);
  p.out_token_stride = 8 * 64 + 3;
  const int64_t v = library().version;
  EXPECT_NE(validate_graph(plan_key(p, 8, 1024, v), 90).find("alignment"), std::string::npos);
  p = fused_params(300, 8, 2, 36);
  EXPECT_NE(validate_graph(plan_key(p, 8, 1024, v), 90).find("multiple of 8"), std::string::npos);
}

// ---- loading cuDNN ----

TEST(CudnnLibrary, VersionsBelowTheMinimumOrWithKnownBugsAreNamed) {
  EXPECT_EQ(version_string(91900), "9.19.0");
  EXPECT_EQ(version_string(90501), "9.5.1");
  const std::string old = version_problem(90400);
  EXPECT_NE(old.find("cuDNN 9.4.0 is too old"), std::string::npos) << old;
  EXPECT_NE(old.find("9.5.0 or newer"), std::string::npos) << old;
  EXPECT_NE(version_problem(91001).find("9.10.2"), std::string::npos);
  EXPECT_EQ(version_problem(90500), "");
  EXPECT_EQ(version_problem(91400), "");
  EXPECT_EQ(version_problem(91900), "");
}

TEST(CudnnLibrary, AMissingLibrarySaysWhatToInstallOrSet) {
  const Library lib = open_library("/nonexistent/libcudnn.so.9");
  EXPECT_FALSE(lib.usable);
  EXPECT_NE(lib.problem.find("cannot load /nonexistent/libcudnn.so.9"), std::string::npos) << lib.problem;
  EXPECT_NE(lib.problem.find("VISATTN_CUDNN_LIB"), std::string::npos) << lib.problem;
}

TEST(CudnnLibrary, ALibraryThatIsNotCudnnIsRefused) {
  const Library lib = open_library("libm.so.6");
  EXPECT_FALSE(lib.usable);
  EXPECT_NE(lib.problem.find("has no cudnnGetVersion"), std::string::npos) << lib.problem;
}

TEST(CudnnLibrary, TheInstalledCudnnLoadsWithoutAGpu) {
  const Library lib = open_library("libcudnn.so.9");
  if (!lib.usable) GTEST_SKIP() << "no usable cuDNN on this machine: " << lib.problem;
  EXPECT_GE(lib.version, kMinimumVersion);
  EXPECT_FALSE(lib.path.empty());
}

// ---- the check harness skips exactly what the backend declines ----

// Whether a 16-bit view of `storage` breaks cuDNN's 16-byte rule, from its offset and strides.
bool misaligned_view(const TensorView& view, const std::vector<uint32_t>& storage) {
  const auto offset = static_cast<const char*>(view.data) - reinterpret_cast<const char*>(storage.data());
  const bool head_counts = view.shape[1] > 1;
  return offset % 16 != 0 || view.stride[0] % 8 != 0 || (head_counts && view.stride[1] % 8 != 0);
}

TEST(CudnnCheckHarness, SkipsExactlyTheCasesTheBackendDeclines) {
  std::map<std::string, int> skipped;
  int runnable = 0;
  for (int i = 0; i < 300; ++i) {
    const check::CaseSpec spec = check::make_case(1, i);
    if (!check::unsupported_by("cudnn", spec).empty()) continue;  // f32: not a dtype of cudnn
    const check::CaseData d = check::make_case_data(spec);
    // The device copy keeps each view's byte offset in a 256-byte aligned allocation; the host
    // storage must be 16-byte aligned for the host views to decline the same.
    ASSERT_EQ(reinterpret_cast<uintptr_t>(d.input_storage.data()) % 16, 0u);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(d.output_storage.data()) % 16, 0u);
    const bool expected = spec.window_left >= 0 || spec.window_right >= 0 || spec.sinks ||
                          misaligned_view(d.q, d.input_storage) || misaligned_view(d.k, d.input_storage) ||
                          misaligned_view(d.v, d.input_storage) || misaligned_view(d.out, d.output_storage);
    const std::string why = check::declined_by("cudnn", d.q, d.k, d.v, d.out, d.batch, d.options);
    EXPECT_EQ(!why.empty(), expected) << check::describe(spec) << ": " << why;
    if (why.empty()) {
      ++runnable;
    } else {
      ++skipped[check::skip_category(why)];
    }
    // Other backends, and auto, decline nothing.
    EXPECT_EQ(check::declined_by("cpu", d.q, d.k, d.v, d.out, d.batch, d.options), "");
    EXPECT_EQ(check::declined_by("auto", d.q, d.k, d.v, d.out, d.batch, d.options), "");
  }
  std::printf("cudnn on check seed 1, cases 0-299: %d runnable;", runnable);
  for (const auto& [category, count] : skipped) std::printf(" %s %d", category.c_str(), count);
  std::printf("\n");
  EXPECT_GE(runnable, 40);  // fused qkv, head-major and separate views, GQA, LSE, zero lengths
  EXPECT_GT(skipped["window"] + skipped["sinks"] + skipped["alignment"], 0);
}

// ---- the registry: never in auto's way ----

TEST(CudnnRegistry, ListedBelowCudaWithItsReasonWhenUnavailable) {
  for (const BackendInfo& b : backends()) {
    if (b.name != "cudnn") continue;
    EXPECT_EQ(b.device, DeviceType::cuda);
    EXPECT_EQ(b.max_head_dim, 256);
    if (!b.available) {
      EXPECT_FALSE(b.unavailable_reason.empty());
      EXPECT_EQ(b.plans_built, 0);
    }
    return;
  }
  GTEST_SKIP() << "the cudnn backend is not built in";
}

}  // namespace
}  // namespace visattn::cudnn
