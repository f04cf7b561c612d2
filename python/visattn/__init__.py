"""visattn: attention for vision encoders.

Many images of different sizes packed along the token axis, attention inside each image, on
CPUs and NVIDIA GPUs, one metadata object (VarlenBatch) instead of five argument conventions.
Arrays cross by DLPack: torch, numpy (ml_dtypes for bfloat16), cupy and jax, zero-copy.
"""

from . import _arrays
from ._visattn import VarlenBatch as _CppBatch
from . import _visattn as _C

__version__ = _C.__version__
__all__ = ["VarlenBatch", "attention", "flash_attn_varlen_func", "info", "backends",
           "VisionAttentionLayer", "WindowLayout", "qwen25vl_window_layout"]


class VarlenBatch:
    """The metadata of one image batch: build it once, reuse it in every layer.

    VarlenBatch(cu_seqlens)            offsets [0, s0, s0+s1, ...] as a list, tuple, numpy
                                       array or tensor (int32 or int64, any device); SGLang's
                                       cuda-graph list form [tensor, ...] is accepted too
    VarlenBatch(lengths=[...])         tokens per image
    VarlenBatch.uniform(images, seqlen)
    max_seqlen (optional) must be >= the longest image; it is kept as an upper bound.
    """

    def __init__(self, cu_seqlens=None, *, lengths=None, max_seqlen=None):
        if (cu_seqlens is None) == (lengths is None):
            raise ValueError("VarlenBatch: pass exactly one of cu_seqlens and lengths")
        if lengths is not None:
            self._batch = _CppBatch.from_lengths(_arrays.int_list(lengths, "lengths"))
            if max_seqlen is not None and _arrays.scalar_int(max_seqlen, "max_seqlen") < self.max_seqlen:
                raise ValueError(f"max_seqlen={max_seqlen} < longest image {self.max_seqlen}")
            return
        if _arrays.is_nested_sequence(cu_seqlens):
            cu_seqlens = cu_seqlens[0]  # SGLang's cuda-graph form: [cu_seqlens_tensor, ...]
        self._batch = _CppBatch.from_cu_seqlens(_arrays.int_list(cu_seqlens, "cu_seqlens"),
                                                _arrays.scalar_int(max_seqlen, "max_seqlen"))

    @classmethod
    def uniform(cls, num_images, seqlen):
        batch = cls.__new__(cls)
        batch._batch = _CppBatch.uniform(int(num_images), int(seqlen))
        return batch

    num_images = property(lambda self: self._batch.num_images)
    total_tokens = property(lambda self: self._batch.total_tokens)
    max_seqlen = property(lambda self: self._batch.max_seqlen)
    cu_seqlens = property(lambda self: list(self._batch.cu_seqlens))
    lengths = property(lambda self: list(self._batch.lengths))
    batch_bucket = property(lambda self: self._batch.batch_bucket)
    max_seqlen_bucket = property(lambda self: self._batch.max_seqlen_bucket)

    def prepare(self, device="cuda", stream=None):
        """Uploads the batch to a GPU once (cu_seqlens and tile schedule, in buffers sized by
        its bucket): attention() on that device then does no copy and no sync, so it can be
        captured in a CUDA graph. stream: a cudaStream_t as int (default: torch's current)."""
        index = _arrays.cuda_device_index(device)
        self._batch.prepare(index, _arrays.current_cuda_stream(index) if stream is None else int(stream))
        return self

    def update_device(self, other, stream=None):
        """Writes `other`'s images into this prepared batch's GPU buffers, so a graph captured
        with this batch replays on `other` (same bucket: it must fit the prepared capacity). The
        cuda backend keeps the kernel that this batch's lengths picked at prepare(), so eager
        calls and replays with it give the same bits."""
        if not isinstance(other, VarlenBatch):
            other = VarlenBatch(other)
        self._batch.update_device(other._batch, 0 if stream is None else int(stream))
        return self

    def element_offsets(self, token_stride, tensor_name="tensor"):
        return list(self._batch.element_offsets(int(token_stride), tensor_name))

    def packed_indptrs(self, qk_token_stride, v_token_stride, o_token_stride):
        return list(self._batch.packed_indptrs(int(qk_token_stride), int(v_token_stride),
                                               int(o_token_stride)))

    def __repr__(self):
        return (f"VarlenBatch(num_images={self.num_images}, total_tokens={self.total_tokens}, "
                f"max_seqlen={self.max_seqlen})")


def _batch_for(q, cu_seqlens, batch, max_seqlen):
    if batch is not None:
        if cu_seqlens is not None:
            raise ValueError("attention: pass cu_seqlens or batch, not both")
        if not isinstance(batch, VarlenBatch):
            raise TypeError(f"batch: expected a visattn.VarlenBatch, got {type(batch).__name__}")
        return batch
    if cu_seqlens is not None:
        return VarlenBatch(cu_seqlens, max_seqlen=max_seqlen)
    if len(q.shape) == 4:
        return VarlenBatch.uniform(q.shape[0], q.shape[1])
    raise ValueError("attention: 3-D q [tokens, heads, head_dim] needs cu_seqlens or batch "
                     "(4-D [batch, seq, heads, head_dim] needs neither)")


def attention(q, k, v, cu_seqlens=None, *, batch=None, max_seqlen=None, softmax_scale=None,
              window=(-1, -1), sinks=None, return_lse=False, out=None, backend="auto",
              num_threads=0):
    """Softmax attention within each image, non-causal.

    q: [tokens, heads, head_dim] (or [batch, seq, heads, head_dim]); k, v: the same with
    num_kv_heads heads (dividing heads). Any token/head strides (views of a fused qkv work),
    head_dim contiguous. window=(left, right) limits each query to keys i-left..i+right of its
    image (-1: unbounded). sinks: [heads] extra softmax logits. Returns out, or (out, lse) with
    lse [heads, tokens] float32 when return_lse.
    """
    batch = _batch_for(q, cu_seqlens, batch, max_seqlen)
    if out is None:
        out = _arrays.empty(q, tuple(q.shape))
    lse = None
    if return_lse:
        tokens = q.shape[0] * q.shape[1] if len(q.shape) == 4 else q.shape[0]
        lse = _arrays.empty(q, (q.shape[-2], tokens), "float32")
    left, right = window
    arrays = [_arrays.for_dlpack(x, name)[0] for x, name in ((q, "q"), (k, "k"), (v, "v"), (out, "out"))]
    _C.attention(*arrays, batch._batch, None if softmax_scale is None else float(softmax_scale),
                 int(left), int(right),
                 None if sinks is None else _arrays.float32(sinks, "sinks"), lse, backend,
                 int(num_threads), _arrays.dtype_override(q, k, v, out), _arrays.cuda_stream(q))
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None,
                           max_seqlen_k=None, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *,
                           out=None, backend="auto"):
    """FlashAttention's calling convention for self-attention over a varlen batch.

    Change `from flash_attn import flash_attn_varlen_func` to `from visattn import ...`.
    Returns out, or (out, softmax_lse, None) with return_attn_probs (as flash_attn does).
    What visattn cannot honour raises instead of silently running: dropout, softcap, ALiBi,
    paged KV, and different q/k batches (cross-attention). causal=True is the lower-triangular
    mask inside each image (window right edge 0).
    """
    del deterministic  # the forward pass is deterministic anyway
    if dropout_p:
        raise ValueError(f"dropout_p={dropout_p}: visattn is inference-only; dropout must be 0")
    if softcap:
        raise ValueError(f"softcap={softcap}: logit soft-capping is not supported")
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: ALiBi is not supported")
    if block_table is not None:
        raise ValueError("block_table: paged KV is not supported (vision encoders have no KV cache)")
    batch = VarlenBatch(cu_seqlens_q, max_seqlen=max_seqlen_q)
    if cu_seqlens_k is not cu_seqlens_q and batch.cu_seqlens != VarlenBatch(cu_seqlens_k).cu_seqlens:
        raise ValueError("cu_seqlens_k differs from cu_seqlens_q: only self-attention "
                         "(the same images for q and k) is supported")
    if max_seqlen_k is not None and _arrays.scalar_int(max_seqlen_k, "max_seqlen_k") < batch.max_seqlen:
        raise ValueError(f"max_seqlen_k={max_seqlen_k} < longest image {batch.max_seqlen}")
    left, right = window_size
    if causal:
        right = 0
    result = attention(q, k, v, batch=batch, softmax_scale=softmax_scale, window=(left, right),
                       return_lse=return_attn_probs, out=out, backend=backend)
    return (*result, None) if return_attn_probs else result


def backends():
    """Every backend of this build: name, device, availability (and why not), dtypes, and
    plans_built (cuDNN plans this process built, for `cudnn`; 0 for the others)."""
    return _C.backends()


def info():
    """Build, CPU features, GPUs, backends and what `auto` picks per device."""
    data = _C.system_info()
    data["backends"] = backends()
    auto = {}
    for device in ("cpu", "cuda"):
        try:
            auto[device] = _C.auto_backend(device)
        except RuntimeError as error:
            auto[device] = f"none ({error})"
    data["auto"] = auto
    data["layer_gemm"] = {device: _C.layer_gemm(device) for device in ("cpu", "cuda")}
    return data


from .layer import VisionAttentionLayer, WindowLayout, qwen25vl_window_layout  # noqa: E402

try:  # register visattn::attention with torch.library when torch is present
    from . import _torch_op  # noqa: F401
except ImportError:
    pass
