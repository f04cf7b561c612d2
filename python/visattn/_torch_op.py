"""visattn as a torch custom op (torch.ops.visattn.varlen_attention), so torch.compile traces
through it: the fake implementation gives the output's shape without running the kernel."""

from typing import Optional

import torch

from . import attention


@torch.library.custom_op("visattn::varlen_attention", mutates_args=())
def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: Optional[int] = None, softmax_scale: Optional[float] = None,
                     window_left: int = -1, window_right: int = -1) -> torch.Tensor:
    return attention(q, k, v, cu_seqlens, max_seqlen=max_seqlen, softmax_scale=softmax_scale,
                     window=(window_left, window_right))


@varlen_attention.register_fake
def _(q, k, v, cu_seqlens, max_seqlen=None, softmax_scale=None, window_left=-1, window_right=-1):
    return torch.empty_like(q)
