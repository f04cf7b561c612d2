"""The attention layer composed from plain numpy operations in float64 (the reference of the
layer tests) and the tolerance rule as it applies to the layer (src/check/tolerance.cpp,
judge_layer_output): pass when max|out - ref| <= 2 max|baseline - ref| + atol_dtype and below
the dtype's cap, doubled for the layer's rounding stages and grown with the output's RMS."""

import numpy as np

CAPS = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 2e-2}


def rms_norm(x, weight, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def rotate_half(x, cos, sin):
    """x [tokens, heads, d]; cos, sin [tokens, d] (or [tokens, d/2], used as cat(t, t))."""
    d = x.shape[-1]
    if cos.shape[-1] != d:
        cos, sin = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def layer_reference(x, cu_seqlens, w, num_heads, num_kv_heads, head_dim, qk_norm="none", eps=1e-6,
                    cos=None, sin=None, scale=None):
    """w: float64 arrays qkv_weight, proj_weight and optionally qkv_bias, proj_bias,
    q_norm_weight, k_norm_weight. Returns [tokens, embed_dim] float64."""
    f64 = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    x = np.asarray(x, dtype=np.float64)
    tokens = x.shape[0]
    qkv = x @ f64["qkv_weight"].T + f64.get("qkv_bias", 0)
    hq, hk = num_heads * head_dim, num_kv_heads * head_dim
    q, k, v = qkv[:, :hq], qkv[:, hq:hq + hk], qkv[:, hq + hk:]
    if qk_norm == "full":
        q, k = rms_norm(q, f64["q_norm_weight"], eps), rms_norm(k, f64["k_norm_weight"], eps)
    q = q.reshape(tokens, num_heads, head_dim)
    k = k.reshape(tokens, num_kv_heads, head_dim)
    v = v.reshape(tokens, num_kv_heads, head_dim)
    if qk_norm == "per_head":
        q, k = rms_norm(q, f64["q_norm_weight"], eps), rms_norm(k, f64["k_norm_weight"], eps)
    if cos is not None:
        cos, sin = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
        q, k = rotate_half(q, cos, sin), rotate_half(k, cos, sin)
    scale = head_dim ** -0.5 if scale is None else scale
    group = num_heads // num_kv_heads
    out = np.zeros((tokens, num_heads, head_dim))
    for s, e in zip(cu_seqlens[:-1], cu_seqlens[1:]):
        for h in range(num_heads):
            logits = q[s:e, h] @ k[s:e, h // group].T * scale
            p = np.exp(logits - logits.max(-1, keepdims=True)) if e > s else logits
            out[s:e, h] = (p / p.sum(-1, keepdims=True)) @ v[s:e, h // group] if e > s else 0
    return out.reshape(tokens, hq) @ f64["proj_weight"].T + f64.get("proj_bias", 0)


def rounding_slack(ref, dtype_name):
    """2 max |((R + 0.3) - 0.3) - R| in the dtype, R = ref rounded to it (the rule's atol)."""
    import ml_dtypes
    dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype_name]
    r = np.asarray(ref, np.float32).astype(dtype)
    back = ((r + dtype(0.3)).astype(dtype) - dtype(0.3)).astype(dtype)
    return 2 * float(np.abs(back.astype(np.float64) - r.astype(np.float64)).max(initial=0))


def layer_bound(ref, baseline_error, dtype_name):
    ref = np.asarray(ref, np.float64)
    rms = float(np.sqrt((ref * ref).mean())) if ref.size else 0.0
    cap = CAPS[dtype_name] * 2 * max(1.0, rms)
    return min(2 * baseline_error + rounding_slack(ref, dtype_name), cap), cap
