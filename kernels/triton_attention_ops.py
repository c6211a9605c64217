"""`TritonAttentionOps`: the `AttentionOps` of the Triton kernels (imports triton)."""

from __future__ import annotations

import torch

from . import triton_ops
from .attention_shape import AttentionShape
from .variants import precompile


class TritonAttentionOps:
    """`kvbench.kernels.triton_ops`: CUDA, or the CPU under ``TRITON_INTERPRET=1``."""

    name = "triton"
    write_kv = staticmethod(triton_ops.write_kv)
    paged_attention = staticmethod(triton_ops.paged_attention)
    contiguous_attention = staticmethod(triton_ops.contiguous_attention)
    paged_decode_attention = staticmethod(triton_ops.paged_decode_attention)
    contiguous_decode_attention = staticmethod(triton_ops.contiguous_decode_attention)
    choose_num_splits = staticmethod(triton_ops.choose_num_splits)

    def precompile(self, shape: AttentionShape, device: torch.device) -> float:
        return precompile(shape, device)
