"""The attention layer of a ViT block (SGLang's VisionAttention), on CPU and GPU: fused QKV
projection, optional QK RMSNorm, optional rotate-half rope, attention within each image, output
projection. q, k and v stay views of the fused qkv buffer: no split copies."""

from . import _arrays
from . import _visattn as _C

_WEIGHT_NAMES = {  # state-dict suffixes of the layers we know -> our weight names
    "qkv.weight": "qkv_weight", "qkv.bias": "qkv_bias",
    "q_norm.weight": "q_norm_weight", "k_norm.weight": "k_norm_weight",
}
_PROJ_NAMES = ("proj", "out_proj", "o_proj", "projection_layer")


def _concat_rows(parts):
    """Stacks q/k/v projections (split layouts, e.g. InternVL's q_proj/k_proj/v_proj) by rows."""
    if _arrays.is_torch(parts[0]):
        import torch
        return torch.cat([p.detach() for p in parts], dim=0).contiguous()
    import numpy as np
    return np.ascontiguousarray(np.concatenate(parts, axis=0))


def _weights_from_state_dict(state, prefix):
    weights = {}
    for suffix, name in _WEIGHT_NAMES.items():
        if prefix + suffix in state:
            weights[name] = state[prefix + suffix]
    for kind in ("weight", "bias"):
        split = [prefix + f"{p}_proj.{kind}" for p in "qkv"]
        if f"qkv_{kind}" not in weights and all(s in state for s in split):
            weights[f"qkv_{kind}"] = _concat_rows([state[s] for s in split])
        for proj in _PROJ_NAMES:
            if prefix + f"{proj}.{kind}" in state:
                weights[f"proj_{kind}"] = state[prefix + f"{proj}.{kind}"]
                break
    return weights


def _rows_contiguous(x):
    """A weight whose rows are contiguous (what the GEMMs read), copied only when needed."""
    if _arrays.is_torch(x):
        x = x.detach()
        return x if x.stride()[-1] == 1 else x.contiguous()
    return x


class VisionAttentionLayer:
    """out = proj(attention(rope(norm(q)), rope(norm(k)), v)) with q, k, v = qkv(x), per image.

    VisionAttentionLayer(embed_dim, num_heads, weights, num_kv_heads=0, head_dim=0,
                         qk_norm="none" | "full" | "per_head", qk_norm_eps=1e-6,
                         rope="none" | "rotate_half", softmax_scale=None)
    weights: qkv_weight [(heads + 2 kv_heads) head_dim, embed_dim] (q rows, then k, then v),
    proj_weight [embed_dim, heads head_dim], and where the layer has them qkv_bias, proj_bias,
    q_norm_weight, k_norm_weight (full: [heads head_dim]; per_head: [head_dim]) as torch,
    numpy or other DLPack arrays on one device; the layer reads them in place (keep them
    unchanged). Biases are used when given. from_state_dict() takes a module's state dict
    (Qwen2.5-VL's qkv/proj, InternVL's q_proj/k_proj/v_proj/projection_layer, SigLIP's out_proj).
    """

    def __init__(self, embed_dim, num_heads, weights, *, num_kv_heads=0, head_dim=0, qk_norm="none",
                 qk_norm_eps=1e-6, rope="none", softmax_scale=None):
        unknown = set(weights) - {"qkv_weight", "qkv_bias", "proj_weight", "proj_bias", "q_norm_weight",
                                  "k_norm_weight"}
        if unknown:
            raise ValueError(f"weights: unknown names {sorted(unknown)}")
        for required in ("qkv_weight", "proj_weight"):
            if weights.get(required) is None:
                raise ValueError(f"weights: missing {required}")
        self._weights = {k: _rows_contiguous(v) for k, v in weights.items() if v is not None}
        w = self._weights
        arrays = {k: _arrays.for_dlpack(v, k)[0] for k, v in w.items()}
        override = _arrays.dtype_override(w["qkv_weight"], w["proj_weight"])
        self._layer = _C.VisionAttentionLayer.create(
            int(embed_dim), int(num_heads), int(num_kv_heads), int(head_dim), "qkv_bias" in w, "proj_bias" in w,
            qk_norm, float(qk_norm_eps), rope, None if softmax_scale is None else float(softmax_scale),
            arrays["qkv_weight"], arrays.get("qkv_bias"), arrays.get("q_norm_weight"), arrays.get("k_norm_weight"),
            arrays["proj_weight"], arrays.get("proj_bias"), override)

    @classmethod
    def from_state_dict(cls, state_dict, embed_dim, num_heads, prefix="", **config):
        """A layer reading the tensors of a module's state dict (e.g. module.state_dict())."""
        return cls(embed_dim, num_heads, _weights_from_state_dict(state_dict, prefix), **config)

    @classmethod
    def from_safetensors(cls, path, prefix, embed_dim, num_heads, *, dtype="bfloat16", device="cpu",
                         qkv_bias=True, proj_bias=True, num_kv_heads=0, head_dim=0, qk_norm="none",
                         qk_norm_eps=1e-6, rope="none", softmax_scale=None):
        """Loads prefix + {qkv | q_proj,k_proj,v_proj}, {q_norm,k_norm}, {proj | out_proj | o_proj |
        projection_layer} from a safetensors file, converted to dtype, onto device; the layer owns them."""
        dtypes = {"bfloat16": "bf16", "bf16": "bf16", "float16": "f16", "f16": "f16", "float32": "f32", "f32": "f32"}
        if str(dtype).replace("torch.", "") not in dtypes:
            raise ValueError(f"dtype: {dtype!r} is not one of bfloat16, float16, float32")
        index = -1 if str(device) == "cpu" else _arrays.cuda_device_index(device)
        layer = cls.__new__(cls)
        layer._weights = {}
        layer._layer = _C.VisionAttentionLayer.from_safetensors(
            int(embed_dim), int(num_heads), int(num_kv_heads), int(head_dim), bool(qkv_bias), bool(proj_bias),
            qk_norm, float(qk_norm_eps), rope, None if softmax_scale is None else float(softmax_scale),
            str(path), prefix, dtypes[str(dtype).replace("torch.", "")], index)
        return layer

    embed_dim = property(lambda self: self._layer.embed_dim)
    num_heads = property(lambda self: self._layer.num_heads)
    num_kv_heads = property(lambda self: self._layer.num_kv_heads)
    head_dim = property(lambda self: self._layer.head_dim)
    dtype = property(lambda self: self._layer.dtype)
    device = property(lambda self: self._layer.device)

    def forward(self, x, cu_seqlens=None, *, batch=None, cos=None, sin=None, out=None, backend="auto",
                num_threads=0):
        """x [tokens, embed_dim] -> [tokens, embed_dim]. Images as cu_seqlens (any form attention()
        takes) or a VarlenBatch, positionally or as batch=.
        cos, sin: rope tables [tokens, head_dim] or [tokens, head_dim / 2] (any float dtype,
        converted to float32) for rope="rotate_half"."""
        from . import VarlenBatch, _batch_for  # noqa: PLC0415 (the package imports this module)
        if isinstance(cu_seqlens, VarlenBatch):
            cu_seqlens, batch = None, cu_seqlens
        if len(x.shape) != 2:
            raise ValueError(f"x: expected [tokens, embed_dim], got shape {tuple(x.shape)}")
        batch = _batch_for(x, cu_seqlens, batch, None)
        if out is None:
            out = _arrays.empty(x, tuple(x.shape))
        tables = [None if t is None else _arrays.float32(t, name) for t, name in ((cos, "cos"), (sin, "sin"))]
        self._layer.forward(_arrays.for_dlpack(x, "x")[0], batch._batch, _arrays.for_dlpack(out, "out")[0],
                            tables[0], tables[1], backend, int(num_threads), _arrays.dtype_override(x, out),
                            _arrays.cuda_stream(x))
        return out

    __call__ = forward

    def __repr__(self):
        return (f"VisionAttentionLayer(embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, dtype={self.dtype}, "
                f"device={self.device})")


class WindowLayout:
    """Qwen2.5-VL's windowed layers: permutation (window order: windowed token i is token
    permutation[i]), inverse, windows (a VarlenBatch in window order, one image per window) and
    frames (a VarlenBatch in token order, one image per frame: the full-attention layers)."""

    def __init__(self, permutation, inverse, windows, frames):
        self.permutation, self.inverse, self.windows, self.frames = permutation, inverse, windows, frames


def qwen25vl_window_layout(grid_thw, spatial_merge_size=2, window_size=112, patch_size=14):
    """What Qwen2.5-VL's get_window_index computes, from grid_thw [[t, h, w], ...] (patches)."""
    from . import VarlenBatch  # noqa: PLC0415
    import numpy as np
    rows = grid_thw.tolist() if hasattr(grid_thw, "tolist") else [list(r) for r in grid_thw]
    permutation, inverse, windows, frames = _C.qwen25vl_window_layout(
        [tuple(int(v) for v in r) for r in rows], int(spatial_merge_size), int(window_size), int(patch_size))

    def wrap(cpp_batch):
        batch = VarlenBatch.__new__(VarlenBatch)
        batch._batch = cpp_batch
        return batch
    return WindowLayout(np.asarray(permutation, dtype=np.int64), np.asarray(inverse, dtype=np.int64),
                        wrap(windows), wrap(frames))
