// The Python extension `visattn._visattn`: nanobind bindings that only fill the C++ structs.
// Arrays cross by DLPack (torch, numpy, cupy, jax), zero-copy. Argument forms (lists, 0-d
// tensors, the SGLang list form, ml_dtypes bf16) are normalized in python/visattn.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
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
