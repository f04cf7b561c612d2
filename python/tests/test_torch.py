"""torch tensors through DLPack: dtypes, strided views of a fused qkv, cu_seqlens tensors, the
torch custom op and torch.compile. Skipped where torch is not installed (the build machine);
CUDA cases run where a CUDA backend is available."""

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import visattn  # noqa: E402

CAPS = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}  # src/check/tolerance.cpp
CUDA = torch.cuda.is_available() and any(
    b["device"] == "cuda" and b["available"] for b in visattn.backends())
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
CUDNN = torch.cuda.is_available() and any(
    b["name"] == "cudnn" and b["available"] for b in visattn.backends())


def cudnn_plans_built():
    return next(b["plans_built"] for b in visattn.backends() if b["name"] == "cudnn")


def sdpa_per_image(q, k, v, cu):
    """torch's own attention, one image at a time, in fp64 on the CPU."""
    out = torch.zeros_like(q, dtype=torch.float64, device="cpu")
    for s, e in zip(cu[:-1], cu[1:]):
        if s == e:
            continue
        qi, ki, vi = (x[s:e].double().cpu().transpose(0, 1) for x in (q, k, v))
        out[s:e] = F.scaled_dot_product_attention(qi, ki, vi).transpose(0, 1)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(CAPS), ids=str)
@pytest.mark.parametrize("dim", [64, 72, 80, 128])
def test_fused_qkv_views_match_sdpa(device, dtype, dim):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("the cuda backend runs f16 and bf16 (see test_cuda_float32_is_refused)")
    torch.manual_seed(dim)
    lengths = [0, 33, 1, 64, 0, 129]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    qkv = torch.randn(cu[-1], 3, 4, dim, dtype=dtype, device=device)
    q, k, v = qkv.unbind(1)  # strided views, no copy
    out = visattn.flash_attn_varlen_func(q, k, v, torch.tensor(cu, dtype=torch.int32, device=device),
                                         torch.tensor(cu, dtype=torch.int32, device=device),
                                         max(lengths), max(lengths))
    assert out.dtype == dtype and out.device.type == device
    error = (out.double().cpu() - sdpa_per_image(q, k, v, cu)).abs().max().item()
    assert error <= CAPS[dtype], error


@pytest.mark.skipif(not CUDA, reason="no CUDA backend here")
def test_cuda_float32_is_refused():
    q = torch.randn(8, 2, 64, device="cuda")
    with pytest.raises(RuntimeError, match="cuda: dtype f32 is not supported .supported: f16 bf16."):
        visattn.attention(q, q, q, [0, 8])


@pytest.mark.skipif(not CUDA, reason="no CUDA backend here")
def test_cuda_runs_on_the_current_stream():
    q, k, v = torch.randn(3, 300, 4, 64, dtype=torch.bfloat16, device="cuda").unbind(0)
    expected = visattn.attention(q, k, v, [0, 100, 300])
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = visattn.attention(q, k, v, [0, 100, 300])
    stream.synchronize()
    assert torch.equal(out, expected)


@pytest.mark.skipif(not CUDA, reason="no CUDA backend here")
@pytest.mark.parametrize("backend", ["cuda"] + (["cudnn"] if CUDNN else []))
def test_unprepared_calls_queue_without_mixing_their_metadata(backend):
    # Unprepared batches share the device's scratch metadata (a ring of slots, once calls no
    # longer sync: bench/NOTES.md CUDA 29): a heavy call first, then more calls than the ring
    # would hold, each with its own lengths, on two streams, none waited for; each must match
    # the same call run alone.
    torch.manual_seed(5)
    q, k, v = torch.randn(3, 16384, 16, 64, dtype=torch.bfloat16, device="cuda").unbind(0)
    batches = [[0, 8192, 16384]] + [[0, 1 + 37 * i, 300 + 131 * i, 900 + 512 * i] for i in range(11)]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = []
    for i, cu in enumerate(batches):
        with torch.cuda.stream(streams[i % 2]):
            outs.append(visattn.attention(q[:cu[-1]], k[:cu[-1]], v[:cu[-1]], cu, backend=backend))
    torch.cuda.synchronize()
    for cu, out in zip(batches, outs):
        expected = visattn.attention(q[:cu[-1]], k[:cu[-1]], v[:cu[-1]], cu, backend=backend)
        torch.cuda.synchronize()
        assert torch.equal(out, expected), cu


@pytest.mark.skipif(not CUDA, reason="no CUDA backend here")
def test_cuda_graph_capture_and_replay_with_new_image_sizes():
    # The cuda backend by name: "auto" chooses per call by shape (cudnn for long images when
    # eager, cuda while capturing), so a graph and an eager call under auto may differ in
    # backend and compare only within tolerance.
    torch.manual_seed(5)
    tokens, heads, dim = 300, 4, 80
    q, k, v = (torch.randn(tokens, heads, dim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    out = torch.empty_like(q)
    batch = visattn.VarlenBatch([0, 100, 300]).prepare("cuda")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the graph, as torch recommends
        visattn.attention(q, k, v, batch=batch, out=out, backend="cuda")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        visattn.attention(q, k, v, batch=batch, out=out, backend="cuda")

    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, visattn.attention(q, k, v, [0, 100, 300], backend="cuda"))

    # Same tokens, other images (same bucket): rewrite the batch's GPU buffers, new inputs.
    batch.update_device([0, 7, 7, 64, 250, 300])
    for x in (q, k, v):
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    # The batch keeps the kernel its prepare-time lengths picked: an eager call with it gives the
    # replay's bits. An unprepared call picks by its own lengths (on an H200, here, wider key
    # blocks than the prepared [100, 200] got): the same attention, summed in another order.
    assert torch.equal(out, visattn.attention(q, k, v, batch=batch, backend="cuda"))
    unprepared = visattn.attention(q, k, v, [0, 7, 7, 64, 250, 300], backend="cuda")
    torch.testing.assert_close(out.float(), unprepared.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(not CUDA, reason="no CUDA backend here")
def test_capturing_an_unprepared_batch_is_an_error():
    q = torch.randn(16, 2, 64, dtype=torch.float16, device="cuda")
    out = torch.empty_like(q)
    visattn.attention(q, q, q, [0, 16], out=out)  # warm-up
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="prepare"):
        with torch.cuda.graph(graph):
            visattn.attention(q, q, q, batch=visattn.VarlenBatch([0, 16]), out=out)


@pytest.mark.skipif(not CUDNN, reason="no usable cudnn backend here")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [64, 72, 80, 128])
def test_cudnn_fused_qkv_views_and_lse_match_sdpa(dtype, dim):
    torch.manual_seed(dim)
    lengths = [0, 33, 1, 64, 0, 129]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    qkv = torch.randn(cu[-1], 3, 4, dim, dtype=dtype, device="cuda")
    q, k, v = qkv.unbind(1)  # strided views into one buffer, as cuDNN's ragged offsets take them
    out, lse = visattn.attention(q, k, v, cu, return_lse=True, backend="cudnn")
    error = (out.double().cpu() - sdpa_per_image(q, k, v, cu)).abs().max().item()
    assert error <= CAPS[dtype], error
    scale = 1 / math.sqrt(dim)
    for s, e in zip(cu[:-1], cu[1:]):
        if s < e:
            qi, ki = q[s:e].double().transpose(0, 1), k[s:e].double().transpose(0, 1)
            expected = torch.logsumexp(qi @ ki.transpose(1, 2) * scale, dim=-1)  # [heads, n]
            assert (lse[:, s:e].double() - expected).abs().max().item() <= 1e-3


@pytest.mark.skipif(not CUDNN, reason="no usable cudnn backend here")
def test_cudnn_declines_windows_and_auto_runs_them_elsewhere():
    q = torch.randn(16, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="backend='cudnn': window: window_left=4"):
        visattn.attention(q, q, q, [0, 16], window=(4, 4), backend="cudnn")
    visattn.attention(q, q, q, [0, 16], window=(4, 4))  # auto: the cuda kernel runs windows


@pytest.mark.skipif(not CUDNN, reason="no usable cudnn backend here")
def test_cudnn_graph_capture_and_replay_with_new_image_sizes():
    torch.manual_seed(6)
    tokens, heads, dim = 300, 4, 80
    q, k, v = (torch.randn(tokens, heads, dim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    out = torch.empty_like(q)
    batch = visattn.VarlenBatch([0, 100, 300]).prepare("cuda")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the graph: builds the cuDNN plan
        visattn.attention(q, k, v, batch=batch, out=out, backend="cudnn")
    torch.cuda.current_stream().wait_stream(side)
    plans = cudnn_plans_built()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        visattn.attention(q, k, v, batch=batch, out=out, backend="cudnn")
    assert cudnn_plans_built() == plans  # capturing built nothing

    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, visattn.attention(q, k, v, [0, 100, 300], backend="cudnn"))

    batch.update_device([0, 7, 7, 64, 250, 300])  # same bucket: 8 images, max_seqlen 1024
    for x in (q, k, v):
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, visattn.attention(q, k, v, [0, 7, 7, 64, 250, 300], backend="cudnn"))


@pytest.mark.parametrize("form", ["int32", "int64", "list", "cuda_graph_list"])
def test_cu_seqlens_tensor_forms(form):
    q, k, v = torch.randn(3, 40, 2, 32, dtype=torch.bfloat16).unbind(0)
    cu = [0, 10, 40]
    expected = visattn.attention(q, k, v, cu)
    given = {"int32": torch.tensor(cu, dtype=torch.int32),
             "int64": torch.tensor(cu, dtype=torch.int64),
             "list": cu,
             "cuda_graph_list": [torch.tensor(cu, dtype=torch.int32), [10, 30], 30]}[form]
    assert torch.equal(visattn.attention(q, k, v, given), expected)


def test_float_cu_seqlens_is_a_type_error():
    q = torch.randn(5, 2, 32)
    with pytest.raises(TypeError, match="cu_seqlens: must hold integers"):
        visattn.attention(q, q, q, torch.tensor([0.0, 5.0]))


def test_custom_op_and_compile():
    q, k, v = torch.randn(3, 50, 4, 64).unbind(0)
    cu = torch.tensor([0, 20, 50], dtype=torch.int32)
    expected = visattn.attention(q, k, v, cu)
    assert torch.equal(torch.ops.visattn.varlen_attention(q, k, v, cu), expected)

    def layer(q, k, v, cu):
        return torch.ops.visattn.varlen_attention(q * 1.0, k, v, cu) + 0.0

    compiled = torch.compile(layer, fullgraph=True)
    assert torch.allclose(compiled(q, k, v, cu), expected)
