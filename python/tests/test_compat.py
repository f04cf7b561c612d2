"""FlashAttention- and SGLang-compatible entry points on numpy arrays."""

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

import visattn
from visattn.sglang import VisionAttentionBackend


def qkv(rng, tokens, dtype=ml_dtypes.bfloat16, heads=4, dim=64):
    return tuple(rng.standard_normal((tokens, heads, dim)).astype(dtype) for _ in range(3))


def same(a, b):
    np.testing.assert_array_equal(np.asarray(a).view(np.uint16), np.asarray(b).view(np.uint16))


def test_flash_attn_varlen_func_matches_attention(rng):
    q, k, v = qkv(rng, 70)
    cu = np.array([0, 30, 70], dtype=np.int32)
    same(visattn.flash_attn_varlen_func(q, k, v, cu, cu, 40, 40), visattn.attention(q, k, v, cu))


def test_flash_attn_causal_and_window(rng):
    q, k, v = qkv(rng, 50)
    cu = [0, 50]
    same(visattn.flash_attn_varlen_func(q, k, v, cu, cu, 50, 50, causal=True),
         visattn.attention(q, k, v, cu, window=(-1, 0)))
    same(visattn.flash_attn_varlen_func(q, k, v, cu, cu, 50, 50, window_size=(8, 2)),
         visattn.attention(q, k, v, cu, window=(8, 2)))


def test_flash_attn_return_attn_probs(rng):
    q, k, v = qkv(rng, 20)
    out, lse, probs = visattn.flash_attn_varlen_func(q, k, v, [0, 20], [0, 20], 20, 20,
                                                     return_attn_probs=True)
    assert lse.shape == (4, 20) and probs is None


@pytest.mark.parametrize("kwargs, fragment", [
    ({"dropout_p": 0.1}, "dropout"),
    ({"softcap": 30.0}, "softcap"),
    ({"alibi_slopes": np.ones(4)}, "ALiBi"),
])
def test_flash_attn_refuses_what_it_cannot_honour(rng, kwargs, fragment):
    q, k, v = qkv(rng, 20)
    with pytest.raises(ValueError, match=fragment):
        visattn.flash_attn_varlen_func(q, k, v, [0, 20], [0, 20], 20, 20, **kwargs)


def test_flash_attn_refuses_cross_attention(rng):
    q, k, v = qkv(rng, 20)
    with pytest.raises(ValueError, match="only self-attention"):
        visattn.flash_attn_varlen_func(q, k, v, [0, 20], [0, 10, 20], 20, 10)


@pytest.mark.parametrize("form", ["tensor", "list", "tuple", "graph_list", "numpy_int64",
                                  "sequence_lengths_only", "metadata", "uniform_none", "four_d"])
def test_sglang_backend_accepts_every_form(rng, form):
    lengths = [16, 16, 16]
    cu = np.array([0, 16, 32, 48], dtype=np.int32)
    q, k, v = qkv(rng, 48)
    expected = visattn.attention(q, k, v, cu)
    backend = VisionAttentionBackend()
    args = dict(bsz=3, seq_len=16)
    if form == "tensor":
        out = backend.forward(q, k, v, cu, **args)
    elif form == "list":
        out = backend.forward(q, k, v, cu.tolist(), **args)
    elif form == "tuple":
        out = backend.forward(q, k, v, tuple(cu.tolist()), **args)
    elif form == "graph_list":
        out = backend.forward(q, k, v, [cu, np.array(lengths), 16], **args)
    elif form == "numpy_int64":
        out = backend.forward(q, k, v, cu.astype(np.int64), **args)
    elif form == "sequence_lengths_only":
        out = backend.forward(q, k, v, None, sequence_lengths=np.array(lengths), **args)
    elif form == "metadata":
        meta = SimpleNamespace(sequence_lengths=np.array(lengths), max_seqlen=16)
        out = backend.forward(q, k, v, None, forward_metadata=meta, **args)
    elif form == "uniform_none":
        out = backend.forward(q, k, v, None, **args)
    else:
        out = backend.forward(*(x.reshape(3, 16, 4, 64) for x in (q, k, v)), None, **args)
    assert out.shape == (48, 4, 64)
    same(out, expected)


def test_sglang_backend_checks_lengths_against_cu_seqlens(rng):
    q, k, v = qkv(rng, 48)
    with pytest.raises(ValueError, match="disagree"):
        VisionAttentionBackend().forward(q, k, v, [0, 16, 32, 48], 3, 16,
                                         sequence_lengths=[16, 20, 12])
