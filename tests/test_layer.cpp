// VisionAttentionLayer against the layer composed from reference operations (layer_oracle), on
// the CPU and, where one is present, a GPU; its argument errors; safetensors loading; the
// Qwen2.5-VL window layout and the token gather.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "check/tolerance.h"
#include "core/half.h"
#include "expect_error.h"
#include "layer/layer_memory.h"
#include "layer_oracle.h"
#include "visattn/visattn.h"

namespace visattn {
namespace {

using testing::LayerCase;

bool gpu_present() {
  for (const BackendInfo& b : backends()) {
    if (b.name == "cuda" && b.available) return true;
  }
  return false;
}

// A host vector as a tensor of `dtype` on `device`, owned by `storage`.
TensorView place(const std::vector<float>& values, std::initializer_list<int64_t> shape, DType dtype, Device device,
                 std::vector<std::shared_ptr<void>>& storage) {
  storage.push_back(layer::store_on_device(values, dtype, device));
  return TensorView::contiguous(storage.back().get(), dtype, shape, device);
}

// The layer of a case, its weights placed on `device` in `dtype` (norm weights f32).
struct PlacedLayer {
  std::vector<std::shared_ptr<void>> storage;
  std::optional<VisionAttentionLayer> layer;
  std::optional<TensorView> cos, sin;
};

PlacedLayer place_layer(const LayerCase& c, DType dtype, Device device) {
  PlacedLayer p;
  const VisionAttentionConfig& k = c.config;
  const int64_t d = k.head_dim, q_features = int64_t(k.num_heads) * d;
  const int64_t features = q_features + 2 * int64_t(k.num_kv_heads) * d;
  VisionAttentionWeights w;
  w.qkv_weight = place(c.qkv_weight, {features, k.embed_dim}, dtype, device, p.storage);
  if (k.qkv_bias) w.qkv_bias = place(c.qkv_bias, {features}, dtype, device, p.storage);
  w.proj_weight = place(c.proj_weight, {k.embed_dim, q_features}, dtype, device, p.storage);
  if (k.proj_bias) w.proj_bias = place(c.proj_bias, {k.embed_dim}, dtype, device, p.storage);
  if (k.qk_norm != QkNorm::none) {
    w.q_norm_weight = place(c.q_norm, {int64_t(c.q_norm.size())}, DType::f32, device, p.storage);
    w.k_norm_weight = place(c.k_norm, {int64_t(c.k_norm.size())}, DType::f32, device, p.storage);
  }
  p.layer.emplace(k, w);
  if (k.rope == Rope::rotate_half) {
    p.cos = place(c.cos, {c.tokens(), c.rope_width}, DType::f32, device, p.storage);
    p.sin = place(c.sin, {c.tokens(), c.rope_width}, DType::f32, device, p.storage);
  }
  return p;
}

// Runs the layer of a case on `device`, x and out with rows `pad` elements longer than
// embed_dim; returns out's values and checks that the padding kept its poison.
std::vector<float> run_layer(const LayerCase& c, DType dtype, Device device, int64_t pad = 0) {
  PlacedLayer p = place_layer(c, dtype, device);
  const int64_t tokens = c.tokens(), embed = c.config.embed_dim, row = embed + pad;
  std::vector<float> x_padded(size_t(tokens * row), 0.0f), poison(size_t(tokens * row), 7.0f);
  for (int64_t t = 0; t < tokens; ++t) std::copy_n(c.x.begin() + t * embed, embed, x_padded.begin() + t * row);
  std::vector<std::shared_ptr<void>> storage;
  const TensorView x_full = place(x_padded, {tokens, row}, dtype, device, storage);
  const TensorView out_full = place(poison, {tokens, row}, dtype, device, storage);
  const TensorView x = TensorView::strided(x_full.data, dtype, {tokens, embed}, {row, 1}, device);
  const TensorView out = TensorView::strided(out_full.data, dtype, {tokens, embed}, {row, 1}, device);
  VisionAttentionCall call;
  call.cos = p.cos, call.sin = p.sin;
  p.layer->forward(x, VarlenBatch::from_lengths(c.lengths), out, call);
  const std::vector<float> all = layer::read_as_f32(out_full);
  std::vector<float> values(size_t(tokens * embed));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < row; ++i) {
      const float v = all[size_t(t * row + i)];
      if (i < embed) values[size_t(t * embed + i)] = v;
      else EXPECT_EQ(v, 7.0f) << "padding of out row " << t << " was written";
    }
  }
  return values;
}

struct Shape {
  const char* name;
  VisionAttentionConfig config;
  std::vector<int64_t> lengths;
  bool half_width_rope = false;
};

VisionAttentionConfig config_of(int64_t embed, int heads, int kv_heads, int head_dim, QkNorm norm, Rope rope,
                                bool qkv_bias = true) {
  VisionAttentionConfig c;
  c.embed_dim = embed, c.num_heads = heads, c.num_kv_heads = kv_heads, c.head_dim = head_dim;
  c.qk_norm = norm, c.rope = rope, c.qkv_bias = qkv_bias;
  return c;
}

std::vector<int64_t> tiny_segments() {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 400; ++i) lengths.push_back(i % 7 == 0 ? 0 : 1 + i % 3);
  return lengths;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {"qwen_rope_odd_lengths", config_of(128, 4, 4, 32, QkNorm::none, Rope::rotate_half), {0, 1, 63, 65, 127, 17}},
      {"qwen_rope_half_width", config_of(128, 4, 4, 32, QkNorm::none, Rope::rotate_half), {64, 64, 129}, true},
      {"internvit_full_norm", config_of(96, 3, 3, 32, QkNorm::full, Rope::none, false), {129, 5, 1}},
      {"glm_per_head_norm_gqa_rope", config_of(128, 4, 2, 32, QkNorm::per_head, Rope::rotate_half), {31, 0, 97}},
      {"head_dim_80", config_of(160, 2, 2, 80, QkNorm::none, Rope::rotate_half), {61, 67}},
      {"thousands_of_tiny_segments", config_of(64, 2, 2, 32, QkNorm::per_head, Rope::rotate_half), tiny_segments()},
  };
  return all;
}

using Param = std::tuple<DeviceType, DType, int>;

class LayerMatchesComposition : public ::testing::TestWithParam<Param> {};

TEST_P(LayerMatchesComposition, UnderTheToleranceRule) {
  const auto [device_type, dtype, shape_index] = GetParam();
  if (device_type == DeviceType::cuda && !gpu_present()) GTEST_SKIP() << "no usable GPU";
  const Shape& shape = shapes()[size_t(shape_index)];
  const LayerCase c = testing::make_layer_case(shape.config, shape.lengths, dtype, 11 + shape_index, shape.half_width_rope);
  const std::vector<float> out = run_layer(c, dtype, Device{device_type, 0}, /*pad=*/8);
  const std::vector<double> ref = testing::layer_oracle(c, std::nullopt);
  const std::vector<double> baseline64 = testing::layer_oracle(c, dtype);
  const std::vector<float> baseline(baseline64.begin(), baseline64.end());
  const check::Verdict v = check::judge_layer_output(out, ref, baseline, dtype);
  EXPECT_TRUE(v.passed) << shape.name << ": " << v.failure;
  std::printf("%s %s %s: max error %.3g, baseline %.3g, bound %.3g\n", shape.name,
              device_type == DeviceType::cpu ? "cpu" : "cuda", dtype_name(dtype), v.max_error, v.baseline_error, v.bound);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [device, dtype, shape] = info.param;
  return std::string(device == DeviceType::cpu ? "cpu_" : "cuda_") + dtype_name(dtype) + "_" + shapes()[size_t(shape)].name;
}

INSTANTIATE_TEST_SUITE_P(Cpu, LayerMatchesComposition,
                         ::testing::Combine(::testing::Values(DeviceType::cpu),
                                            ::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Range(0, 6)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, LayerMatchesComposition,
                         ::testing::Combine(::testing::Values(DeviceType::cuda),
                                            ::testing::Values(DType::bf16, DType::f16), ::testing::Range(0, 6)),
                         param_name);

TEST(Layer, ConcurrentForwardsOnOneLayerAgree) {
  const Shape& shape = shapes()[0];
  const LayerCase c = testing::make_layer_case(shape.config, shape.lengths, DType::bf16, 3);
  const std::vector<float> expected = run_layer(c, DType::bf16, Device{});
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> results(4);
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { results[size_t(i)] = run_layer(c, DType::bf16, Device{}); });
  for (std::thread& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

// Errors name the argument and leave out untouched.
class LayerErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    c = testing::make_layer_case(shapes()[0].config, {3, 5}, DType::f32, 5);
    p = place_layer(c, DType::f32, Device{});
    x = TensorView::contiguous(c.x.data(), DType::f32, {8, 128});
    out_values.assign(8 * 128, 7.0f);
    out = TensorView::contiguous(out_values.data(), DType::f32, {8, 128});
    call.cos = p.cos, call.sin = p.sin;
  }
  void expect_out_untouched() {
    for (float v : out_values) ASSERT_EQ(v, 7.0f);
  }
  LayerCase c;
  PlacedLayer p;
  TensorView x, out;
  std::vector<float> out_values;
  VisionAttentionCall call;
  VarlenBatch batch = VarlenBatch::from_lengths(std::vector<int64_t>{3, 5});
};

TEST_F(LayerErrors, NameTheArgument) {
  const TensorView short_x = TensorView::contiguous(c.x.data(), DType::f32, {7, 128});
  expect_error([&] { p.layer->forward(short_x, batch, out, call); }, ErrorCode::invalid_value, {"x: expected shape [8, 128]"});
  std::vector<uint16_t> half_out(8 * 128);
  const TensorView bf16_out = TensorView::contiguous(half_out.data(), DType::bf16, {8, 128});
  expect_error([&] { p.layer->forward(x, batch, bf16_out, call); }, ErrorCode::invalid_type, {"out: dtype bf16"});
  VisionAttentionCall no_rope;
  expect_error([&] { p.layer->forward(x, batch, out, no_rope); }, ErrorCode::invalid_value, {"cos: missing"});
  VisionAttentionCall narrow = call;
  narrow.sin = TensorView::contiguous(p.sin->data, DType::f32, {8, 16});
  expect_error([&] { p.layer->forward(x, batch, out, narrow); }, ErrorCode::invalid_value, {"cos and sin: widths differ"});
  const TensorView overlapping = TensorView::contiguous(c.x.data(), DType::f32, {8, 128});
  expect_error([&] { p.layer->forward(x, batch, overlapping, call); }, ErrorCode::invalid_value, {"out: its memory overlaps x"});
  VisionAttentionCall bad_backend = call;
  bad_backend.backend = "nope";
  expect_error([&] { p.layer->forward(x, batch, out, bad_backend); }, ErrorCode::backend_unavailable, {"nope"});
  VisionAttentionCall misaligned = call;
  misaligned.cos->data = static_cast<char*>(misaligned.cos->data) + 1;  // found by the fuzzer
  expect_error([&] { p.layer->forward(x, batch, out, misaligned); }, ErrorCode::invalid_value,
               {"cos: data pointer", "is not aligned to its f32 element size (4 bytes)"});
  expect_out_untouched();
}

TEST_F(LayerErrors, AnEmptyBatchWritesNothing) {
  const VarlenBatch empty = VarlenBatch::from_lengths(std::vector<int64_t>{0, 0});
  const TensorView none = TensorView::contiguous(nullptr, DType::f32, {0, 128});
  VisionAttentionCall no_tokens;
  no_tokens.cos = TensorView::contiguous(nullptr, DType::f32, {0, 32});
  no_tokens.sin = no_tokens.cos;
  p.layer->forward(none, empty, none, no_tokens);  // found by the fuzzer: once pointed into no scratch
}

TEST_F(LayerErrors, ConfigAndWeights) {
  VisionAttentionConfig config = c.config;
  config.num_kv_heads = 3;
  VisionAttentionWeights w;
  w.qkv_weight = TensorView::contiguous(c.qkv_weight.data(), DType::f32, {384, 128});
  w.proj_weight = TensorView::contiguous(c.proj_weight.data(), DType::f32, {128, 128});
  w.qkv_bias = TensorView::contiguous(c.qkv_bias.data(), DType::f32, {384});
  w.proj_bias = TensorView::contiguous(c.proj_bias.data(), DType::f32, {128});
  expect_error([&] { VisionAttentionLayer(config, w); }, ErrorCode::invalid_value, {"config.num_kv_heads=3: must divide num_heads=4"});
  config = c.config;
  config.qkv_bias = false;
  expect_error([&] { VisionAttentionLayer(config, w); }, ErrorCode::invalid_value, {"weights.qkv_bias: given, but config.qkv_bias"});
  config = c.config;
  w.proj_weight = TensorView::contiguous(c.proj_weight.data(), DType::f32, {128, 64});
  expect_error([&] { VisionAttentionLayer(config, w); }, ErrorCode::invalid_value, {"weights.proj_weight: expected shape [128, 128], got [128, 64]"});
  config.qk_norm = QkNorm::full;
  w.proj_weight = TensorView::contiguous(c.proj_weight.data(), DType::f32, {128, 128});
  expect_error([&] { VisionAttentionLayer(config, w); }, ErrorCode::invalid_value, {"weights.q_norm_weight: missing, but config.qk_norm asks for it"});
  config.qk_norm = QkNorm::none;
  config.head_dim = 33;
  expect_error([&] { VisionAttentionLayer(config, w); }, ErrorCode::invalid_value, {"rope rotate_half needs an even head_dim"});
}

// A safetensors file of the given tensors (f32 data; bf16 for names in `as_bf16`).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                       const std::vector<std::string>& as_bf16 = {}) {
  std::string header = "{";
  std::string data;
  for (const auto& [name, view] : tensors) {
    const bool bf16 = std::find(as_bf16.begin(), as_bf16.end(), name) != as_bf16.end();
    const std::vector<float> values = layer::read_as_f32(view);
    const size_t begin = data.size();
    for (float v : values) {
      if (bf16) {
        const uint16_t h = float_to_bf16(v);
        data.append(reinterpret_cast<const char*>(&h), 2);
      } else {
        data.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    std::string shape;
    for (int i = 0; i < view.rank; ++i) shape += (i ? "," : "") + std::to_string(view.shape[i]);
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" + (bf16 ? "BF16" : "F32") + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += ",\"__metadata__\":{\"format\":\"pt\"}}";
  std::ofstream out(path, std::ios::binary);
  const uint64_t size = header.size();
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << header << data;
}

TEST(LayerSafetensors, FusedAndSplitNamesLoadTheSameLayer) {
  const Shape& shape = shapes()[3];  // per-head norm, GQA, rope
  const LayerCase c = testing::make_layer_case(shape.config, shape.lengths, DType::f32, 9);
  const std::vector<float> expected = run_layer(c, DType::f32, Device{});
  const VisionAttentionConfig& k = c.config;
  const int64_t q_rows = 128, kv_rows = 64, embed = 128;
  auto view = [](const std::vector<float>& v, std::initializer_list<int64_t> s, int64_t offset = 0) {
    return TensorView::contiguous(const_cast<float*>(v.data()) + offset, DType::f32, s);
  };
  const std::string dir = ::testing::TempDir();
  const std::string fused = dir + "/visattn_layer_fused.safetensors", split = dir + "/visattn_layer_split.safetensors";
  write_safetensors(fused, {{"blocks.0.attn.qkv.weight", view(c.qkv_weight, {256, embed})},
                            {"blocks.0.attn.qkv.bias", view(c.qkv_bias, {256})},
                            {"blocks.0.attn.q_norm.weight", view(c.q_norm, {32})},
                            {"blocks.0.attn.k_norm.weight", view(c.k_norm, {32})},
                            {"blocks.0.attn.proj.weight", view(c.proj_weight, {embed, 128})},
                            {"blocks.0.attn.proj.bias", view(c.proj_bias, {embed})}},
                    {"blocks.0.attn.q_norm.weight"});
  write_safetensors(split, {{"attn.q_proj.weight", view(c.qkv_weight, {q_rows, embed})},
                            {"attn.k_proj.weight", view(c.qkv_weight, {kv_rows, embed}, q_rows * embed)},
                            {"attn.v_proj.weight", view(c.qkv_weight, {kv_rows, embed}, (q_rows + kv_rows) * embed)},
                            {"attn.q_proj.bias", view(c.qkv_bias, {q_rows})},
                            {"attn.k_proj.bias", view(c.qkv_bias, {kv_rows}, q_rows)},
                            {"attn.v_proj.bias", view(c.qkv_bias, {kv_rows}, q_rows + kv_rows)},
                            {"attn.q_norm.weight", view(c.q_norm, {32})},
                            {"attn.k_norm.weight", view(c.k_norm, {32})},
                            {"attn.out_proj.weight", view(c.proj_weight, {embed, 128})},
                            {"attn.out_proj.bias", view(c.proj_bias, {embed})}});
  const VarlenBatch batch = VarlenBatch::from_lengths(c.lengths);
  const TensorView x = view(c.x, {c.tokens(), embed});
  VisionAttentionCall call;
  call.cos = view(c.cos, {c.tokens(), c.rope_width});
  call.sin = view(c.sin, {c.tokens(), c.rope_width});
  for (const auto& [path, prefix] : {std::pair{fused, "blocks.0.attn."}, std::pair{split, "attn."}}) {
    try {
      const VisionAttentionLayer layer = VisionAttentionLayer::from_safetensors(k, path, prefix, DType::f32);
      std::vector<float> out(expected.size());
      layer.forward(x, batch, TensorView::contiguous(out.data(), DType::f32, {c.tokens(), embed}), call);
      // q_norm went through bf16 in the fused file: only the split file matches exactly.
      if (path == split) EXPECT_EQ(out, expected);
      else for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], expected[i], 0.05) << i;
    } catch (const Error& e) {
      if (std::string(e.what()).find("no JSON reader") == std::string::npos) throw;
      GTEST_SKIP() << e.what();
    }
  }
  expect_error([&] { VisionAttentionLayer::from_safetensors(k, fused, "blocks.1.", DType::f32); }, ErrorCode::invalid_value, {"has no qkv.weight (or q_proj/k_proj/v_proj.weight) under prefix 'blocks.1.'"});
  expect_error([&] { VisionAttentionLayer::from_safetensors(k, dir + "/missing.safetensors", "", DType::f32); }, ErrorCode::invalid_value, {"cannot open"});
  std::filesystem::remove(fused);
  std::filesystem::remove(split);
}

TEST(WindowLayout, MatchesQwen25vlWindowIndexOnASmallGrid) {
  // One 4x6 patch image (2x3 merge units of 4 tokens), windows of 2x2 merge units
  // (window_size 56 = 2 units * merge 2 * patch 14): windows {0,1,3,4} and {2,5}.
  const WindowLayout layout = qwen25vl_window_layout({{1, 4, 6}}, 2, 56, 14);
  const std::vector<int64_t> units = {0, 1, 3, 4, 2, 5};
  ASSERT_EQ(layout.permutation.size(), 24u);
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(layout.permutation[i], units[i / 4] * 4 + int64_t(i % 4)) << i;
  EXPECT_EQ(layout.windows.cu_seqlens(), (std::vector<int32_t>{0, 16, 24}));
  EXPECT_EQ(layout.frames.cu_seqlens(), (std::vector<int32_t>{0, 24}));
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(layout.inverse[size_t(layout.permutation[i])], int64_t(i));
}

TEST(WindowLayout, FramesAndImagesKeepTheirTokensTogether) {
  // Two frames of a 16x16 image, then a 28x8 image; Qwen2.5-VL's defaults (windows of 4x4 units).
  const WindowLayout layout = qwen25vl_window_layout({{2, 16, 16}, {1, 28, 8}});
  EXPECT_EQ(layout.frames.lengths(), (std::vector<int32_t>{256, 256, 224}));
  // 8x8 units per frame: four 4x4-unit windows of 64 tokens; 14x4 units: four windows down the
  // image, the last 2 units tall.
  EXPECT_EQ(layout.windows.lengths(), (std::vector<int32_t>{64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 32}));
  std::vector<int64_t> sorted = layout.permutation;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], int64_t(i));
  expect_error([&] { qwen25vl_window_layout({{1, 5, 4}}); }, ErrorCode::invalid_value, {"grid_thw[0]=(1, 5, 4)"});
}

TEST(GatherTokens, PermutesRowsAndChecksIndices) {
  std::vector<float> src = {0, 1, 2, 3, 4, 5}, dst(6, -1);
  const TensorView s = TensorView::contiguous(src.data(), DType::f32, {3, 2});
  const TensorView d = TensorView::contiguous(dst.data(), DType::f32, {3, 2});
  const int64_t index[] = {2, 0, 1};
  gather_tokens(s, index, d);
  EXPECT_EQ(dst, (std::vector<float>{4, 5, 0, 1, 2, 3}));
  const int64_t bad[] = {0, 3, 1};
  expect_error([&] { gather_tokens(s, bad, d); }, ErrorCode::invalid_value, {"index[1]=3: must be in [0, 3)"});
}

}  // namespace
}  // namespace visattn
