"""The attention-ops protocol and its two implementations (PyTorch reference, Triton).

An executor holds one `AttentionOps` and calls its methods; which implementation it holds is
decided once (`kvbench.kernels.backend.get_ops`). Both take the signatures of
`kvbench.kernels.reference` (the Triton one accepts keyword-only tuning extras).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from . import cpu_attention, reference
from .attention_shape import AttentionShape
from .reference import Scale


@runtime_checkable
class AttentionOps(Protocol):
    """KV write and attention over one layer's cache (see `kvbench.kernels` for the layout).

    Each attention method also takes the keyword-only score variants of
    `kvbench.kernels.reference` (`sliding_window`, `softcap`, `sinks`) through `extra`.
    """

    name: str

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: Scale = None,
                 v_scale: Scale = None) -> None: ...

    def paged_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, query_start_loc: torch.Tensor,
                        seq_lens: torch.Tensor, block_size: int, softmax_scale: float,
                        k_scale: Scale = None, v_scale: Scale = None,
                        **extra: Any) -> torch.Tensor: ...

    def contiguous_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             start_slots: torch.Tensor, query_start_loc: torch.Tensor,
                             seq_lens: torch.Tensor, softmax_scale: float, k_scale: Scale = None,
                             v_scale: Scale = None, **extra: Any) -> torch.Tensor: ...

    def paged_decode_attention(self, q: torch.Tensor, k_cache: torch.Tensor,
                               v_cache: torch.Tensor, block_tables: torch.Tensor,
                               seq_lens: torch.Tensor, block_size: int, softmax_scale: float,
                               k_scale: Scale = None, v_scale: Scale = None,
                               **extra: Any) -> torch.Tensor: ...

    def contiguous_decode_attention(self, q: torch.Tensor, k_cache: torch.Tensor,
                                    v_cache: torch.Tensor, start_slots: torch.Tensor,
                                    seq_lens: torch.Tensor, softmax_scale: float,
                                    k_scale: Scale = None, v_scale: Scale = None,
                                    **extra: Any) -> torch.Tensor: ...

    def precompile(self, shape: AttentionShape, device: torch.device) -> float:
        """Build every kernel variant `shape` meets before anything is timed; seconds spent."""
        ...


class TorchAttentionOps:
    """Plain PyTorch, any device: `kvbench.kernels.cpu_attention`'s attention (the reference's
    results, faster) and the reference's KV writes."""

    name = "torch"
    write_kv = staticmethod(reference.write_kv)
    paged_attention = staticmethod(cpu_attention.paged_attention)
    contiguous_attention = staticmethod(cpu_attention.contiguous_attention)
    paged_decode_attention = staticmethod(cpu_attention.paged_decode_attention)
    contiguous_decode_attention = staticmethod(cpu_attention.contiguous_decode_attention)

    def precompile(self, shape: AttentionShape, device: torch.device) -> float:
        return 0.0  # nothing to compile


class LatentAttentionOps:
    """Latent attention (MLA) on `decode_ops`' decode kernels, with prefill on the torch
    backend's (`kvbench.kernels.cpu_attention`): the Triton decode reads the latent cache
    directly (one 576-wide row a token), and no Triton prefill over the latent is built (an
    absorbed-form prefill would re-read the whole latent prefix for every query token; vLLM
    prefills MLA decompressed)."""

    def __init__(self, decode_ops: AttentionOps) -> None:
        self.name = decode_ops.name
        self.write_kv = decode_ops.write_kv
        self.paged_decode_attention = decode_ops.paged_decode_attention
        self.contiguous_decode_attention = decode_ops.contiguous_decode_attention
        self._decode_ops = decode_ops

    @staticmethod
    def paged_attention(*args: Any, max_query_len: int | None = None,
                        **kwargs: Any) -> torch.Tensor:
        # max_query_len: a Triton launch's hint, which PyTorch does not need
        return cpu_attention.paged_attention(*args, **kwargs)

    @staticmethod
    def contiguous_attention(*args: Any, max_query_len: int | None = None,
                             **kwargs: Any) -> torch.Tensor:
        return cpu_attention.contiguous_attention(*args, **kwargs)

    def precompile(self, shape: AttentionShape, device: torch.device) -> float:
        return self._decode_ops.precompile(shape, device)

