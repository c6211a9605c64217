"""The attention-ops protocol an executor calls, its torch implementation and the latent-
attention adapter (the Triton one, which imports triton, is `triton_ops.TritonAttentionOps`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from . import cpu_attention, reference
from .attention_shape import AttentionShape


@runtime_checkable
class AttentionOps(Protocol):
    """KV write and attention over one layer's cache (see `kvbench.kernels` for the layout),
    each with the signature of its namesake in `kvbench.kernels.reference`, score variants
    (`sliding_window`, `softcap`, `sinks`) included; an implementation may add keyword-only
    extras after them (tests/kernels/test_reference.py checks the Triton ones)."""

    name: str
    write_kv: Callable[..., None]
    paged_attention: Callable[..., torch.Tensor]
    contiguous_attention: Callable[..., torch.Tensor]
    paged_decode_attention: Callable[..., torch.Tensor]
    contiguous_decode_attention: Callable[..., torch.Tensor]

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

