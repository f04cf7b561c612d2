"""The Python API on numpy arrays: results against an independent fp64 reference, every input
form against the canonical one (bitwise), and errors mapped to Python exceptions."""

import math
import threading

import ml_dtypes
import numpy as np
import pytest

import visattn

# The caps of the project's tolerance rule (src/check/tolerance.cpp) for unit-variance inputs;
# the full rule (relative to a same-precision baseline) is applied by `visattn check`.
CAPS = {np.float32: 1e-5, np.float16: 3e-3, ml_dtypes.bfloat16: 2e-2}
DTYPES = list(CAPS)


def reference(q, k, v, cu, scale=None, window=(-1, -1), sinks=None):
    """fp64 softmax(q k^T * scale) v per image; q, k, v: [tokens, heads, dim]."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[2]
    scale = 1 / math.sqrt(dim) if scale is None else scale
    out = np.zeros_like(q)
    for b in range(len(cu) - 1):
        s, e = cu[b], cu[b + 1]
        if s == e:
            continue
        for h in range(heads):
            kh = h // (heads // kv_heads)
            logits = q[s:e, h] @ k[s:e, kh].T * scale
            i, j = np.indices(logits.shape)
            mask = np.ones_like(logits, dtype=bool)
            if window[0] >= 0:
                mask &= j >= i - window[0]
            if window[1] >= 0:
                mask &= j <= i + window[1]
            logits = np.where(mask, logits, -np.inf)
            peak = logits.max(axis=1, keepdims=True)
            if sinks is not None:
                peak = np.maximum(peak, sinks[h])
            weights = np.exp(logits - peak)
            total = weights.sum(axis=1, keepdims=True)
            if sinks is not None:
                total += np.exp(sinks[h] - peak)
            out[s:e, h] = weights @ v[s:e, kh] / total
    return out


def random_qkv(rng, dtype, tokens, heads=4, kv_heads=4, dim=64, fused=False):
    if fused:  # views into one [tokens, heads + 2 kv_heads, dim] buffer
        qkv = rng.standard_normal((tokens, heads + 2 * kv_heads, dim)).astype(dtype)
        return qkv[:, :heads], qkv[:, heads:heads + kv_heads], qkv[:, heads + kv_heads:]
    make = lambda h: rng.standard_normal((tokens, h, dim)).astype(dtype)  # noqa: E731
    return make(heads), make(kv_heads), make(kv_heads)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dim", [64, 72, 80])
@pytest.mark.parametrize("fused", [False, True], ids=["separate", "fused_qkv"])
def test_matches_reference(rng, dtype, dim, fused):
    lengths = [0, 17, 1, 0, 65, 129, 3]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    q, k, v = random_qkv(rng, dtype, int(cu[-1]), dim=dim, fused=fused)
    out = visattn.attention(q, k, v, cu)
    assert out.dtype == q.dtype and out.shape == q.shape
    error = np.abs(out.astype(np.float64) - reference(q, k, v, cu)).max()
    assert np.isfinite(out.astype(np.float32)).all()
    assert error <= CAPS[dtype], error


def test_options_gqa_window_sinks_lse(rng):
    cu = [0, 40, 40, 97]
    q, k, v = random_qkv(rng, np.float32, 97, heads=8, kv_heads=2)
    sinks = rng.standard_normal(8).astype(np.float32)
    out, lse = visattn.attention(q, k, v, cu, window=(5, 3), sinks=sinks, return_lse=True,
                                 softmax_scale=0.2)
    assert lse.shape == (8, 97) and lse.dtype == np.float32
    expected = reference(q, k, v, cu, scale=0.2, window=(5, 3), sinks=sinks)
    assert np.abs(out - expected).max() <= CAPS[np.float32]


def canonical(q, k, v, cu):
    return visattn.attention(q, k, v, np.asarray(cu, dtype=np.int32))


@pytest.mark.parametrize("form", ["list", "tuple", "int64", "sglang_list", "lengths", "batch"])
def test_every_cu_seqlens_form_gives_the_same_output(rng, form):
    cu = [0, 5, 5, 30, 31]
    q, k, v = random_qkv(rng, ml_dtypes.bfloat16, 31)
    expected = canonical(q, k, v, cu)
    if form == "list":
        out = visattn.attention(q, k, v, list(cu))
    elif form == "tuple":
        out = visattn.attention(q, k, v, tuple(cu))
    elif form == "int64":
        out = visattn.attention(q, k, v, np.asarray(cu, dtype=np.int64), max_seqlen=np.int64(25))
    elif form == "sglang_list":
        out = visattn.attention(q, k, v, [np.asarray(cu, dtype=np.int32), [5, 0, 25, 1], 25])
    elif form == "lengths":
        out = visattn.attention(q, k, v, batch=visattn.VarlenBatch(lengths=[5, 0, 25, 1]))
    else:
        out = visattn.attention(q, k, v, batch=visattn.VarlenBatch(cu))
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_four_dimensional_uniform_batch(rng):
    q, k, v = (rng.standard_normal((3, 20, 2, 32)).astype(np.float32) for _ in range(3))
    out = visattn.attention(q, k, v)
    flat = canonical(*(x.reshape(60, 2, 32) for x in (q, k, v)), [0, 20, 40, 60])
    np.testing.assert_array_equal(out.reshape(60, 2, 32), flat)


def test_out_is_written_in_place(rng):
    q, k, v = random_qkv(rng, np.float32, 10)
    out = np.full_like(q, np.nan)
    result = visattn.attention(q, k, v, [0, 10], out=out)
    assert result is out and np.isfinite(out).all()


def test_backends_agree(rng):
    q, k, v = random_qkv(rng, np.float32, 50)
    fast = visattn.attention(q, k, v, [0, 20, 50], backend="cpu")
    oracle = visattn.attention(q, k, v, [0, 20, 50], backend="reference")
    assert np.abs(fast - oracle).max() <= CAPS[np.float32]


def test_concurrent_python_threads(rng):
    inputs = [random_qkv(rng, np.float32, 300) for _ in range(4)]
    expected = [canonical(q, k, v, [0, 100, 300]) for q, k, v in inputs]
    results = [None] * 4

    def run(i):
        results[i] = canonical(*inputs[i], [0, 100, 300])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cu, error, fragment", [
    ([1, 5], ValueError, "cu_seqlens[0]=1"),
    ([0, 9, 4], ValueError, "must be non-decreasing"),
    ([0, 4], ValueError, "last offset must equal the number of tokens of q (5"),
    ([0.0, 5.0], TypeError, "cu_seqlens[0]: must be an integer"),
    (np.array([0, 5], dtype=np.float32), TypeError, "must hold integers"),
    ("0,5", TypeError, "cu_seqlens: expected a list"),
])
def test_bad_cu_seqlens(rng, cu, error, fragment):
    q, k, v = random_qkv(rng, np.float32, 5)
    with pytest.raises(error) as info:
        visattn.attention(q, k, v, cu)
    assert fragment in str(info.value)


def test_errors_name_the_argument(rng):
    q, k, v = random_qkv(rng, np.float32, 5)
    with pytest.raises(TypeError, match="k: dtype f16 differs from q's dtype f32"):
        visattn.attention(q, k.astype(np.float16), v, [0, 5])
    with pytest.raises(ValueError, match="max_seqlen=3 < length 5"):
        visattn.attention(q, k, v, [0, 5], max_seqlen=3)
    with pytest.raises(RuntimeError, match="backend='flash' is not a backend of this build"):
        visattn.attention(q, k, v, [0, 5], backend="flash")
    with pytest.raises(ValueError, match="3-D q .* needs cu_seqlens or batch"):
        visattn.attention(q, k, v)
    with pytest.raises(TypeError, match="expected 1 to 4 dimensions"):
        visattn.attention(q.reshape(5, 4, 4, 4, 4), k, v, [0, 5])
    out = np.full_like(q, 7.0)
    with pytest.raises(ValueError, match="softmax_scale=nan"):
        visattn.attention(q, k, v, [0, 5], softmax_scale=float("nan"), out=out)
    assert (out == 7.0).all(), "out was written before the error"


def test_info_and_backends():
    data = visattn.info()
    assert data["auto"]["cpu"] == "cpu"
    names = {b["name"] for b in visattn.backends()}
    assert {"reference", "cpu"} <= names


def test_backends_report_plans_built():
    for b in visattn.backends():
        assert isinstance(b["plans_built"], int) and b["plans_built"] >= 0, b
        if b["name"] != "cudnn":  # the only backend that builds plans
            assert b["plans_built"] == 0, b
