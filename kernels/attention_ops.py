"""The attention-ops protocol and its two implementations (PyTorch reference, Triton).

An executor holds one `AttentionOps` and calls its methods; which implementation it holds is
decided once (`kvbench.kernels.backend.get_ops`). Both take the signatures of
`kvbench.kernels.reference` (the Triton one accepts keyword-only tuning extras).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from . import reference
from .attention_shape import AttentionShape
from .reference import Scale


@runtime_checkable
class AttentionOps(Protocol):
    """KV write and attention over one layer's cache (see `kvbench.kernels` for the layout)."""

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


class _ModuleOps:
    """Methods forwarded to a kernel module with the reference's function names."""

    name: ClassVar[str]
    _module_name: ClassVar[str]

    def __init__(self) -> None:
        self._module = importlib.import_module(self._module_name)

    def write_kv(self, *args, **kwargs) -> None:
        self._module.write_kv(*args, **kwargs)

    def paged_attention(self, *args, **kwargs) -> torch.Tensor:
        return self._module.paged_attention(*args, **kwargs)

    def contiguous_attention(self, *args, **kwargs) -> torch.Tensor:
        return self._module.contiguous_attention(*args, **kwargs)

    def paged_decode_attention(self, *args, **kwargs) -> torch.Tensor:
        return self._module.paged_decode_attention(*args, **kwargs)

    def contiguous_decode_attention(self, *args, **kwargs) -> torch.Tensor:
        return self._module.contiguous_decode_attention(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TorchAttentionOps(_ModuleOps):
    """`kvbench.kernels.reference`: plain PyTorch, any device; the ground truth."""

    name = "torch"
    _module_name = reference.__name__

    def precompile(self, shape: AttentionShape, device: torch.device) -> float:
        return 0.0  # nothing to compile


class TritonAttentionOps(_ModuleOps):
    """`kvbench.kernels.triton_ops`: CUDA, or the CPU under ``TRITON_INTERPRET=1``.
    Constructing it imports triton (``ImportError`` where it is missing)."""

    name = "triton"
    _module_name = "kvbench.kernels.triton_ops"

    def precompile(self, shape: AttentionShape, device: torch.device) -> float:
        from .variants import precompile

        return precompile(shape, device)

    def choose_num_splits(self, num_seqs: int, num_kv_heads: int, max_seq_len: int,
                          device: torch.device) -> int:
        """The split-K factor decode picks by default (see `triton_ops.choose_num_splits`)."""
        return self._module.choose_num_splits(num_seqs, num_kv_heads, max_seq_len, device)


IMPLEMENTATIONS: dict[str, type[_ModuleOps]] = {
    TorchAttentionOps.name: TorchAttentionOps,
    TritonAttentionOps.name: TritonAttentionOps,
}
