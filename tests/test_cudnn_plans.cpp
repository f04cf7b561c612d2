// The cudnn backend on a GPU: a stream of batches of varying sizes builds at most one cuDNN plan
// per bucket it touches, and a prepared batch captured in a CUDA graph replays on other images
// of its bucket. Skipped where there is no GPU or no usable cuDNN (the reason is printed).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "backends/cudnn/dense_batch.h"
#include "backends/cudnn/plan_cache.h"
#include "expect_error.h"
#include "visattn/visattn.h"

namespace visattn {
namespace {

const Device kGpu{DeviceType::cuda, 0};

std::optional<BackendInfo> cudnn_info() {
  for (BackendInfo& b : backends()) {
    if (b.name == "cudnn") return std::move(b);
  }
  return std::nullopt;
}

#define SKIP_WITHOUT_CUDNN()                                                          \
  do {                                                                                \
    const auto info = cudnn_info();                                                   \
    if (!info) GTEST_SKIP() << "the cudnn backend is not built in";                   \
    if (!info->available) GTEST_SKIP() << "cudnn unavailable: " << info->unavailable_reason; \
  } while (0)

int64_t plans_built() { return cudnn_info()->plans_built; }

void check_cuda(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&data, n), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  template <typename T>
  std::vector<T> read(size_t count) const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// q, k, v: bf16 views of one fused [tokens, heads + 2 * kv_heads, head_dim] buffer (the output
// of a qkv projection, strided, no copies); out: contiguous [tokens, heads, head_dim].
struct FusedQkv {
  int heads, kv_heads, dim;
  int64_t capacity;
  DeviceBuffer qkv, out;

  FusedQkv(int heads, int kv_heads, int dim, int64_t capacity, uint64_t seed)
      : heads(heads), kv_heads(kv_heads), dim(dim), capacity(capacity),
        qkv(size_t(capacity) * row() * 2), out(size_t(capacity) * heads * dim * 2) {
    fill(seed);
  }
  int64_t row() const { return int64_t(heads + 2 * kv_heads) * dim; }
  void fill(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    std::vector<uint16_t> host(size_t(capacity * row()));
    for (uint16_t& x : host) x = to_bf16(normal(rng));
    EXPECT_EQ(cudaMemcpy(qkv.data, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  TensorView view(int64_t tokens, int offset_heads, int n_heads) const {
    return TensorView::strided(static_cast<uint16_t*>(qkv.data) + offset_heads * dim, DType::bf16,
                               {tokens, n_heads, dim}, {row(), dim, 1}, kGpu);
  }
  TensorView q(int64_t t) const { return view(t, 0, heads); }
  TensorView k(int64_t t) const { return view(t, heads, kv_heads); }
  TensorView v(int64_t t) const { return view(t, heads + kv_heads, kv_heads); }
  TensorView o(int64_t t) const {
    return TensorView::contiguous(out.data, DType::bf16, {t, heads, dim}, kGpu);
  }
};

// Mostly ViT-sized images, some long enough for the next max_seqlen bucket, a few empty.
int64_t random_length(std::mt19937_64& rng) {
  const double u = std::uniform_real_distribution<double>()(rng);
  if (u < 0.05) return 0;
  if (u < 0.65) return std::uniform_int_distribution<int64_t>(1, 400)(rng);
  if (u < 0.92) return std::uniform_int_distribution<int64_t>(401, 1024)(rng);
  return std::uniform_int_distribution<int64_t>(1025, 1800)(rng);
}

TEST(CudnnPlans, HundredRandomBatchesBuildAtMostOnePlanPerBucketTouched) {
  SKIP_WITHOUT_CUDNN();
  constexpr int kBatches = 100, kMaxImages = 64;
  constexpr int64_t kMaxLength = 1800;
  FusedQkv t(4, 2, 64, kMaxImages * kMaxLength, 7);
  std::mt19937_64 rng(2026);
  // (batch bucket, max_seqlen bucket); a dense call of a uniform batch is its own bucket,
  // (-images, length).
  std::set<std::pair<int64_t, int64_t>> buckets;
  int64_t uniform_batches = 0;
  const int64_t before = plans_built();
  for (int i = 0; i < kBatches; ++i) {
    std::vector<int64_t> lengths(std::uniform_int_distribution<int>(1, kMaxImages)(rng));
    for (int64_t& n : lengths) n = random_length(rng);
    VarlenBatch batch = VarlenBatch::from_lengths(lengths);
    buckets.insert({batch.batch_bucket(), batch.max_seqlen_bucket()});
    const bool prepared = i % 2 == 0;  // both paths: prepared buffers and per-call upload
    if (prepared) batch.prepare(kGpu);
    if (const int64_t length = cudnn::uniform_length(batch.cu_seqlens()); length > 0 && !prepared) {
      ++uniform_batches;
      for (int64_t images : cudnn::dense_calls(batch.num_images())) buckets.insert({-images, length});
    }
    const int64_t tokens = batch.total_tokens();
    const bool check_rows = i % 10 == 0;
    if (check_rows) check_cuda(cudaMemset(t.out.data, 0xFF, t.out.bytes), "poison out");  // NaN
    attention(t.q(tokens), t.k(tokens), t.v(tokens), t.o(tokens), batch, {}, "cudnn");
    if (check_rows) {
      check_cuda(cudaDeviceSynchronize(), "attention");
      const std::vector<uint16_t> out = t.out.read<uint16_t>(size_t(tokens) * t.heads * t.dim);
      for (size_t e = 0; e < out.size(); ++e) {
        ASSERT_TRUE(std::isfinite(from_bf16(out[e]))) << "batch " << i << ": out element " << e
                                                      << " of " << out.size() << " not written";
      }
    }
  }
  check_cuda(cudaDeviceSynchronize(), "attention");
  const int64_t built = plans_built() - before;
  std::printf("cudnn plans: %d batches of 1-%d images (%lld uniform, unprepared) touched %zu buckets "
              "and built %lld plans\n", kBatches, kMaxImages, static_cast<long long>(uniform_batches),
              buckets.size(), static_cast<long long>(built));
  EXPECT_LE(built, int64_t(buckets.size()));
  EXPECT_GE(built, 1);
}

// A uniform batch that was not prepared runs on dense plans, one call per power of two of
// images (dense_batch.h), and gives what the same batch gives prepared, on its ragged plan.
TEST(CudnnDense, UniformBatchesMatchTheirRaggedPlanAndBuildOnePlanPerPowerOfTwo) {
  SKIP_WITHOUT_CUDNN();
  constexpr int64_t kLength = 333;  // a length no other test here runs
  FusedQkv t(4, 2, 64, 64 * kLength, 21);
  std::set<std::pair<int64_t, int64_t>> plans;  // (-images, length) dense, (bucket, max_seqlen) ragged
  const int64_t before = plans_built();
  for (int64_t images : {1, 2, 3, 5, 17, 63, 64}) {
    const std::vector<int64_t> lengths(size_t(images), kLength);
    const int64_t tokens = images * kLength;
    const size_t elements = size_t(tokens) * t.heads * t.dim;
    VarlenBatch prepared = VarlenBatch::from_lengths(lengths);
    prepared.prepare(kGpu);
    plans.insert({prepared.batch_bucket(), prepared.max_seqlen_bucket()});
    attention(t.q(tokens), t.k(tokens), t.v(tokens), t.o(tokens), prepared, {}, "cudnn");
    const std::vector<uint16_t> ragged = t.out.read<uint16_t>(elements);
    check_cuda(cudaMemset(t.out.data, 0xFF, t.out.bytes), "poison out");  // NaN
    attention(t.q(tokens), t.k(tokens), t.v(tokens), t.o(tokens), VarlenBatch::from_lengths(lengths), {}, "cudnn");
    const std::vector<uint16_t> dense = t.out.read<uint16_t>(elements);
    float worst = 0.0f;
    for (size_t e = 0; e < elements; ++e) {
      ASSERT_TRUE(std::isfinite(from_bf16(dense[e]))) << images << " images: element " << e << " not written";
      worst = std::max(worst, std::fabs(from_bf16(dense[e]) - from_bf16(ragged[e])));
    }
    EXPECT_LE(worst, 1.0f / 64) << images << " images of " << kLength;  // a few bf16 steps of |out| < 1
    for (int64_t call : cudnn::dense_calls(images)) plans.insert({-call, kLength});
  }
  const int64_t built = plans_built() - before;
  std::printf("cudnn dense: uniform batches of 1-64 images built %lld plans (at most %zu)\n",
              static_cast<long long>(built), plans.size());
  EXPECT_LE(built, int64_t(plans.size()));
}

// Past dense_length_limit() image lengths, a new length runs on its ragged bucket.
TEST(CudnnDense, LengthsPastTheLimitBuildNoMoreDensePlans) {
  SKIP_WITHOUT_CUDNN();
  const int64_t limit = cudnn::dense_length_limit(), first = 3001;
  FusedQkv t(2, 2, 64, first + limit + 4, 22);
  const int64_t before = plans_built();
  for (int64_t length = first; length < first + limit + 4; ++length) {
    attention(t.q(length), t.k(length), t.v(length), t.o(length),
              VarlenBatch::from_lengths(std::vector<int64_t>{length}), {}, "cudnn");
  }
  check_cuda(cudaDeviceSynchronize(), "attention");
  const int64_t built = plans_built() - before;
  std::printf("cudnn dense: %lld new lengths, limit %lld, built %lld plans\n", static_cast<long long>(limit + 4),
              static_cast<long long>(limit), static_cast<long long>(built));
  EXPECT_LE(built, limit + 1);  // dense plans, then the ragged plan of 8 images up to 4096
  EXPECT_GE(built, 1);
  // Where dense plans build at all, these lengths filled the limit: auto weighs a new length
  // as the ragged call it will run.
  if (built > 1) EXPECT_FALSE(cudnn::dense_length_admitted(first + limit + 10));
}

TEST(CudnnGraphs, ACapturedCallReplaysOnOtherImagesOfItsBucket) {
  SKIP_WITHOUT_CUDNN();
  const std::vector<int64_t> first = {100, 0, 200}, second = {7, 0, 0, 64, 229};  // 300 tokens each
  const int64_t tokens = 300;
  FusedQkv t(8, 2, 128, tokens, 11);
  DeviceBuffer lse(size_t(t.heads) * tokens * 4);
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  AttentionOptions options;
  options.cuda_stream = stream;
  options.lse = TensorView::contiguous(lse.data, DType::f32, {t.heads, tokens}, kGpu);
  auto run = [&](const VarlenBatch& batch) {
    attention(t.q(tokens), t.k(tokens), t.v(tokens), t.o(tokens), batch, options, "cudnn");
  };
  auto poison = [&] {
    check_cuda(cudaMemsetAsync(t.out.data, 0xFF, t.out.bytes, stream), "poison out");
    check_cuda(cudaMemsetAsync(lse.data, 0xFF, lse.bytes, stream), "poison lse");
  };
  auto expect_outputs_equal_eager = [&](const std::vector<int64_t>& lengths) {
    const std::vector<uint16_t> got_out = t.out.read<uint16_t>(t.out.bytes / 2);
    const std::vector<float> got_lse = lse.read<float>(lse.bytes / 4);
    poison();
    run(VarlenBatch::from_lengths(lengths));  // unprepared: the same plan, eagerly
    check_cuda(cudaStreamSynchronize(stream), "eager attention");
    EXPECT_EQ(got_out, t.out.read<uint16_t>(t.out.bytes / 2));
    EXPECT_EQ(std::memcmp(got_lse.data(), lse.read<float>(lse.bytes / 4).data(), lse.bytes), 0);
  };

  VarlenBatch batch = VarlenBatch::from_lengths(first);
  batch.prepare(kGpu, stream);
  run(batch);  // warm-up: builds the plan outside the capture
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  run(batch);
  check_cuda(cudaStreamEndCapture(stream, &graph), "end capture");
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");

  poison();
  check_cuda(cudaGraphLaunch(exec, stream), "replay");
  check_cuda(cudaStreamSynchronize(stream), "replay");
  expect_outputs_equal_eager(first);

  // Other images, same tokens and bucket: rewrite the prepared buffers, replay, new inputs too.
  batch.update_device(VarlenBatch::from_lengths(second), stream);
  t.fill(12);
  poison();
  check_cuda(cudaGraphLaunch(exec, stream), "replay");
  check_cuda(cudaStreamSynchronize(stream), "replay");
  expect_outputs_equal_eager(second);

  // The plan's max_seqlen bucket is now fixed for these buffers: a longer image is refused.
  const VarlenBatch longer = VarlenBatch::from_lengths(std::vector<int64_t>{1500, 100});
  expect_error([&] { batch.update_device(longer, stream); }, ErrorCode::invalid_value,
               {"update_device", "1500", "max_seqlen bucket 1024"});
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(CudnnGraphs, CapturingACallWhosePlanIsNotBuiltSaysToWarmUp) {
  SKIP_WITHOUT_CUDNN();
  FusedQkv t(2, 2, 96, 40, 3);  // a shape no other test builds a plan for
  VarlenBatch batch = VarlenBatch::from_lengths(std::vector<int64_t>{17, 23});
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  batch.prepare(kGpu, stream);
  AttentionOptions options;
  options.cuda_stream = stream;
  const int64_t before = plans_built();
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  expect_error([&] { attention(t.q(40), t.k(40), t.v(40), t.o(40), batch, options, "cudnn"); },
               ErrorCode::invalid_value, {"backend='cudnn'", "captured", "warm-up"});
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamEndCapture(stream, &graph), "end capture");  // nothing was enqueued
  if (graph) cudaGraphDestroy(graph);
  EXPECT_EQ(plans_built(), before);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace visattn
