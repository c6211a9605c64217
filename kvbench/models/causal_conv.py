"""The causal depthwise conv both recurrent mixers (Mamba-2, Gated DeltaNet) run before their
scan, continuing from each sequence's conv state."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv(x: torch.Tensor, state: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """silu of a depthwise causal conv over `x` `[N, T, C]` continuing from `state`
    `[N, K - 1, C]` (each sequence's last K - 1 inputs; zeros for a fresh sequence), with
    `weight` `[C, 1, K]` (nn.Conv1d's): (the output `[N, T, C]` in x's dtype, the new state:
    the last K - 1 inputs, in x's dtype)."""
    kernel = weight.shape[-1]
    full = torch.cat((state.to(x.dtype), x), dim=1)  # [N, K - 1 + T, C]
    out = F.conv1d(full.transpose(1, 2).to(weight.dtype), weight, bias, groups=weight.shape[0])
    return F.silu(out.transpose(1, 2)).to(x.dtype), full[:, full.shape[1] - (kernel - 1):]
