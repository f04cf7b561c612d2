"""A drop-in for SGLang's vision attention backends (python/sglang/srt/layers/attention/vision.py).

    from visattn.sglang import VisionAttentionBackend
    attn = VisionAttentionBackend()
    out = attn.forward(q, k, v, cu_seqlens, bsz, seq_len, softmax_scale, forward_metadata)

Where SGLang's backends raise (see the error pages this project started from), this converts:
cu_seqlens as a tensor (any int dtype or device), list, tuple, numpy array or the cuda-graph
list form [tensor, ...]; packed [qk, v, o] element indptrs from forward_metadata; missing
sequence_lengths derived from cu_seqlens; missing max_seqlen computed once. Tensors on the CPU
run the CPU backend instead of being refused.
"""

from . import VarlenBatch, attention


class VisionAttentionBackend:
    def __init__(self, backend="auto", **kwargs):
        self.backend = backend

    @staticmethod
    def _batch(q, cu_seqlens, bsz, seq_len, forward_metadata, kwargs):
        max_seqlen = kwargs.get("max_seqlen")
        if forward_metadata is not None:
            max_seqlen = getattr(forward_metadata, "max_seqlen", None) or getattr(
                forward_metadata, "flashinfer_max_seqlen", None) or max_seqlen
            lengths = getattr(forward_metadata, "sequence_lengths", None)
            if lengths is not None and cu_seqlens is None:
                return VarlenBatch(lengths=lengths.reshape(-1) if hasattr(lengths, "reshape") else lengths,
                                   max_seqlen=max_seqlen)
            if cu_seqlens is None:
                cu_seqlens = getattr(forward_metadata, "cu_seqlens", None)
        if cu_seqlens is None and kwargs.get("sequence_lengths") is not None:
            return VarlenBatch(lengths=kwargs["sequence_lengths"], max_seqlen=max_seqlen)
        if cu_seqlens is None:
            return VarlenBatch.uniform(bsz, seq_len)
        batch = VarlenBatch(cu_seqlens, max_seqlen=max_seqlen)
        if "sequence_lengths" in kwargs and kwargs["sequence_lengths"] is not None:
            given = VarlenBatch(lengths=kwargs["sequence_lengths"])
            if given.lengths != batch.lengths:
                raise ValueError(f"sequence_lengths {given.lengths[:8]}... disagree with "
                                 f"cu_seqlens {batch.cu_seqlens[:9]}...")
        return batch

    def forward(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None,
                forward_metadata=None, **kwargs):
        """q, k, v: [b * s, heads, head_dim] or [b, s, heads, head_dim]. Returns [b * s, heads,
        head_dim], as SGLang's backends do."""
        if len(q.shape) == 4:
            q, k, v = (x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]) for x in (q, k, v))
        batch = self._batch(q, cu_seqlens, bsz, seq_len, forward_metadata, kwargs)
        return attention(q, k, v, batch=batch, softmax_scale=softmax_scale, backend=self.backend)

    __call__ = forward
