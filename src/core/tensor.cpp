#include <sstream>

#include "core/error_message.h"
#include "visattn/error.h"
#include "visattn/tensor.h"
#include "visattn/visattn.h"

namespace visattn {

const char* version() { return VISATTN_VERSION; }

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_value: return "invalid_value";
    case ErrorCode::invalid_type: return "invalid_type";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::backend_unavailable: return "backend_unavailable";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "unknown";
}

int dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

std::string device_name(Device device) {
  return device.type == DeviceType::cpu ? std::string("cpu") : concat("cuda:", device.index);
}

namespace {
std::string join(const int64_t* values, int count, const char* open, const char* close) {
  std::ostringstream os;
  os << open;
  for (int i = 0; i < count; ++i) os << (i ? ", " : "") << values[i];
  os << close;
  return os.str();
}

void set_shape(TensorView& view, std::initializer_list<int64_t> shape) {
  if (shape.size() < 1 || shape.size() > TensorView::kMaxRank) {
    fail(ErrorCode::invalid_value, "TensorView: rank must be 1 to ", TensorView::kMaxRank,
         ", got ", shape.size());
  }
  view.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t extent : shape) view.shape[i++] = extent;
}
}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  set_shape(view, shape);
  int64_t stride = 1;
  for (int i = view.rank - 1; i >= 0; --i) {
    view.stride[i] = stride;
    stride *= view.shape[i];
  }
  return view;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device) {
  if (strides.size() != shape.size()) {
    fail(ErrorCode::invalid_value, "TensorView: ", strides.size(), " strides for ", shape.size(),
         " dimensions");
  }
  TensorView view = contiguous(data, dtype, shape, device);
  int i = 0;
  for (int64_t stride : strides) view.stride[i++] = stride;
  return view;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return -1;
  }
  return n;
}

std::string TensorView::shape_string() const { return join(shape, rank, "[", "]"); }
std::string TensorView::stride_string() const { return join(stride, rank, "(", ")"); }

}  // namespace visattn
