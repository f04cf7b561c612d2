#include "layer/cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error_message.h"

namespace visattn::layer {

namespace {

// The entry points the layer uses, resolved from the loaded library.
struct Api {
  std::string path, problem;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

template <typename F>
void resolve(void* lib, const char* name, F& target, std::string& problem) {
  target = reinterpret_cast<F>(dlsym(lib, name));
  if (!target && problem.empty()) problem = concat(name, " not found in the loaded cuBLASLt");
}

Api load() {
  Api api;
  const std::string soname = concat("libcublasLt.so.", CUBLAS_VER_MAJOR);
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("VISATTN_CUBLASLT_LIB")) candidates.push_back(path);
  candidates.push_back(soname);
  if (const char* home = std::getenv("CUDA_HOME")) candidates.push_back(concat(home, "/lib64/", soname));
  candidates.push_back("/usr/local/cuda/lib64/" + soname);
  void* lib = nullptr;
  for (const std::string& candidate : candidates) {
    if ((lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      api.path = candidate;
      break;
    }
  }
  if (!lib) {
    api.problem = concat("cannot load ", soname, " (the GPU layer's GEMMs): install the CUDA toolkit's cuBLAS ",
                         CUBLAS_VER_MAJOR, ", import torch first, or set VISATTN_CUBLASLT_LIB to its path");
    return api;
  }
  resolve(lib, "cublasLtCreate", api.create, api.problem);
  resolve(lib, "cublasLtGetVersion", api.get_version, api.problem);
  resolve(lib, "cublasLtMatmulDescCreate", api.desc_create, api.problem);
  resolve(lib, "cublasLtMatmulDescDestroy", api.desc_destroy, api.problem);
  resolve(lib, "cublasLtMatmulDescSetAttribute", api.desc_set, api.problem);
  resolve(lib, "cublasLtMatrixLayoutCreate", api.layout_create, api.problem);
  resolve(lib, "cublasLtMatrixLayoutDestroy", api.layout_destroy, api.problem);
  resolve(lib, "cublasLtMatmulPreferenceCreate", api.pref_create, api.problem);
  resolve(lib, "cublasLtMatmulPreferenceDestroy", api.pref_destroy, api.problem);
  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", api.pref_set, api.problem);
  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", api.heuristic, api.problem);
  resolve(lib, "cublasLtMatmul", api.matmul, api.problem);
  return api;
}

const Api& api() {
  static const Api loaded = load();
  if (!loaded.problem.empty()) fail(ErrorCode::backend_unavailable, loaded.problem);
  return loaded;
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(ErrorCode::internal, "cuBLASLt ", what, " failed (status ", int(status), ")");
}

// A matmul's descriptors, built once per shape and kept: only the pointers change per call.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

void destroy(const Plan& plan) {
  const Api& lt = api();
  lt.layout_destroy(plan.a), lt.layout_destroy(plan.b), lt.layout_destroy(plan.c);
  lt.desc_destroy(plan.desc);
}

// Plans are keyed by shape, token count included; a process that sees more distinct shapes
// than this rebuilds them (the heuristic query costs tens of microseconds of host time).
constexpr size_t kMaxPlans = 512;

using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

Plan make_plan(cublasLtHandle_t handle, DType dtype, int64_t rows, int64_t out, int64_t in, int64_t ldx, int64_t ldw,
               int64_t ldy, bool bias) {
  const Api& lt = api();
  const cudaDataType_t type = dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  Plan plan;
  check(lt.desc_create(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  // Column-major view of y = x wᵀ: yᵀ [out, rows] = w [out, in] · xᵀ [in, rows], w stored as [in, out].
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  check(lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)), "set TRANSA");
  check(lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)), "set TRANSB");
  const cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  check(lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), "set EPILOGUE");
  check(lt.layout_create(&plan.a, type, uint64_t(in), uint64_t(out), ldw), "layout of w");
  check(lt.layout_create(&plan.b, type, uint64_t(in), uint64_t(rows), ldx), "layout of x");
  check(lt.layout_create(&plan.c, type, uint64_t(out), uint64_t(rows), ldy), "layout of y");
  cublasLtMatmulPreference_t preference = nullptr;
  check(lt.pref_create(&preference), "MatmulPreferenceCreate");
  const uint64_t workspace = kGemmWorkspaceBytes;
  check(lt.pref_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)),
        "set MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      lt.heuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.c, preference, 1, &result, &found);
  lt.pref_destroy(preference);
  check(status, "MatmulAlgoGetHeuristic");
  if (found == 0) {
    fail(ErrorCode::unsupported, "cuBLASLt has no algorithm for a ", dtype_name(dtype), " GEMM of ", rows, " x ", out,
         " x ", in);
  }
  plan.algo = result.algo;
  return plan;
}

}  // namespace

void linear_cuda(const void* x, int64_t ldx, int64_t rows, const void* w, int64_t ldw, const void* b, int64_t out_features,
                 int64_t in_features, void* y, int64_t ldy, DType dtype, int device, void* stream,
                 void* workspace) {
  if (rows == 0 || out_features == 0) return;
  const Api& lt = api();
  // One lock around plan lookup and enqueue: the bias pointer is an attribute of a descriptor
  // that calls of the same shape share, and enqueueing is cheap host work.
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;
  static std::map<PlanKey, Plan> plans;
  std::lock_guard<std::mutex> lock(mutex);
  cublasLtHandle_t& handle = handles[device];
  if (!handle) check(lt.create(&handle), "Create");
  const PlanKey key{device, int(dtype), rows, out_features, in_features, ldx, ldw, ldy, b != nullptr};
  auto it = plans.find(key);
  if (it == plans.end()) {
    if (plans.size() >= kMaxPlans) {  // a stream of new token counts: start over
      for (auto& [_, old] : plans) destroy(old);
      plans.clear();
    }
    it = plans.emplace(key, make_plan(handle, dtype, rows, out_features, in_features, ldx, ldw, ldy, b != nullptr)).first;
  }
  const Plan& plan = it->second;
  if (b) check(lt.desc_set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)), "set BIAS_POINTER");
  const float one = 1.0f, zero = 0.0f;
  check(lt.matmul(handle, plan.desc, &one, w, plan.a, x, plan.b, &zero, y, plan.c, y, plan.c, &plan.algo, workspace,
                  kGemmWorkspaceBytes, static_cast<cudaStream_t>(stream)),
        "Matmul");
}

std::string cublaslt_description() {
  try {
    const Api& lt = api();
    const size_t version = lt.get_version();
    return concat("cuBLASLt ", version / 10000, ".", version / 100 % 100, ".", version % 100, " (", lt.path, ")");
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace visattn::layer
