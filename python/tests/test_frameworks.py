"""cupy and jax arrays through DLPack (each skipped where the framework is not installed)."""

import numpy as np
import pytest

import visattn


def test_cupy_arrays_run_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    if not any(b["device"] == "cuda" and b["available"] for b in visattn.backends()):
        pytest.skip("no CUDA backend here")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((40, 2, 64)).astype(np.float16) for _ in range(3))
    out = visattn.attention(*(cupy.asarray(x) for x in (q, k, v)), [0, 15, 40])
    assert isinstance(out, cupy.ndarray) and out.dtype == np.float16
    expected = visattn.attention(q, k, v, [0, 15, 40], backend="reference")
    assert np.abs(cupy.asnumpy(out).astype(np.float32) - expected.astype(np.float32)).max() <= 3e-3


def test_jax_cpu_arrays_with_out():
    jax = pytest.importorskip("jax")
    cpu = jax.devices("cpu")[0]
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((30, 2, 32)).astype(np.float32) for _ in range(3))
    arrays = [jax.device_put(x, cpu) for x in (q, k, v)]
    out = np.empty_like(q)  # jax arrays are immutable: the output is a numpy array
    visattn.attention(*arrays, [0, 30], out=out)
    np.testing.assert_array_equal(out, visattn.attention(q, k, v, [0, 30]))
