// The Python extension `visattn._visattn`: nanobind bindings that only fill the C++ structs.
// Arrays cross by DLPack (torch, numpy, cupy, jax), zero-copy. Argument forms (lists, 0-d
// tensors, the SGLang list form, ml_dtypes bf16) are normalized in python/visattn.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/vector.h>

#include "visattn/visattn.h"

namespace nb = nanobind;
using namespace visattn;

namespace {

using Array = nb::ndarray<nb::ro>;

// dtype_override: "bf16" or "f16" for 16-bit data that crossed as uint16 (numpy has no bf16).
DType dtype_of(const Array& a, const char* name, const std::optional<std::string>& dtype_override) {
  const nb::dlpack::dtype t = a.dtype();
  if (dtype_override && t.bits == 16) {
    if (*dtype_override == "bf16") return DType::bf16;
    if (*dtype_override == "f16") return DType::f16;
  }
  if (t == nb::dtype<float>()) return DType::f32;
  if (t.code == uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 16) return DType::f16;
  if (t.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && t.bits == 16) return DType::bf16;
  throw Error(ErrorCode::invalid_type,
              std::string(name) + ": dtype (DLPack code " + std::to_string(t.code) + ", " +
                  std::to_string(t.bits) + " bits) is not supported; use float32, float16 or bfloat16");
}

TensorView to_view(const Array& a, const char* name, const std::optional<std::string>& dtype_override) {
  if (a.ndim() < 1 || a.ndim() > TensorView::kMaxRank) {
    throw Error(ErrorCode::invalid_type, std::string(name) + ": expected 1 to 4 dimensions, got " +
                                             std::to_string(a.ndim()));
  }
  TensorView view;
  view.data = const_cast<void*>(a.data());
  view.dtype = dtype_of(a, name, dtype_override);
  view.rank = int(a.ndim());
  for (int i = 0; i < view.rank; ++i) {
    view.shape[i] = int64_t(a.shape(i));
    view.stride[i] = a.stride(i);
  }
  if (a.device_type() == nb::device::cpu::value) {
    view.device = {DeviceType::cpu, 0};
  } else if (a.device_type() == nb::device::cuda::value) {
    view.device = {DeviceType::cuda, a.device_id()};
  } else {
    throw Error(ErrorCode::invalid_type, std::string(name) + ": DLPack device type " +
                                             std::to_string(a.device_type()) +
                                             " is not supported (cpu or cuda)");
  }
  return view;
}

void attention_binding(const Array& q, const Array& k, const Array& v, const Array& out,
                       const VarlenBatch& batch, std::optional<double> softmax_scale,
                       int64_t window_left, int64_t window_right, std::optional<Array> sinks,
                       std::optional<Array> lse, const std::string& backend, int num_threads,
                       std::optional<std::string> dtype_override, uintptr_t cuda_stream) {
  AttentionOptions options;
  options.softmax_scale = softmax_scale;
  options.window_left = window_left;
  options.window_right = window_right;
  options.num_threads = num_threads;
  options.cuda_stream = reinterpret_cast<void*>(cuda_stream);
  if (sinks) options.sinks = to_view(*sinks, "sinks", std::nullopt);
  if (lse) options.lse = to_view(*lse, "lse", std::nullopt);
  const TensorView qv = to_view(q, "q", dtype_override), kv = to_view(k, "k", dtype_override),
                   vv = to_view(v, "v", dtype_override), ov = to_view(out, "out", dtype_override);
  nb::gil_scoped_release release;  // other Python threads run meanwhile
  attention(qv, kv, vv, ov, batch, options, backend);
}

QkNorm qk_norm_of(const std::string& name) {
  if (name == "none") return QkNorm::none;
  if (name == "full") return QkNorm::full;
  if (name == "per_head") return QkNorm::per_head;
  throw Error(ErrorCode::invalid_value, "qk_norm: '" + name + "' is not one of none, full, per_head");
}

Rope rope_of(const std::string& name) {
  if (name == "none") return Rope::none;
  if (name == "rotate_half") return Rope::rotate_half;
  throw Error(ErrorCode::invalid_value, "rope: '" + name + "' is not one of none, rotate_half");
}

std::optional<TensorView> optional_view(const std::optional<Array>& a, const char* name,
                                        const std::optional<std::string>& dtype_override) {
  if (!a) return std::nullopt;
  return to_view(*a, name, dtype_override);
}

VisionAttentionLayer make_layer(int64_t embed_dim, int num_heads, int num_kv_heads, int head_dim, bool qkv_bias,
                                bool proj_bias, const std::string& qk_norm, double qk_norm_eps,
                                const std::string& rope, std::optional<double> softmax_scale,
                                const Array& qkv_weight, std::optional<Array> qkv_bias_w,
                                std::optional<Array> q_norm_weight, std::optional<Array> k_norm_weight,
                                const Array& proj_weight, std::optional<Array> proj_bias_w,
                                std::optional<std::string> dtype_override) {
  VisionAttentionConfig config;
  config.embed_dim = embed_dim, config.num_heads = num_heads, config.num_kv_heads = num_kv_heads;
  config.head_dim = head_dim, config.qkv_bias = qkv_bias, config.proj_bias = proj_bias;
  config.qk_norm = qk_norm_of(qk_norm), config.qk_norm_eps = qk_norm_eps, config.rope = rope_of(rope);
  config.softmax_scale = softmax_scale;
  VisionAttentionWeights w;
  w.qkv_weight = to_view(qkv_weight, "qkv_weight", dtype_override);
  w.qkv_bias = optional_view(qkv_bias_w, "qkv_bias", dtype_override);
  w.q_norm_weight = optional_view(q_norm_weight, "q_norm_weight", std::nullopt);
  w.k_norm_weight = optional_view(k_norm_weight, "k_norm_weight", std::nullopt);
  w.proj_weight = to_view(proj_weight, "proj_weight", dtype_override);
  w.proj_bias = optional_view(proj_bias_w, "proj_bias", dtype_override);
  return VisionAttentionLayer(config, w);
}

nb::dict backend_dict(const BackendInfo& b) {
  nb::dict d;
  d["name"] = b.name;
  d["description"] = b.description;
  d["device"] = b.device == DeviceType::cpu ? "cpu" : "cuda";
  d["available"] = b.available;
  d["unavailable_reason"] = b.unavailable_reason;
  nb::list dtypes;
  for (DType t : b.dtypes) dtypes.append(dtype_name(t));
  d["dtypes"] = dtypes;
  d["head_dims"] = b.head_dims;
  d["max_head_dim"] = b.max_head_dim;
  d["detail"] = b.detail;
  d["plans_built"] = b.plans_built;
  return d;
}

}  // namespace

NB_MODULE(_visattn, m) {
  m.doc() = "visattn C++ core (use the visattn package, not this module)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.code()) {
        case ErrorCode::invalid_value:
        case ErrorCode::unsupported: PyErr_SetString(PyExc_ValueError, e.what()); break;
        case ErrorCode::invalid_type: PyErr_SetString(PyExc_TypeError, e.what()); break;
        default: PyErr_SetString(PyExc_RuntimeError, e.what());
      }
    }
  });

  nb::class_<VarlenBatch>(m, "VarlenBatch")
      .def_static("from_cu_seqlens",
                  [](const std::vector<int64_t>& cu, std::optional<int64_t> max_seqlen) {
                    return VarlenBatch::from_cu_seqlens(std::span<const int64_t>(cu), max_seqlen);
                  },
                  nb::arg("cu_seqlens"), nb::arg("max_seqlen") = nb::none())
      .def_static("from_lengths",
                  [](const std::vector<int64_t>& lengths) { return VarlenBatch::from_lengths(lengths); },
                  nb::arg("lengths"))
      .def_static("uniform", &VarlenBatch::uniform, nb::arg("num_images"), nb::arg("seqlen"))
      .def_prop_ro("num_images", &VarlenBatch::num_images)
      .def_prop_ro("total_tokens", &VarlenBatch::total_tokens)
      .def_prop_ro("max_seqlen", &VarlenBatch::max_seqlen)
      .def_prop_ro("cu_seqlens", &VarlenBatch::cu_seqlens)
      .def_prop_ro("lengths", &VarlenBatch::lengths)
      .def_prop_ro("batch_bucket", &VarlenBatch::batch_bucket)
      .def_prop_ro("max_seqlen_bucket", &VarlenBatch::max_seqlen_bucket)
      .def("is_uniform", &VarlenBatch::is_uniform)
      .def("prepare",
           [](VarlenBatch& b, int device, uintptr_t stream) {
             b.prepare(Device{DeviceType::cuda, device}, reinterpret_cast<void*>(stream));
           },
           nb::arg("device"), nb::arg("stream"))
      .def("update_device",
           [](VarlenBatch& b, const VarlenBatch& other, uintptr_t stream) {
             b.update_device(other, reinterpret_cast<void*>(stream));
           },
           nb::arg("other"), nb::arg("stream"))
      .def("element_offsets", &VarlenBatch::element_offsets, nb::arg("token_stride"),
           nb::arg("tensor_name") = "tensor")
      .def("packed_indptrs", &VarlenBatch::packed_indptrs, nb::arg("qk_token_stride"),
           nb::arg("v_token_stride"), nb::arg("o_token_stride"));

  m.def("attention", &attention_binding, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"),
        nb::arg("batch"), nb::arg("softmax_scale").none(), nb::arg("window_left"),
        nb::arg("window_right"), nb::arg("sinks").none(), nb::arg("lse").none(), nb::arg("backend"),
        nb::arg("num_threads"), nb::arg("dtype_override").none(), nb::arg("cuda_stream"));

  nb::class_<VisionAttentionLayer>(m, "VisionAttentionLayer")
      .def_static("create", &make_layer, nb::arg("embed_dim"), nb::arg("num_heads"), nb::arg("num_kv_heads"),
                  nb::arg("head_dim"), nb::arg("qkv_bias"), nb::arg("proj_bias"), nb::arg("qk_norm"),
                  nb::arg("qk_norm_eps"), nb::arg("rope"), nb::arg("softmax_scale").none(), nb::arg("qkv_weight"),
                  nb::arg("qkv_bias_weight").none(), nb::arg("q_norm_weight").none(),
                  nb::arg("k_norm_weight").none(), nb::arg("proj_weight"), nb::arg("proj_bias_weight").none(),
                  nb::arg("dtype_override").none())
      .def_static(
          "from_safetensors",
          [](int64_t embed_dim, int num_heads, int num_kv_heads, int head_dim, bool qkv_bias, bool proj_bias,
             const std::string& qk_norm, double qk_norm_eps, const std::string& rope,
             std::optional<double> softmax_scale, const std::string& path, const std::string& prefix,
             const std::string& dtype, int device) {
            VisionAttentionConfig config;
            config.embed_dim = embed_dim, config.num_heads = num_heads, config.num_kv_heads = num_kv_heads;
            config.head_dim = head_dim, config.qkv_bias = qkv_bias, config.proj_bias = proj_bias;
            config.qk_norm = qk_norm_of(qk_norm), config.qk_norm_eps = qk_norm_eps, config.rope = rope_of(rope);
            config.softmax_scale = softmax_scale;
            const DType t = dtype == "bf16" ? DType::bf16 : dtype == "f16" ? DType::f16 : DType::f32;
            const Device d = device < 0 ? Device{} : Device{DeviceType::cuda, device};
            return VisionAttentionLayer::from_safetensors(config, path, prefix, t, d);
          },
          nb::arg("embed_dim"), nb::arg("num_heads"), nb::arg("num_kv_heads"), nb::arg("head_dim"),
          nb::arg("qkv_bias"), nb::arg("proj_bias"), nb::arg("qk_norm"), nb::arg("qk_norm_eps"), nb::arg("rope"),
          nb::arg("softmax_scale").none(), nb::arg("path"), nb::arg("prefix"), nb::arg("dtype"), nb::arg("device"))
      .def("forward",
           [](const VisionAttentionLayer& layer, const Array& x, const VarlenBatch& batch, const Array& out,
              std::optional<Array> cos, std::optional<Array> sin, const std::string& backend, int num_threads,
              std::optional<std::string> dtype_override, uintptr_t cuda_stream) {
             VisionAttentionCall call;
             call.cos = optional_view(cos, "cos", std::nullopt);
             call.sin = optional_view(sin, "sin", std::nullopt);
             call.backend = backend, call.num_threads = num_threads;
             call.cuda_stream = reinterpret_cast<void*>(cuda_stream);
             const TensorView xv = to_view(x, "x", dtype_override), ov = to_view(out, "out", dtype_override);
             nb::gil_scoped_release release;
             layer.forward(xv, batch, ov, call);
           },
           nb::arg("x"), nb::arg("batch"), nb::arg("out"), nb::arg("cos").none(), nb::arg("sin").none(),
           nb::arg("backend"), nb::arg("num_threads"), nb::arg("dtype_override").none(), nb::arg("cuda_stream"))
      .def_prop_ro("embed_dim", [](const VisionAttentionLayer& l) { return l.config().embed_dim; })
      .def_prop_ro("num_heads", [](const VisionAttentionLayer& l) { return l.config().num_heads; })
      .def_prop_ro("num_kv_heads", [](const VisionAttentionLayer& l) { return l.config().num_kv_heads; })
      .def_prop_ro("head_dim", [](const VisionAttentionLayer& l) { return l.config().head_dim; })
      .def_prop_ro("dtype", [](const VisionAttentionLayer& l) { return std::string(dtype_name(l.dtype())); })
      .def_prop_ro("device", [](const VisionAttentionLayer& l) { return device_name(l.device()); });
  m.def("layer_gemm", [](const std::string& device) {
    return VisionAttentionLayer::gemm_detail(device == "cuda" ? DeviceType::cuda : DeviceType::cpu);
  });
  m.def("qwen25vl_window_layout",
        [](const std::vector<std::array<int64_t, 3>>& grid_thw, int spatial_merge_size, int window_size,
           int patch_size) {
          WindowLayout layout = qwen25vl_window_layout(grid_thw, spatial_merge_size, window_size, patch_size);
          return nb::make_tuple(layout.permutation, layout.inverse, layout.windows, layout.frames);
        },
        nb::arg("grid_thw"), nb::arg("spatial_merge_size"), nb::arg("window_size"), nb::arg("patch_size"));

  m.def("backends", [] {
    nb::list result;
    for (const BackendInfo& b : backends()) result.append(backend_dict(b));
    return result;
  });
  m.def("auto_backend", [](const std::string& device) {
    return auto_backend(device == "cuda" ? DeviceType::cuda : DeviceType::cpu);
  });
  m.def("system_info", [] {
    const SystemInfo s = system_info();
    nb::dict d;
    d["version"] = s.version;
    d["compiler"] = s.compiler;
    d["build_type"] = s.build_type;
    d["sanitizers"] = s.sanitizers;
    d["cuda_compiled"] = s.cuda_compiled;
    d["cpu_model"] = s.cpu_model;
    d["cpu_features"] = s.cpu_features;
    d["num_threads"] = s.num_threads;
    d["gpus"] = s.gpus;
    return d;
  });
  m.attr("__version__") = version();
}
