"""VisionAttentionLayer through Python with numpy arrays (runs in CI): against the layer composed
in float64 numpy (layer_reference.py), weights from a state dict or a safetensors file, argument
errors, and the Qwen2.5-VL window layout against a port of its get_window_index."""

import json
import struct

import numpy as np
import pytest

import visattn
from layer_reference import CAPS, layer_reference

ml_dtypes = pytest.importorskip("ml_dtypes")
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}

CONFIGS = {  # name: (embed, heads, kv_heads, head_dim, qk_norm, rope, qkv_bias)
    "qwen25vl": (128, 4, 4, 32, "none", "rotate_half", True),
    "internvit": (96, 3, 3, 32, "full", "none", False),
    "glm_gqa": (128, 4, 2, 32, "per_head", "rotate_half", True),
}


def make_weights(rng, embed, heads, kv_heads, head_dim, qk_norm, qkv_bias, dtype):
    features = (heads + 2 * kv_heads) * head_dim
    w = {"qkv_weight": rng.standard_normal((features, embed)) / np.sqrt(embed),
         "proj_weight": rng.standard_normal((embed, heads * head_dim)) / np.sqrt(heads * head_dim),
         "proj_bias": 0.1 * rng.standard_normal(embed)}
    if qkv_bias:
        w["qkv_bias"] = 0.1 * rng.standard_normal(features)
    if qk_norm != "none":
        n_q = heads * head_dim if qk_norm == "full" else head_dim
        n_k = kv_heads * head_dim if qk_norm == "full" else head_dim
        w["q_norm_weight"] = 1 + 0.1 * rng.standard_normal(n_q)
        w["k_norm_weight"] = 1 + 0.1 * rng.standard_normal(n_k)
    return {k: v.astype(dtype) if "norm" not in k else v.astype(np.float32) for k, v in w.items()}


def rope_tables(tokens, head_dim, half_width):
    width = head_dim // 2 if half_width else head_dim
    angles = np.arange(tokens)[:, None] * (10000.0 ** (-np.arange(width) % (head_dim // 2) / (head_dim // 2)))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(CONFIGS))
def test_layer_matches_the_numpy_composition(rng, dtype, name):
    embed, heads, kv_heads, head_dim, qk_norm, rope, qkv_bias = CONFIGS[name]
    lengths = [0, 1, 63, 65, 17]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    w = make_weights(rng, embed, heads, kv_heads, head_dim, qk_norm, qkv_bias, DTYPES[dtype])
    x = rng.standard_normal((int(cu[-1]), embed)).astype(DTYPES[dtype])
    cos, sin = rope_tables(int(cu[-1]), head_dim, half_width=name == "glm_gqa") if rope != "none" else (None, None)
    layer = visattn.VisionAttentionLayer(embed, heads, w, num_kv_heads=kv_heads, qk_norm=qk_norm, rope=rope)
    assert (layer.head_dim, layer.dtype, layer.device) == (head_dim, {"float32": "f32", "bfloat16": "bf16"}[dtype], "cpu")
    out = layer(x, cu, cos=cos, sin=sin)
    assert out.shape == x.shape and out.dtype == x.dtype
    ref = layer_reference(x.astype(np.float64), cu, w, heads, kv_heads, head_dim, qk_norm, cos=cos, sin=sin)
    error = np.abs(out.astype(np.float64) - ref).max()
    cap = CAPS[dtype] * 2 * max(1.0, float(np.sqrt((ref * ref).mean())))
    assert error <= cap, (error, cap)


def test_state_dict_with_split_projections_is_the_fused_layer(rng):
    w = make_weights(rng, 96, 3, 3, 32, "full", True, np.float32)
    q, k, v = np.split(w["qkv_weight"], 3)
    qb, kb, vb = np.split(w["qkv_bias"], 3)
    state = {"attn.q_proj.weight": q, "attn.k_proj.weight": k, "attn.v_proj.weight": v,
             "attn.q_proj.bias": qb, "attn.k_proj.bias": kb, "attn.v_proj.bias": vb,
             "attn.q_norm.weight": w["q_norm_weight"], "attn.k_norm.weight": w["k_norm_weight"],
             "attn.projection_layer.weight": w["proj_weight"], "attn.projection_layer.bias": w["proj_bias"]}
    x = rng.standard_normal((40, 96)).astype(np.float32)
    fused = visattn.VisionAttentionLayer(96, 3, w, qk_norm="full")
    split = visattn.VisionAttentionLayer.from_state_dict(state, 96, 3, prefix="attn.", qk_norm="full")
    np.testing.assert_array_equal(split(x, [0, 40]), fused(x, [0, 40]))


def write_safetensors(path, tensors):
    header, data = {}, b""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)) + encoded + data)


def test_from_safetensors_loads_the_layer(rng, tmp_path):
    w = make_weights(rng, 128, 4, 4, 32, "none", True, np.float32)
    path = tmp_path / "vision.safetensors"
    write_safetensors(path, {"visual.blocks.0.attn.qkv.weight": w["qkv_weight"],
                             "visual.blocks.0.attn.qkv.bias": w["qkv_bias"],
                             "visual.blocks.0.attn.proj.weight": w["proj_weight"],
                             "visual.blocks.0.attn.proj.bias": w["proj_bias"]})
    x = rng.standard_normal((30, 128)).astype(np.float32)
    cos, sin = rope_tables(30, 32, half_width=True)
    try:
        loaded = visattn.VisionAttentionLayer.from_safetensors(path, "visual.blocks.0.attn.", 128, 4, dtype="float32",
                                                               rope="rotate_half")
    except RuntimeError as error:
        pytest.skip(str(error))  # built without a JSON reader
    direct = visattn.VisionAttentionLayer(128, 4, w, rope="rotate_half")
    np.testing.assert_array_equal(loaded(x, [0, 10, 30], cos=cos, sin=sin), direct(x, [0, 10, 30], cos=cos, sin=sin))
    with pytest.raises(ValueError, match="has no qkv.weight"):
        visattn.VisionAttentionLayer.from_safetensors(path, "visual.blocks.1.attn.", 128, 4, dtype="float32")


def test_errors_name_the_argument(rng):
    w = make_weights(rng, 128, 4, 4, 32, "none", True, np.float32)
    with pytest.raises(ValueError, match="qk_norm: 'rms' is not one of none, full, per_head"):
        visattn.VisionAttentionLayer(128, 4, w, qk_norm="rms")
    with pytest.raises(ValueError, match="weights: missing proj_weight"):
        visattn.VisionAttentionLayer(128, 4, {"qkv_weight": w["qkv_weight"]})
    with pytest.raises(ValueError, match=r"weights.qkv_weight: expected shape \[192, 64\], got \[384, 128\]"):
        visattn.VisionAttentionLayer(64, 2, w)
    layer = visattn.VisionAttentionLayer(128, 4, w, rope="rotate_half")
    x = rng.standard_normal((8, 128)).astype(np.float32)
    with pytest.raises(ValueError, match="cos: missing"):
        layer(x, [0, 8])
    with pytest.raises(ValueError, match=r"x: expected shape \[9, 128\]"):
        layer(x, [0, 9], cos=np.ones((9, 32), np.float32), sin=np.ones((9, 32), np.float32))
    with pytest.raises(TypeError, match="x: dtype f16"):
        layer(x.astype(np.float16), [0, 8], cos=np.ones((8, 32)), sin=np.ones((8, 32)))


def get_window_index_port(grid_thw, merge=2, window_size=112, patch_size=14):
    """Qwen2.5-VL's get_window_index (transformers), ported line by line to numpy."""
    window_index, cu_window_seqlens, window_index_id = [], [0], 0
    vit_merger_window_size = window_size // merge // patch_size
    for t, h, w in grid_thw:
        llm_h, llm_w = h // merge, w // merge
        index = np.arange(t * llm_h * llm_w).reshape(t, llm_h, llm_w)
        pad_h = vit_merger_window_size - llm_h % vit_merger_window_size
        pad_w = vit_merger_window_size - llm_w % vit_merger_window_size
        nh, nw = (llm_h + pad_h) // vit_merger_window_size, (llm_w + pad_w) // vit_merger_window_size
        padded = np.pad(index, ((0, 0), (0, pad_h), (0, pad_w)), constant_values=-100)
        padded = padded.reshape(t, nh, vit_merger_window_size, nw, vit_merger_window_size)
        padded = padded.transpose(0, 1, 3, 2, 4).reshape(t, nh * nw, vit_merger_window_size, vit_merger_window_size)
        seqlens = (padded != -100).sum((2, 3)).reshape(-1)
        flat = padded.reshape(-1)
        window_index.append(flat[flat != -100] + window_index_id)
        cu_window_seqlens.extend((np.cumsum(seqlens) * merge * merge + cu_window_seqlens[-1]).tolist())
        window_index_id += t * llm_h * llm_w
    cu = np.array(cu_window_seqlens)
    cu = cu[np.concatenate([[True], np.diff(cu) != 0])]  # torch.unique_consecutive
    return np.concatenate(window_index), cu


@pytest.mark.parametrize("grids", [[(1, 16, 16)], [(2, 12, 20), (1, 34, 8)], [(1, 2, 2), (3, 64, 46)]])
def test_window_layout_matches_qwen25vl_get_window_index(grids):
    layout = visattn.qwen25vl_window_layout(grids)
    units, cu = get_window_index_port(grids)
    expected = (units[:, None] * 4 + np.arange(4)).reshape(-1)
    np.testing.assert_array_equal(layout.permutation, expected)
    np.testing.assert_array_equal(layout.inverse, np.argsort(expected))
    assert layout.windows.cu_seqlens == cu.tolist()
    frames = [h * w for t, h, w in grids for _ in range(t)]
    assert layout.frames.lengths == frames
