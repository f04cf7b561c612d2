// VisionAttentionLayer::from_safetensors: reads the layer's tensors (only those) from a
// safetensors file: 8 bytes of little-endian header size, a JSON header of
// {name: {dtype, shape, data_offsets}}, then the data.
#include <cstring>
#include <fstream>

#include "core/error_message.h"
#include "core/half.h"
#include "layer/layer_memory.h"
#include "layer/layer_state.h"

#if VISATTN_HAVE_NLOHMANN_JSON
#include <nlohmann/json.hpp>
#endif

namespace visattn {

#if VISATTN_HAVE_NLOHMANN_JSON
namespace {

struct Loaded {
  std::vector<float> values;
  std::vector<int64_t> shape;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) fail(ErrorCode::invalid_value, "path: cannot open '", path, "'");
    unsigned char size_bytes[8] = {};
    in_.read(reinterpret_cast<char*>(size_bytes), 8);
    uint64_t size = 0;
    for (int i = 7; i >= 0; --i) size = size << 8 | size_bytes[i];
    in_.seekg(0, std::ios::end);
    const uint64_t file_size = uint64_t(in_.tellg());
    if (!in_ || file_size < 8 || size > file_size - 8) {
      fail(ErrorCode::invalid_value, "path: '", path, "' is not a safetensors file (header size ", size, ", file ",
           file_size, " bytes)");
    }
    std::string header(size, '\0');
    in_.seekg(8);
    in_.read(header.data(), std::streamsize(size));
    header_ = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
    if (!header_.is_object()) fail(ErrorCode::invalid_value, "path: '", path, "' has no valid JSON header");
    data_start_ = 8 + size;
    data_size_ = file_size - data_start_;
  }

  bool has(const std::string& name) const { return header_.contains(name); }

  Loaded read(const std::string& name) {
    const nlohmann::json& entry = header_.at(name);
    const std::string dtype = entry.value("dtype", "");
    const int element = dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : dtype == "F64" ? 8 : 0;
    if (element == 0) {
      fail(ErrorCode::invalid_type, "'", name, "' in '", path_, "': dtype ", dtype, " is not F32, F16, BF16 or F64");
    }
    Loaded loaded;
    int64_t count = 1;
    for (const auto& dim : entry.at("shape")) loaded.shape.push_back(dim.get<int64_t>()), count *= loaded.shape.back();
    const uint64_t begin = entry.at("data_offsets").at(0), end = entry.at("data_offsets").at(1);
    if (end < begin || end > data_size_ || end - begin != uint64_t(count) * element) {
      fail(ErrorCode::invalid_value, "'", name, "' in '", path_, "': data_offsets [", begin, ", ", end,
           "] do not hold ", count, " ", dtype, " values inside the file");
    }
    std::vector<unsigned char> bytes(end - begin);
    in_.seekg(std::streamoff(data_start_ + begin));
    in_.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!in_) fail(ErrorCode::invalid_value, "'", name, "' in '", path_, "': read failed");
    loaded.values.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i) {
      const unsigned char* p = bytes.data() + i * element;  // safetensors is little-endian, as are our targets
      if (element == 8) {
        double v;
        std::memcpy(&v, p, 8);
        loaded.values[size_t(i)] = float(v);
      } else {
        loaded.values[size_t(i)] = load_as_float(p, dtype == "F32" ? DType::f32 : dtype == "F16" ? DType::f16 : DType::bf16, 0);
      }
    }
    return loaded;
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  nlohmann::json header_;
  uint64_t data_start_ = 0, data_size_ = 0;
};

// The first of `names` (after the prefix) that the file holds, or "".
std::string first_present(const SafetensorsFile& file, const std::string& prefix,
                          std::initializer_list<const char*> names, const char* suffix) {
  for (const char* name : names) {
    if (file.has(prefix + name + suffix)) return prefix + name + suffix;
  }
  return "";
}

}  // namespace
#endif

VisionAttentionLayer VisionAttentionLayer::from_safetensors(const VisionAttentionConfig& config, const std::string& path,
                                                            const std::string& prefix, DType dtype, Device device) {
#if !VISATTN_HAVE_NLOHMANN_JSON
  (void)config, (void)path, (void)prefix, (void)dtype, (void)device;
  fail(ErrorCode::backend_unavailable, "from_safetensors: this build has no JSON reader (nlohmann-json was not found "
       "when it was built); load the tensors yourself and pass them as VisionAttentionWeights");
#else
  SafetensorsFile file(path);
  std::vector<std::shared_ptr<void>> owned;
  // A tensor converted to the layer's dtype (norm weights: f32) on the device, as a view.
  auto place = [&](const Loaded& loaded, DType as) {
    owned.push_back(layer::store_on_device(loaded.values, as, device));
    TensorView view;
    view.data = owned.back().get(), view.dtype = as, view.device = device, view.rank = int(loaded.shape.size());
    if (view.rank < 1 || view.rank > 2) fail(ErrorCode::invalid_value, "a layer weight in '", path, "' has rank ", view.rank);
    int64_t stride = 1;
    for (int i = view.rank - 1; i >= 0; --i) view.shape[i] = loaded.shape[size_t(i)], view.stride[i] = stride, stride *= view.shape[i];
    return view;
  };
  // The fused projection, or q/k/v projections stacked by rows (their biases likewise).
  auto qkv = [&](const char* suffix) -> std::optional<Loaded> {
    if (file.has(prefix + "qkv" + suffix)) return file.read(prefix + "qkv" + suffix);
    if (!file.has(prefix + "q_proj" + suffix)) return std::nullopt;
    Loaded stacked;
    for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
      if (!file.has(prefix + part + suffix)) fail(ErrorCode::invalid_value, "'", path, "' has ", prefix, "q_proj", suffix, " but no ", prefix, part, suffix);
      Loaded one = file.read(prefix + part + suffix);
      if (stacked.shape.empty()) stacked.shape = one.shape;
      else stacked.shape[0] += one.shape[0];
      stacked.values.insert(stacked.values.end(), one.values.begin(), one.values.end());
    }
    return stacked;
  };
  auto missing = [&](const char* what) {
    fail(ErrorCode::invalid_value, "'", path, "' has no ", what, " under prefix '", prefix, "'");
  };
  VisionAttentionWeights w;
  const std::optional<Loaded> qkv_weight = qkv(".weight");
  if (!qkv_weight) missing("qkv.weight (or q_proj/k_proj/v_proj.weight)");
  w.qkv_weight = place(*qkv_weight, dtype);
  if (config.qkv_bias) {
    const std::optional<Loaded> bias = qkv(".bias");
    if (!bias) missing("qkv.bias (or q_proj/k_proj/v_proj.bias; set config.qkv_bias=false if the layer has none)");
    w.qkv_bias = place(*bias, dtype);
  }
  const std::string proj = first_present(file, prefix, {"proj", "out_proj", "o_proj", "projection_layer"}, ".weight");
  if (proj.empty()) missing("proj.weight (or out_proj, o_proj, projection_layer)");
  w.proj_weight = place(file.read(proj), dtype);
  if (config.proj_bias) {
    const std::string bias = proj.substr(0, proj.size() - 7) + ".bias";
    if (!file.has(bias)) missing((bias.substr(prefix.size()) + " (set config.proj_bias=false if the layer has none)").c_str());
    w.proj_bias = place(file.read(bias), dtype);
  }
  if (config.qk_norm != QkNorm::none) {
    for (auto [target, name] : {std::pair{&w.q_norm_weight, "q_norm.weight"}, std::pair{&w.k_norm_weight, "k_norm.weight"}}) {
      if (!file.has(prefix + name)) missing(name);
      *target = place(file.read(prefix + name), DType::f32);
    }
  }
  VisionAttentionLayer layer(config, w);
  for (auto& storage : owned) layer.state_->owned.push_back(std::move(storage));
  return layer;
#endif
}

}  // namespace visattn
