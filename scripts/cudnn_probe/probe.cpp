// Probe: ragged (THD) cuDNN SDPA fprop through cudnn-frontend 1.32, fused-qkv strided views,
// GQA, zero-length sequences, LSE (token-major and head-major), int32/int64 offsets, CUDA graph capture.
#include <cudnn_frontend.h>
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <climits>

namespace fe = cudnn_frontend;
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s @%d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

enum { Q = 1, K, V, O, ST, SQ, SKV, OFF_QKV, OFF_O, OFF_ST };

static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return (uint16_t)(u >> 16); }
static float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

struct Cfg { int B, S, Hq, Hkv, D; int stats; bool i64; };  // stats: 0 none, 1 token-major [T,H], 2 head-major [H,T]

std::shared_ptr<fe::graph::Graph> build(const Cfg& c, int64_t T, cudnnHandle_t h, std::string& err) {
  int64_t tok = (int64_t)(c.Hq + 2 * c.Hkv) * c.D;  // fused qkv token stride
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16).set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto odt = c.i64 ? fe::DataType_t::INT64 : fe::DataType_t::INT32;
  auto idx = [&](int uid, const char* n, int64_t len, fe::DataType_t dt) {
    return g->tensor(fe::graph::Tensor_attributes().set_uid(uid).set_name(n).set_dim({len, 1, 1, 1})
                         .set_stride({1, 1, 1, 1}).set_data_type(dt));
  };
  auto off_qkv = idx(OFF_QKV, "off_qkv", c.B + 1, odt);
  auto off_o = idx(OFF_O, "off_o", c.B + 1, odt);
  auto mk = [&](int uid, const char* n, int H) {
    auto t = g->tensor(fe::graph::Tensor_attributes().set_uid(uid).set_name(n).set_dim({c.B, H, c.S, c.D})
                           .set_stride({(int64_t)c.S * tok, c.D, tok, 1}));
    t->set_ragged_offset(off_qkv);
    return t;
  };
  auto q = mk(Q, "q", c.Hq), k = mk(K, "k", c.Hkv), v = mk(V, "v", c.Hkv);
  auto opts = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(c.stats != 0)
                  .set_attn_scale(1.0f / std::sqrt((float)c.D)).set_padding_mask(true)
                  .set_seq_len_q(idx(SQ, "sq", c.B, fe::DataType_t::INT32))
                  .set_seq_len_kv(idx(SKV, "skv", c.B, fe::DataType_t::INT32));
  auto [o, st] = g->sdpa(q, k, v, opts);
  o->set_output(true).set_uid(O).set_dim({c.B, c.Hq, c.S, c.D})
      .set_stride({(int64_t)c.S * c.Hq * c.D, c.D, (int64_t)c.Hq * c.D, 1}).set_ragged_offset(off_o);
  if (c.stats) {
    auto off_s = idx(OFF_ST, "off_st", c.B + 1, odt);
    st->set_output(true).set_uid(ST).set_data_type(fe::DataType_t::FLOAT).set_dim({c.B, c.Hq, c.S, 1}).set_ragged_offset(off_s);
    if (c.stats == 1) st->set_stride({(int64_t)c.S * c.Hq, 1, c.Hq, 1});
    else st->set_stride({(int64_t)c.S, T, 1, 1});
  }
  fe::error_t e;
  if (!(e = g->validate()).is_good() || !(e = g->build_operation_graph(h)).is_good() ||
      !(e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK})).is_good() ||
      !(e = g->check_support()).is_good() || !(e = g->build_plans()).is_good()) {
    err = e.get_message();
    return nullptr;
  }
  return g;
}

// CPU reference for one layout; returns max abs err of O and of LSE (over valid tokens)
void reference(const Cfg& c, const std::vector<int>& lens, const std::vector<uint16_t>& qkv, std::vector<float>& o_ref, std::vector<float>& lse_ref) {
  int64_t tok = (int64_t)(c.Hq + 2 * c.Hkv) * c.D; int64_t T = 0; for (int l : lens) T += l;
  o_ref.assign(T * c.Hq * c.D, 0.f); lse_ref.assign(T * c.Hq, 0.f);
  float sc = 1.0f / std::sqrt((float)c.D); int64_t base = 0; int grp = c.Hq / c.Hkv;
  std::vector<float> s;
  for (int L : lens) {
    for (int hq = 0; hq < c.Hq; ++hq) {
      int hk = hq / grp;
      for (int i = 0; i < L; ++i) {
        s.assign(L, 0.f); float mx = -INFINITY;
        const uint16_t* qp = &qkv[(base + i) * tok + (int64_t)hq * c.D];
        for (int j = 0; j < L; ++j) {
          const uint16_t* kp = &qkv[(base + j) * tok + (int64_t)(c.Hq + hk) * c.D];
          float a = 0; for (int d = 0; d < c.D; ++d) a += bf2f(qp[d]) * bf2f(kp[d]);
          s[j] = a * sc; mx = std::max(mx, s[j]);
        }
        double sum = 0; for (int j = 0; j < L; ++j) { s[j] = std::exp(s[j] - mx); sum += s[j]; }
        float* op = &o_ref[((base + i) * c.Hq + hq) * c.D];
        for (int j = 0; j < L; ++j) {
          const uint16_t* vp = &qkv[(base + j) * tok + (int64_t)(c.Hq + c.Hkv + hk) * c.D];
          float p = (float)(s[j] / sum); for (int d = 0; d < c.D; ++d) op[d] += p * bf2f(vp[d]);
        }
        lse_ref[(base + i) * c.Hq + hq] = mx + (float)std::log(sum);
      }
    }
    base += L;
  }
}

struct Bufs { void *qkv, *o, *st, *sq, *off_qkv, *off_o, *off_st, *ws; };

void upload_meta(const Cfg& c, const std::vector<int>& lens, int64_t T, Bufs& b, cudaStream_t s) {
  int64_t tok = (int64_t)(c.Hq + 2 * c.Hkv) * c.D;
  std::vector<int64_t> cu(c.B + 1, 0); for (int i = 0; i < c.B; ++i) cu[i + 1] = cu[i] + lens[i];
  auto put = [&](void* dst, int64_t mul) {
    if (c.i64) { std::vector<int64_t> v(c.B + 1); for (int i = 0; i <= c.B; ++i) v[i] = cu[i] * mul; CK(cudaMemcpyAsync(dst, v.data(), v.size() * 8, cudaMemcpyHostToDevice, s)); }
    else { std::vector<int32_t> v(c.B + 1); for (int i = 0; i <= c.B; ++i) v[i] = (int32_t)(cu[i] * mul); CK(cudaMemcpyAsync(dst, v.data(), v.size() * 4, cudaMemcpyHostToDevice, s)); }
  };
  put(b.off_qkv, tok); put(b.off_o, (int64_t)c.Hq * c.D); put(b.off_st, c.stats == 1 ? c.Hq : 1);
  CK(cudaMemcpyAsync(b.sq, lens.data(), c.B * 4, cudaMemcpyHostToDevice, s));
  CK(cudaStreamSynchronize(s));
}

void compare(const Cfg& c, const std::vector<int>& lens, const std::vector<uint16_t>& qkv, Bufs& b, int64_t T, int64_t HS, const char* tag) {
  std::vector<float> oref, lref; reference(c, lens, qkv, oref, lref);
  std::vector<uint16_t> o(T * c.Hq * c.D); CK(cudaMemcpy(o.data(), b.o, o.size() * 2, cudaMemcpyDeviceToHost));
  double eo = 0; int nan = 0; for (size_t i = 0; i < o.size(); ++i) { float x = bf2f(o[i]); if (!std::isfinite(x)) nan++; eo = std::max(eo, (double)std::fabs(x - oref[i])); }
  double el = 0;
  if (c.stats) {
    std::vector<float> l(std::max(T, HS) * c.Hq); CK(cudaMemcpy(l.data(), b.st, l.size() * 4, cudaMemcpyDeviceToHost));
    for (int64_t t = 0; t < T; ++t) for (int h = 0; h < c.Hq; ++h) {
      float x = c.stats == 1 ? l[t * c.Hq + h] : l[h * HS + t];
      el = std::max(el, (double)std::fabs(x - lref[t * c.Hq + h]));
    }
  }
  printf("  %-10s O maxerr %.4g (nonfinite %d)  LSE maxerr %.4g\n", tag, eo, nan, el);
}

int main() {
  int ver = (int)cudnnGetVersion(); printf("cudnn runtime %d, compiled %d, FE %d\n", ver, CUDNN_VERSION, CUDNN_FRONTEND_VERSION);
  cudnnHandle_t h; if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) { printf("cudnnCreate failed\n"); return 1; }
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); cudnnSetStream(h, s);
  std::vector<int> lens0 = {300, 0, 577, 64, 0, 0};  // B=6 bucket, zero-length padding entries
  std::vector<int> lens1 = {1, 577, 0, 256, 100, 7};  // same B, different lengths (for graph replay)
  std::vector<Cfg> cfgs = {{6, 1024, 8, 2, 64, 1, false}, {6, 1024, 8, 2, 72, 1, false}, {6, 1024, 8, 2, 80, 1, false},
                           {6, 1024, 8, 2, 128, 1, false}, {6, 1024, 8, 2, 128, 2, false}, {6, 1024, 8, 2, 128, 1, true},
                           {6, 1024, 8, 8, 96, 0, false}};
  std::mt19937 rng(1); std::normal_distribution<float> nd(0.f, 1.f);
  for (auto c : cfgs) {
    int64_t T = 0; for (int l : lens0) T += l; int64_t T1 = 0; for (int l : lens1) T1 += l; int64_t Tmax = std::max(T, T1);
    printf("cfg Hq=%d Hkv=%d D=%d stats=%d off=%s S=%d B=%d\n", c.Hq, c.Hkv, c.D, c.stats, c.i64 ? "i64" : "i32", c.S, c.B);
    std::string err; auto g = build(c, Tmax, h, err);
    if (!g) { printf("  BUILD FAILED: %s\n", err.c_str()); continue; }
    std::string pn; g->get_plan_name(pn); int64_t wsz = 0; g->get_workspace_size(wsz);
    printf("  plan %s  workspace %lld\n", pn.c_str(), (long long)wsz);
    int64_t tok = (int64_t)(c.Hq + 2 * c.Hkv) * c.D;
    std::vector<uint16_t> qkv(Tmax * tok); for (auto& x : qkv) x = f2bf(nd(rng));
    Bufs b{}; CK(cudaMalloc(&b.qkv, qkv.size() * 2)); CK(cudaMemcpy(b.qkv, qkv.data(), qkv.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&b.o, Tmax * c.Hq * c.D * 2)); CK(cudaMalloc(&b.st, Tmax * c.Hq * 4 + 16)); CK(cudaMalloc(&b.sq, 64));
    CK(cudaMalloc(&b.off_qkv, 128)); CK(cudaMalloc(&b.off_o, 128)); CK(cudaMalloc(&b.off_st, 128)); CK(cudaMalloc(&b.ws, wsz + 256));
    char* base = (char*)b.qkv;
    std::unordered_map<int64_t, void*> pack = {{Q, base}, {K, base + (int64_t)c.Hq * c.D * 2}, {V, base + (int64_t)(c.Hq + c.Hkv) * c.D * 2},
        {O, b.o}, {SQ, b.sq}, {SKV, b.sq}, {OFF_QKV, b.off_qkv}, {OFF_O, b.off_o}};
    if (c.stats) { pack[ST] = b.st; pack[OFF_ST] = b.off_st; }
    upload_meta(c, lens0, T, b, s);
    CK(cudaMemsetAsync(b.o, 0xFF, Tmax * c.Hq * c.D * 2, s));  // poison
    auto e = g->execute(h, pack, b.ws);
    CK(cudaStreamSynchronize(s));
    if (!e.is_good()) { printf("  EXECUTE FAILED: %s\n", e.get_message().c_str()); continue; }
    compare(c, lens0, qkv, b, T, Tmax, "direct");
    // CUDA graph capture (global mode: any sync/alloc inside would invalidate the capture)
    cudaGraph_t cg; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    auto ec = g->execute(h, pack, b.ws);
    cudaError_t ce = cudaStreamEndCapture(s, &cg);
    if (!ec.is_good() || ce != cudaSuccess) { printf("  CAPTURE FAILED: fe=%s cuda=%s\n", ec.get_message().c_str(), cudaGetErrorString(ce)); continue; }
    CK(cudaGraphInstantiate(&ge, cg, 0));
    upload_meta(c, lens1, T1, b, s);  // new lengths, same device buffers
    CK(cudaMemsetAsync(b.o, 0xFF, Tmax * c.Hq * c.D * 2, s));
    CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
    compare(c, lens1, qkv, b, T1, Tmax, "graph-new");
    // timing: direct execute vs graph replay
    cudaEvent_t a, z; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&z));
    CK(cudaEventRecord(a, s)); for (int i = 0; i < 20; ++i) g->execute(h, pack, b.ws); CK(cudaEventRecord(z, s)); CK(cudaEventSynchronize(z));
    float ms1; cudaEventElapsedTime(&ms1, a, z);
    CK(cudaEventRecord(a, s)); for (int i = 0; i < 20; ++i) cudaGraphLaunch(ge, s); CK(cudaEventRecord(z, s)); CK(cudaEventSynchronize(z));
    float ms2; cudaEventElapsedTime(&ms2, a, z);
    printf("  avg direct %.1f us, graph %.1f us\n", ms1 * 50, ms2 * 50);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(cg);
    for (void* p : {b.qkv, b.o, b.st, b.sq, b.off_qkv, b.off_o, b.off_st, b.ws}) cudaFree(p);
  }
  // all-zero batch
  {
    Cfg c{4, 256, 8, 2, 64, 1, false}; std::string err; auto g = build(c, 8, h, err);
    printf("all-zero-lengths batch: %s\n", g ? "built" : err.c_str());
    if (g) {
      int64_t wsz = 0; g->get_workspace_size(wsz); Bufs b{}; int64_t tok = (c.Hq + 2 * c.Hkv) * c.D;
      CK(cudaMalloc(&b.qkv, 64 * tok * 2)); CK(cudaMalloc(&b.o, 64 * c.Hq * c.D * 2)); CK(cudaMalloc(&b.st, 4096)); CK(cudaMalloc(&b.sq, 64));
      CK(cudaMalloc(&b.off_qkv, 128)); CK(cudaMalloc(&b.off_o, 128)); CK(cudaMalloc(&b.off_st, 128)); CK(cudaMalloc(&b.ws, wsz + 256));
      char* base = (char*)b.qkv;
      std::unordered_map<int64_t, void*> pack = {{Q, base}, {K, base + c.Hq * c.D * 2}, {V, base + (c.Hq + c.Hkv) * c.D * 2}, {O, b.o}, {SQ, b.sq}, {SKV, b.sq},
          {OFF_QKV, b.off_qkv}, {OFF_O, b.off_o}, {ST, b.st}, {OFF_ST, b.off_st}};
      upload_meta(c, {0, 0, 0, 0}, 0, b, s);
      auto e = g->execute(h, pack, b.ws); cudaError_t ce = cudaStreamSynchronize(s);
      printf("  execute: %s / %s\n", e.is_good() ? "ok" : e.get_message().c_str(), cudaGetErrorString(ce));
    }
  }
  printf("done\n");
  return 0;
}
