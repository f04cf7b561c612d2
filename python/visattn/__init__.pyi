from typing import Any, Optional, Sequence, Tuple, Union

__version__: str

Array = Any  # torch.Tensor, numpy.ndarray (ml_dtypes for bfloat16), cupy or jax array
IntSequence = Union[Sequence[int], Array]

class VarlenBatch:
    def __init__(self, cu_seqlens: Optional[IntSequence] = ..., *, lengths: Optional[IntSequence] = ...,
                 max_seqlen: Optional[int] = ...) -> None: ...
    @classmethod
    def uniform(cls, num_images: int, seqlen: int) -> "VarlenBatch": ...
    @property
    def num_images(self) -> int: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def max_seqlen(self) -> int: ...
    @property
    def cu_seqlens(self) -> list[int]: ...
    @property
    def lengths(self) -> list[int]: ...
    @property
    def batch_bucket(self) -> int: ...
    @property
    def max_seqlen_bucket(self) -> int: ...
    def prepare(self, device: Any = ..., stream: Optional[int] = ...) -> "VarlenBatch": ...
    def update_device(self, other: Union["VarlenBatch", IntSequence], stream: Optional[int] = ...) -> "VarlenBatch": ...
    def element_offsets(self, token_stride: int, tensor_name: str = ...) -> list[int]: ...
    def packed_indptrs(self, qk_token_stride: int, v_token_stride: int, o_token_stride: int) -> list[int]: ...

def attention(q: Array, k: Array, v: Array, cu_seqlens: Optional[IntSequence] = ..., *,
              batch: Optional[VarlenBatch] = ..., max_seqlen: Optional[int] = ...,
              softmax_scale: Optional[float] = ..., window: Tuple[int, int] = ...,
              sinks: Optional[Array] = ..., return_lse: bool = ..., out: Optional[Array] = ...,
              backend: str = ..., num_threads: int = ...) -> Union[Array, Tuple[Array, Array]]: ...

def flash_attn_varlen_func(q: Array, k: Array, v: Array, cu_seqlens_q: IntSequence,
                           cu_seqlens_k: IntSequence, max_seqlen_q: Optional[int] = ...,
                           max_seqlen_k: Optional[int] = ..., dropout_p: float = ...,
                           softmax_scale: Optional[float] = ..., causal: bool = ...,
                           window_size: Tuple[int, int] = ..., softcap: float = ...,
                           alibi_slopes: Optional[Array] = ..., deterministic: bool = ...,
                           return_attn_probs: bool = ..., block_table: Optional[Array] = ..., *,
                           out: Optional[Array] = ..., backend: str = ...) -> Any: ...

def backends() -> list[dict[str, Any]]: ...
def info() -> dict[str, Any]: ...

class VisionAttentionLayer:
    def __init__(self, embed_dim: int, num_heads: int, weights: dict[str, Array], *, num_kv_heads: int = ...,
                 head_dim: int = ..., qk_norm: str = ..., qk_norm_eps: float = ..., rope: str = ...,
                 softmax_scale: Optional[float] = ...) -> None: ...
    @classmethod
    def from_state_dict(cls, state_dict: dict[str, Array], embed_dim: int, num_heads: int, prefix: str = ...,
                        **config: Any) -> "VisionAttentionLayer": ...
    @classmethod
    def from_safetensors(cls, path: Any, prefix: str, embed_dim: int, num_heads: int, *, dtype: Any = ...,
                         device: Any = ..., qkv_bias: bool = ..., proj_bias: bool = ..., num_kv_heads: int = ...,
                         head_dim: int = ..., qk_norm: str = ..., qk_norm_eps: float = ..., rope: str = ...,
                         softmax_scale: Optional[float] = ...) -> "VisionAttentionLayer": ...
    embed_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    device: str
    def forward(self, x: Array, cu_seqlens: Union[IntSequence, VarlenBatch, None] = ..., *,
                batch: Optional[VarlenBatch] = ..., cos: Optional[Array] = ..., sin: Optional[Array] = ...,
                out: Optional[Array] = ..., backend: str = ..., num_threads: int = ...) -> Array: ...
    def __call__(self, x: Array, cu_seqlens: Union[IntSequence, VarlenBatch, None] = ..., *,
                 batch: Optional[VarlenBatch] = ..., cos: Optional[Array] = ..., sin: Optional[Array] = ...,
                 out: Optional[Array] = ..., backend: str = ..., num_threads: int = ...) -> Array: ...

class WindowLayout:
    permutation: Any  # numpy int64 [tokens]
    inverse: Any      # numpy int64 [tokens]
    windows: VarlenBatch
    frames: VarlenBatch

def qwen25vl_window_layout(grid_thw: Any, spatial_merge_size: int = ..., window_size: int = ...,
                           patch_size: int = ...) -> WindowLayout: ...
