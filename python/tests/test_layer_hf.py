"""VisionAttentionLayer against Hugging Face transformers' vision attention blocks with the same
random weights: Qwen2.5-VL (fused qkv, 2D rope) and InternVL/InternViT (split q/k/v, QK RMSNorm
over the hidden size). The reference is the layer composed in float64 numpy from the blocks'
(dtype-rounded) weights; HF's own output in the dtype is the tolerance rule's baseline, so the
test passes when visattn is at most twice as far from the reference as transformers is (plus the
dtype's rounding slack, below the layer's cap). Skipped without torch and transformers."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("ml_dtypes")

import visattn  # noqa: E402
from layer_reference import layer_bound, layer_reference  # noqa: E402

GPU = torch.cuda.is_available() and any(b["name"] == "cuda" and b["available"] for b in visattn.backends())
CASES = [("cpu", torch.float32), ("cpu", torch.bfloat16)]
if GPU:
    CASES += [("cuda", torch.bfloat16), ("cuda", torch.float16)]
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def randomize(module, seed):
    """Weights of a trained layer's scale: normal / sqrt(fan_in), biases 0.1 normal, norms 1 + 0.1 normal."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "norm" in name:
                p.copy_(1 + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)
    return module


def numpy_weights(state, names):
    return {ours: state[theirs].float().cpu().numpy() for ours, theirs in names.items() if theirs in state}


def judge(ours, hf, ref, dtype):
    error = float(np.abs(ours.double().cpu().numpy() - ref).max())
    hf_error = float(np.abs(hf.double().cpu().numpy() - ref).max())
    bound, cap = layer_bound(ref, hf_error, DTYPE_NAMES[dtype])
    print(f"visattn error {error:.3g}, transformers error {hf_error:.3g}, bound {bound:.3g}")
    assert hf_error <= cap, f"the reference composition disagrees with transformers: {hf_error} > {cap}"
    assert error <= bound, f"visattn error {error} > bound {bound} (transformers: {hf_error})"


def qwen25vl_block(dim, heads):
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen
    config = qwen.Qwen2_5_VLVisionConfig(hidden_size=dim, num_heads=heads)
    config._attn_implementation = "sdpa"
    try:
        return qwen.Qwen2_5_VLVisionAttention(config)
    except TypeError:  # transformers < 4.53: (dim, num_heads)
        return qwen.Qwen2_5_VLVisionAttention(dim, num_heads=heads)


def qwen_rope(grids, head_dim):
    """Qwen2-VL's 2D rope for patches of (t, h, w) grids: half of the rotary frequencies follow the
    patch row, half the column. Returns the half-width table (what the model computes)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim // 2, 2, dtype=torch.float32) / (head_dim // 2)))
    rows = []
    for t, h, w in grids:
        hpos = torch.arange(h).unsqueeze(1).expand(h, w).reshape(-1)
        wpos = torch.arange(w).unsqueeze(0).expand(h, w).reshape(-1)
        rows += [torch.cat([torch.outer(hpos.float(), inv_freq), torch.outer(wpos.float(), inv_freq)], -1)] * t
    return torch.cat(rows)


@pytest.mark.parametrize("device,dtype", CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_qwen25vl_vision_attention(device, dtype):
    dim, heads = 1280, 16  # Qwen2.5-VL's vision tower: head_dim 80
    block = randomize(qwen25vl_block(dim, heads), seed=1).to(device=device, dtype=dtype).eval()
    grids = [(1, 8, 8), (1, 2, 2), (2, 6, 10), (1, 9, 7)]
    lengths = [h * w for t, h, w in grids for _ in range(t)]  # one image per frame, as Qwen2.5-VL does
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    x = torch.randn(int(cu[-1]), dim, generator=torch.Generator().manual_seed(2)).to(device=device, dtype=dtype)
    half = qwen_rope(grids, dim // heads)
    full = torch.cat([half, half], -1)
    with torch.no_grad():
        hf = block(x, cu_seqlens=cu.to(device), position_embeddings=(full.cos().to(device), full.sin().to(device)))
    layer = visattn.VisionAttentionLayer.from_state_dict(block.state_dict(), dim, heads, rope="rotate_half")
    ours = layer(x, cu.to(device), cos=half.cos().to(device), sin=half.sin().to(device))  # half width: cat(t, t)
    state = block.state_dict()
    w = numpy_weights(state, {"qkv_weight": "qkv.weight", "qkv_bias": "qkv.bias", "proj_weight": "proj.weight",
                              "proj_bias": "proj.bias"})
    ref = layer_reference(x.float().cpu().numpy(), cu.tolist(), w, heads, heads, dim // heads,
                          cos=half.cos().numpy(), sin=half.sin().numpy())
    judge(ours, hf, ref, dtype)


def internvl_block(dim, heads):
    from transformers.models.internvl import modeling_internvl as internvl
    config = internvl.InternVLVisionConfig(hidden_size=dim, num_attention_heads=heads, use_qk_norm=True,
                                           attention_bias=True)
    config._attn_implementation = "sdpa"
    return internvl.InternVLVisionAttention(config)


@pytest.mark.parametrize("device,dtype", CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_internvit_attention_with_qk_norm(device, dtype):
    try:
        block = internvl_block(3200, 25)  # InternViT-6B: head_dim 128, QK RMSNorm over 3200
    except (ImportError, AttributeError) as error:
        pytest.skip(f"this transformers has no InternVL vision attention: {error}")
    block = randomize(block, seed=3).to(device=device, dtype=dtype).eval()
    images, tokens = 3, 65
    x = torch.randn(images, tokens, 3200, generator=torch.Generator().manual_seed(4)).to(device=device, dtype=dtype)
    with torch.no_grad():
        hf = block(x)[0]
    layer = visattn.VisionAttentionLayer.from_state_dict(block.state_dict(), 3200, 25, qk_norm="full")
    ours = layer(x.reshape(-1, 3200), visattn.VarlenBatch.uniform(images, tokens))
    state = block.state_dict()
    w = {"qkv_weight": torch.cat([state[f"{p}_proj.weight"] for p in "qkv"]).float().numpy(force=True),
         "qkv_bias": torch.cat([state[f"{p}_proj.bias"] for p in "qkv"]).float().numpy(force=True)}
    w.update(numpy_weights(state, {"q_norm_weight": "q_norm.weight", "k_norm_weight": "k_norm.weight",
                                   "proj_weight": "projection_layer.weight", "proj_bias": "projection_layer.bias"}))
    cu = [i * tokens for i in range(images + 1)]
    ref = layer_reference(x.reshape(-1, 3200).float().cpu().numpy(), cu, w, 25, 25, 128, qk_norm="full")
    judge(ours, hf.reshape(-1, 3200), ref, dtype)


@pytest.mark.skipif(not GPU, reason="no CUDA backend here")
def test_layer_forward_captures_in_a_cuda_graph_and_replays():
    """No host sync and no allocation outside the stream-ordered pool: the whole forward can be
    captured, and replays on new inputs of the same shape match eager calls."""
    dim, heads = 1280, 16
    block = randomize(qwen25vl_block(dim, heads), seed=5).to(device="cuda", dtype=torch.bfloat16).eval()
    layer = visattn.VisionAttentionLayer.from_state_dict(block.state_dict(), dim, heads, rope="rotate_half")
    lengths = [256, 64, 1024, 100]
    batch = visattn.VarlenBatch(lengths=lengths).prepare("cuda")
    half = qwen_rope([(1, n, 1) for n in lengths], dim // heads).cuda()
    cos, sin = half.cos().contiguous(), half.sin().contiguous()
    x = torch.randn(sum(lengths), dim, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer(x, batch, cos=cos, sin=sin, out=out, backend="cuda")  # warm-up: cuBLASLt heuristics, the pool
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # one backend throughout: eager auto would pick cudnn here
        layer(x, batch, cos=cos, sin=sin, out=out, backend="cuda")
    for seed in range(3):
        x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, layer(x, batch, cos=cos, sin=sin, backend="cuda"), rtol=0, atol=0)
