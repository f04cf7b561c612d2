// attention() argument checks: one test per error class, each asserting the message names the
// argument and that out and lse are untouched after the error.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "expect_error.h"
#include "visattn/visattn.h"

namespace visattn {
namespace {

constexpr int64_t T = 6, H = 4, HK = 2, D = 8;
constexpr float kPoison = 12345.0f;

// A valid call: f32, 2 images (2 and 4 tokens), GQA 4/2, with sinks and lse.
struct Call {
  std::vector<float> q = std::vector<float>(T * H * D, 0.5f);
  std::vector<float> k = std::vector<float>(T * HK * D, 0.25f);
  std::vector<float> v = std::vector<float>(T * HK * D, 1.0f);
  std::vector<float> out = std::vector<float>(T * H * D, kPoison);
  std::vector<float> lse = std::vector<float>(H * T, kPoison);
  std::vector<float> sinks = std::vector<float>(H, 0.1f);
  TensorView qv = TensorView::contiguous(q.data(), DType::f32, {T, H, D});
  TensorView kv = TensorView::contiguous(k.data(), DType::f32, {T, HK, D});
  TensorView vv = TensorView::contiguous(v.data(), DType::f32, {T, HK, D});
  TensorView ov = TensorView::contiguous(out.data(), DType::f32, {T, H, D});
  VarlenBatch batch = VarlenBatch::from_cu_seqlens(std::vector<int32_t>{0, 2, 6});
  AttentionOptions options;
  std::string backend = "auto";

  Call() {
    options.sinks = TensorView::contiguous(sinks.data(), DType::f32, {H});
    options.lse = TensorView::contiguous(lse.data(), DType::f32, {H, T});
  }
  void run() { attention(qv, kv, vv, ov, batch, options, backend); }
  bool outputs_untouched() const {
    for (float x : out) if (x != kPoison) return false;
    for (float x : lse) if (x != kPoison) return false;
    return true;
  }
};

void expect_rejected(const std::function<void(Call&)>& mutate, ErrorCode code,
                     std::initializer_list<const char*> fragments) {
  Call call;
  mutate(call);
  expect_error([&] { call.run(); }, code, fragments);
  EXPECT_TRUE(call.outputs_untouched()) << "an output was written before the error";
}

TEST(Validation, ValidCallWritesEveryOutput) {
  Call call;
  call.run();
  for (float x : call.out) EXPECT_TRUE(std::isfinite(x) && x != kPoison);
  for (float x : call.lse) EXPECT_TRUE(std::isfinite(x) && x != kPoison);
}

TEST(Validation, Rank) {
  expect_rejected([](Call& c) { c.qv = TensorView::contiguous(c.q.data(), DType::f32, {T, H * D}); },
                  ErrorCode::invalid_type, {"q:", "rank 2"});
}

TEST(Validation, DtypeMismatch) {
  expect_rejected([](Call& c) { c.vv.dtype = DType::bf16; }, ErrorCode::invalid_type,
                  {"v: dtype bf16", "q's dtype f32"});
}

TEST(Validation, DeviceMismatch) {
  expect_rejected([](Call& c) { c.kv.device = {DeviceType::cuda, 1}; }, ErrorCode::invalid_type,
                  {"k: device cuda:1", "q's device cpu"});
}

TEST(Validation, HeadDimNotContiguous) {
  expect_rejected([](Call& c) { c.qv = TensorView::strided(c.q.data(), DType::f32, {T, H, D / 2}, {H * D, D, 2}); },
                  ErrorCode::invalid_value, {"q: head_dim must be contiguous"});
}

TEST(Validation, NegativeStrideAndShape) {
  expect_rejected([](Call& c) { c.kv.stride[0] = -HK * D; }, ErrorCode::invalid_value,
                  {"k.stride[0]=-16", "negative"});
  expect_rejected([](Call& c) { c.ov.shape[0] = -1; }, ErrorCode::invalid_value, {"out.shape[0]=-1"});
}

TEST(Validation, KeyTokensDiffer) {
  expect_rejected([](Call& c) { c.kv.shape[0] = T - 1; }, ErrorCode::invalid_value,
                  {"k: shape [5, 2, 8]", "expected 6 tokens"});
}

TEST(Validation, ValueShapeDiffersFromKey) {
  expect_rejected([](Call& c) { c.vv.shape[1] = 1; }, ErrorCode::invalid_value,
                  {"v: shape [6, 1, 8]", "2 heads"});
}

TEST(Validation, HeadDimDiffers) {
  expect_rejected([](Call& c) { c.kv = TensorView::contiguous(c.k.data(), DType::f32, {T, HK, D / 2}); },
                  ErrorCode::invalid_value, {"k: shape [6, 2, 4]", "head_dim 8"});
}

TEST(Validation, OutShape) {
  expect_rejected([](Call& c) { c.ov.shape[1] = H - 1; }, ErrorCode::invalid_value,
                  {"out: shape [6, 3, 8]", "4 heads"});
}

TEST(Validation, KvHeadsMustDivideHeads) {
  expect_rejected([](Call& c) {
    c.qv = TensorView::contiguous(c.q.data(), DType::f32, {T, 3, D});
    c.ov = TensorView::contiguous(c.out.data(), DType::f32, {T, 3, D});
    c.options.sinks.reset();
    c.options.lse.reset();
  }, ErrorCode::invalid_value, {"num_kv_heads=2", "num_heads=3"});
}

TEST(Validation, LastOffsetMustEqualTokens) {
  expect_rejected([](Call& c) { c.batch = VarlenBatch::from_cu_seqlens(std::vector<int32_t>{0, 2, 5}); },
                  ErrorCode::invalid_value, {"cu_seqlens[2]=5", "tokens of q (6"});
}

TEST(Validation, SoftmaxScaleMustBeFinite) {
  expect_rejected([](Call& c) { c.options.softmax_scale = NAN; }, ErrorCode::invalid_value,
                  {"softmax_scale=nan"});
  expect_rejected([](Call& c) { c.options.softmax_scale = INFINITY; }, ErrorCode::invalid_value,
                  {"softmax_scale=inf"});
}

TEST(Validation, Window) {
  expect_rejected([](Call& c) { c.options.window_left = -2; }, ErrorCode::invalid_value,
                  {"window_left=-2"});
  expect_rejected([](Call& c) { c.options.window_right = -5; }, ErrorCode::invalid_value,
                  {"window_right=-5"});
}

TEST(Validation, Sinks) {
  expect_rejected([](Call& c) { c.options.sinks->shape[0] = H + 1; }, ErrorCode::invalid_value,
                  {"sinks: shape [5]", "[4]"});
  expect_rejected([](Call& c) { c.options.sinks->dtype = DType::bf16; }, ErrorCode::invalid_type,
                  {"sinks: dtype must be f32"});
  expect_rejected([](Call& c) { c.options.sinks->device = {DeviceType::cuda, 0}; },
                  ErrorCode::invalid_type, {"sinks: device cuda:0"});
}

TEST(Validation, Lse) {
  expect_rejected([](Call& c) { c.options.lse = TensorView::contiguous(c.lse.data(), DType::f32, {T, H}); },
                  ErrorCode::invalid_value, {"lse: shape [6, 4]", "[4, 6]"});
  expect_rejected([](Call& c) { c.options.lse->rank = 1; }, ErrorCode::invalid_type,
                  {"lse: expected rank 2"});
}

TEST(Validation, NumThreads) {
  expect_rejected([](Call& c) { c.options.num_threads = -1; }, ErrorCode::invalid_value,
                  {"num_threads=-1"});
}

TEST(Validation, OutAliasesAnInput) {
  expect_rejected([](Call& c) {
    c.ov = TensorView::contiguous(c.q.data(), DType::f32, {T, H, D});
  }, ErrorCode::invalid_value, {"out: its memory overlaps q"});
}

TEST(Validation, OutOverlapsItself) {
  expect_rejected([](Call& c) { c.ov.stride[0] = D; }, ErrorCode::invalid_value,
                  {"out: shape [6, 4, 8]", "several elements to one address"});
}

TEST(Validation, LseOverlapsOut) {
  expect_rejected([](Call& c) {
    c.options.lse = TensorView::contiguous(c.out.data() + 8, DType::f32, {H, T});
  }, ErrorCode::invalid_value, {"lse: its memory overlaps out"});
}

TEST(Validation, MisalignedPointer) {
  expect_rejected([](Call& c) { c.kv.data = reinterpret_cast<char*>(c.k.data()) + 1; },
                  ErrorCode::invalid_value, {"k: data pointer", "not aligned"});
}

TEST(Validation, NullData) {
  expect_rejected([](Call& c) { c.vv.data = nullptr; }, ErrorCode::invalid_value, {"v: data is null"});
}

TEST(Validation, FourDimensionalViews) {
  Call ok;
  ok.qv = TensorView::contiguous(ok.q.data(), DType::f32, {2, 3, H, D});
  ok.kv = TensorView::contiguous(ok.k.data(), DType::f32, {2, 3, HK, D});
  ok.vv = TensorView::contiguous(ok.v.data(), DType::f32, {2, 3, HK, D});
  ok.ov = TensorView::contiguous(ok.out.data(), DType::f32, {2, 3, H, D});
  ok.batch = VarlenBatch::uniform(2, 3);
  ok.run();
  EXPECT_FALSE(ok.outputs_untouched());

  expect_rejected([](Call& c) {
    c.qv = TensorView::contiguous(c.q.data(), DType::f32, {2, 3, H, D});
    c.kv = TensorView::contiguous(c.k.data(), DType::f32, {2, 3, HK, D});
    c.vv = TensorView::contiguous(c.v.data(), DType::f32, {2, 3, HK, D});
    c.ov = TensorView::contiguous(c.out.data(), DType::f32, {2, 3, H, D});
  }, ErrorCode::invalid_value, {"batch: 4-D q of shape [2, 3, 4, 8]", "uniform batch"});

  expect_rejected([](Call& c) {
    c.qv = TensorView::strided(c.q.data(), DType::f32, {2, 3, H, D}, {4 * H * D, H * D, D, 1});
  }, ErrorCode::invalid_value, {"q: a 4-D view needs stride[0]"});
}

TEST(Validation, UnknownBackendListsKnownOnes) {
  expect_rejected([](Call& c) { c.backend = "flash"; }, ErrorCode::backend_unavailable,
                  {"backend='flash'", "known: auto, reference"});
}

TEST(Validation, CpuBackendGivenGpuTensors) {
  expect_rejected([](Call& c) {
    for (TensorView* t : {&c.qv, &c.kv, &c.vv, &c.ov}) t->device = {DeviceType::cuda, 0};
    c.options = {};
    c.backend = "reference";
  }, ErrorCode::invalid_type, {"backend='reference' runs on cpu tensors", "q is on cuda:0"});
}

bool cuda_backend_available() {
  for (const BackendInfo& b : backends()) {
    if (b.available && b.device == DeviceType::cuda) return true;
  }
  return false;
}

TEST(Validation, AutoWithoutBackendForDevice) {
  if (cuda_backend_available()) GTEST_SKIP() << "a CUDA backend is available here";
  expect_rejected([](Call& c) {
    for (TensorView* t : {&c.qv, &c.kv, &c.vv, &c.ov}) t->device = {DeviceType::cuda, 0};
    c.options = {};
  }, ErrorCode::backend_unavailable, {"backend=auto", "cuda:0"});
}

TEST(Validation, EmptyBatchWritesNothing) {
  const TensorView empty = TensorView::contiguous(nullptr, DType::bf16, {0, 2, 64});
  const TensorView o = TensorView::contiguous(nullptr, DType::bf16, {0, 2, 64});
  attention(empty, empty, empty, o, VarlenBatch::from_cu_seqlens(std::vector<int32_t>{0}));
  attention(empty, empty, empty, o, VarlenBatch::from_cu_seqlens(std::vector<int32_t>{0, 0, 0}));
}

}  // namespace
}  // namespace visattn
