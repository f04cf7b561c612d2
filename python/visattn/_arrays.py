"""Framework-neutral helpers: what kind of array an argument is, how to allocate beside it, and
how 16-bit arrays cross to C++ (numpy has no bfloat16: ml_dtypes arrays cross as uint16)."""

import numpy as np

_NUMPY_16BIT = {"bfloat16": "bf16", "float16": "f16"}


def is_torch(x):
    return type(x).__module__.startswith("torch")


def is_cupy(x):
    return type(x).__module__.startswith("cupy")


def for_dlpack(x, name):
    """(array to pass to C++, dtype override or None)."""
    if isinstance(x, np.ndarray):
        if x.dtype.name == "bfloat16":  # ml_dtypes
            return x.view(np.uint16), "bf16"
        return x, None
    if hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__"):
        return x, None
    raise TypeError(f"{name}: expected an array supporting DLPack (torch, numpy, cupy, jax), "
                    f"got {type(x).__name__}")


def dtype_override(*arrays):
    """The override shared by q, k, v and out; mixed forms fail in C++ with a dtype error."""
    overrides = {for_dlpack(a, "array")[1] for a in arrays}
    overrides.discard(None)
    return overrides.pop() if len(overrides) == 1 else None


def empty(like, shape, dtype=None):
    """An uninitialized array of `shape` beside `like` (same framework and device)."""
    if is_torch(like):
        import torch
        return torch.empty(shape, dtype=like.dtype if dtype is None else getattr(torch, dtype),
                           device=like.device)
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=like.dtype if dtype is None else dtype)
    if is_cupy(like):
        import cupy
        return cupy.empty(shape, dtype=like.dtype if dtype is None else dtype)
    raise TypeError(f"out=: cannot allocate an output beside a {type(like).__name__}; "
                    "pass out= (and lse via return_lse with torch, numpy or cupy inputs)")


def cuda_stream(x):
    """The framework's current CUDA stream for x's device (0: the default stream, or a CPU array)."""
    if is_torch(x) and x.is_cuda:
        import torch
        return torch.cuda.current_stream(x.device).cuda_stream
    if is_cupy(x):
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return 0


def cuda_device_index(device):
    """The ordinal of a CUDA device given as "cuda", "cuda:1", an int or a torch.device."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"device: expected 'cuda', 'cuda:N', an int or a torch cuda device, got {device!r}")


def current_cuda_stream(index):
    """torch's current stream on device `index` when torch is loaded, else the default (0)."""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream(index).cuda_stream
    return 0


def float32(x, name):
    """x as a contiguous float32 array of its own framework and device."""
    if is_torch(x):
        return x.detach().float().contiguous()
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x, dtype=np.float32)
    if is_cupy(x):
        import cupy
        return cupy.ascontiguousarray(x, dtype=cupy.float32)
    raise TypeError(f"{name}: expected a torch, numpy or cupy array, got {type(x).__name__}")


def is_nested_sequence(x):
    """True for SGLang's cuda-graph form [cu_seqlens (1-D array or list), ...]."""
    if not isinstance(x, (list, tuple)) or not x:
        return False
    first = x[0]
    return isinstance(first, (list, tuple)) or len(getattr(first, "shape", ())) == 1


def int_list(x, name):
    """A host list of Python ints from a list, tuple, numpy array or tensor (any device), with a
    clear error for anything else. Accepts int32 and int64 (the two forms models produce)."""
    if is_torch(x) or is_cupy(x) or isinstance(x, np.ndarray):
        kind = str(x.dtype)
        if not any(t in kind for t in ("int32", "int64", "int16", "uint8", "int8")):
            raise TypeError(f"{name}: must hold integers (int32 or int64), got dtype {kind}")
        if getattr(x, "ndim", 1) != 1:
            raise ValueError(f"{name}: must be 1-D, got shape {tuple(x.shape)}")
        if is_torch(x):
            return x.detach().cpu().tolist()
        if is_cupy(x):
            return x.get().tolist()
        return x.tolist()
    if isinstance(x, (list, tuple)):
        values = list(x)
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name}[{i}]: must be an integer, got {type(v).__name__} {v!r}")
        return [int(v) for v in values]
    raise TypeError(f"{name}: expected a list, tuple, numpy array or tensor of integers, "
                    f"got {type(x).__name__}")


def scalar_int(x, name):
    """An int from an int, numpy integer or 0-d / 1-element tensor or array."""
    if x is None:
        return None
    if isinstance(x, bool):
        raise TypeError(f"{name}: must be an integer, got bool")
    if isinstance(x, (int, np.integer)):
        return int(x)
    if hasattr(x, "item") and getattr(x, "numel", lambda: getattr(x, "size", 0))() == 1:
        return int(x.item())
    raise TypeError(f"{name}: must be an integer, got {type(x).__name__}")
