"""Gated DeltaNet (Qwen3-Next's linear attention), as transformers' Qwen3NextGatedDeltaNet
computes it, over a flat batch of sequences whose states come from a `RecurrentStates`.

Per value head, a matrix state S `[value dim, key dim]` (vLLM's orientation: the transpose
of transformers' `[key dim, value dim]`) evolves token by token:

    S <- exp(g_t) S                      (gated decay, g_t <= 0)
    S <- S + beta_t (v_t - S k_t) k_t^T  (delta rule: write the part of v_t S misses)
    o_t = S q_t

q and k are L2-normalised per head (q then scaled by key dim^-0.5), after a causal depthwise
conv (kernel K, silu) whose last K - 1 inputs are the conv state. A one-token step runs the
recurrence (`recurrent_gated_delta_rule`), a longer one its chunked form
(`chunked_gated_delta_rule`), both plain PyTorch from the state read; on CUDA, where
flash-linear-attention imports, FLA's kernels instead (`fla_delta_rule`; docs/models.md,
Recurrent kernels on CUDA).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.causal_conv import causal_conv
from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall, Linear
from kvbench.models.recurrent_states import RecurrentStates, sequence_groups


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(|x|^2 + eps) over the last dim (FLA's and transformers' form)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def recurrent_gated_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence token by token, in float32. q, k `[N, T, H, Dk]` (normalised, q
    scaled), v `[N, T, H, Dv]`, g and beta `[N, T, H]`, state `[N, H, Dv, Dk]`. Returns the
    outputs `[N, T, H, Dv]` and the state after the last token (float32)."""
    state = state.float()
    outputs = []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[..., None, None]
        predicted = torch.einsum("nhvk,nhk->nhv", state, k[:, t])
        delta = (v[:, t] - predicted) * beta[:, t, :, None]
        state = state + delta[..., :, None] * k[:, t, :, None, :]
        outputs.append(torch.einsum("nhvk,nhk->nhv", state, q[:, t]))
    return torch.stack(outputs, dim=1), state


def chunked_gated_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor, chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same recurrence as `recurrent_gated_delta_rule` (same arguments), `chunk_size`
    tokens at a time, in float32.

    Within a chunk, with c_i the cumulative log decay from its start and S0 the state before
    it, the state just before token j's write is exp(c_j) S0 + sum_{m<j} exp(c_j - c_m) u_m k_m^T,
    so the writes u_j = beta_j (v_j - that state's k_j) solve a unit lower-triangular system
    (I + A) U = beta V - beta exp(c) K S0^T, A[j, m] = beta_j exp(c_j - c_m) k_j.k_m (m < j).
    The outputs are exp(c_i) S0 q_i + sum_{j<=i} exp(c_i - c_j) (q_i.k_j) u_j and the state
    after the chunk exp(c_L) S0 + sum_j exp(c_L - c_j) u_j k_j^T. The tail is padded with
    tokens that change nothing (g = 0, beta = 0, k = 0)."""
    batch, tokens, heads, _ = q.shape
    pad = (-tokens) % chunk_size
    # -> [N, H, chunks, L, D] (and [N, H, chunks, L] for g, beta)
    q, k, v = (F.pad(x.transpose(1, 2), (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = (F.pad(x.transpose(1, 2), (0, pad)) for x in (g, beta))
    q, k, v = (x.reshape(batch, heads, -1, chunk_size, x.shape[-1]) for x in (q, k, v))
    g, beta = (x.reshape(batch, heads, -1, chunk_size) for x in (g, beta))

    cum = g.cumsum(dim=-1)  # c_i
    # exp(c_i - c_j) for j <= i; above the diagonal masked before exp (it could overflow)
    later = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).triu(1)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(later, float("-inf")).exp()
    beta_k = k * beta[..., None]
    # (I + A): solve_triangular's unitriangular reads its strictly lower part only
    system = (beta_k @ k.transpose(-1, -2)) * decay
    writes_v = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False,
                                             unitriangular=True)
    writes_k = torch.linalg.solve_triangular(system, beta_k * cum.exp()[..., None],
                                             upper=False, unitriangular=True)
    scores = (q @ k.transpose(-1, -2)) * decay  # lower triangle, diagonal included
    q_decayed = q * cum.exp()[..., None]
    k_to_end = k * (cum[..., -1:] - cum).exp()[..., None]
    chunk_decay = cum[..., -1].exp()

    state = state.float()
    outputs = []
    for c in range(q.shape[2]):
        u = writes_v[:, :, c] - writes_k[:, :, c] @ state.transpose(-1, -2)  # [N, H, L, Dv]
        outputs.append(q_decayed[:, :, c] @ state.transpose(-1, -2) + scores[:, :, c] @ u)
        state = (state * chunk_decay[:, :, c, None, None]
                 + u.transpose(-1, -2) @ k_to_end[:, :, c])
    out = torch.stack(outputs, dim=2).reshape(batch, heads, -1, v.shape[-1])[:, :, :tokens]
    return out.transpose(1, 2), state


# The fla release checked against the reference (tests/models/test_fla_gated_delta_rule.py).
# state_v_first is 0.6's name (0.6 still reads a deprecated transpose_state_layout); the kernels
# take **kwargs, so a release that knew neither would ignore it and read the state transposed.
FLA_VERSION = (0, 6)

FlaKernels = tuple[Callable[..., tuple[torch.Tensor, torch.Tensor]], ...]


@functools.cache
def fla_kernels() -> FlaKernels | None:
    """FLA's (chunk_gated_delta_rule, fused_recurrent_gated_delta_rule), or None where fla
    is not installed or is not a FLA_VERSION release (then a warning, once)."""
    try:
        # optional (the [fla] extra), imported only when a CUDA step asks for it
        import fla
        from fla.ops.gated_delta_rule import (
            chunk_gated_delta_rule,
            fused_recurrent_gated_delta_rule,
        )
    except ImportError:
        return None
    if tuple(int(part) for part in fla.__version__.split(".")[:2]) != FLA_VERSION:
        warnings.warn(f"flash-linear-attention {fla.__version__} is not the "
                      f"{'.'.join(map(str, FLA_VERSION))}.x kvbench was checked against: Gated "
                      "DeltaNet runs its PyTorch reference", stacklevel=2)
        return None
    return chunk_gated_delta_rule, fused_recurrent_gated_delta_rule


def fla_kernels_for(x: torch.Tensor) -> FlaKernels | None:
    """FLA's kernels where `x` is on CUDA and fla imports; None means the PyTorch reference."""
    return fla_kernels() if x.is_cuda else None


def fla_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor, cu_seqlens: torch.Tensor, kernels: FlaKernels,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule by FLA's kernels over N sequences laid end to end (FLA's varlen form).
    q, k `[1, T, key heads, Dk]` as the conv gives them: the kernel L2-normalises them
    (`use_qk_l2norm_in_kernel`, as transformers and vLLM call it) and scales q by Dk^-0.5;
    value head h reads key head h // (value heads / key heads), as repeat_interleave gives.
    v `[1, T, value heads, Dv]`, g (log decay, float32) and beta `[1, T, value heads]`,
    state `[N, value heads, Dv, Dk]` (`state_v_first`: vLLM's and kvbench's orientation),
    cu_seqlens `[N + 1]` (int64). Every sequence one token: the fused recurrence; else
    chunked. Returns the outputs `[1, T, value heads, Dv]` and the states after (float32)."""
    chunk, recurrent = kernels
    kernel = recurrent if q.shape[1] == cu_seqlens.numel() - 1 else chunk
    return kernel(q, k, v, g=g, beta=beta, scale=k.shape[-1] ** -0.5,
                  initial_state=state.contiguous(), output_final_state=True,
                  use_qk_l2norm_in_kernel=True, state_v_first=True, cu_seqlens=cu_seqlens)


class GatedRMSNorm(DirectCall):
    """RMSNorm over one value head (plain weight, identity 1), then times silu(z), as
    transformers' Qwen3NextRMSNormGated rounds it."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return (self.weight * normed * F.silu(gate.float())).to(x.dtype)


class GatedDeltaNet(DirectCall):
    """Qwen3-Next's `linear_attn` layer, under transformers' parameter names."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        mixer = config.hybrid.recurrent
        self.layer_index = layer_index
        self.key_heads, self.key_dim = mixer.num_groups, mixer.state_size
        self.value_heads, self.value_dim = mixer.num_heads, mixer.head_dim
        self.chunk_size = mixer.chunk_size
        h = config.hidden_size
        keys, values = self.key_heads * self.key_dim, self.value_heads * self.value_dim
        self.in_proj_qkvz = Linear(h, 2 * keys + 2 * values, bias=False)
        self.in_proj_ba = Linear(h, 2 * self.value_heads, bias=False)
        # the conv's weight `[channels, 1, K]` under the checkpoint's `conv1d.weight`
        self.conv1d = nn.Conv1d(mixer.conv_dim, mixer.conv_dim, mixer.conv_kernel,
                                groups=mixer.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.value_heads))
        self.A_log = nn.Parameter(torch.zeros(self.value_heads))
        self.norm = GatedRMSNorm(self.value_dim, config.rms_norm_eps)
        self.out_proj = Linear(values, h, bias=False)

    def split_projections(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k `[T, key heads x key dim]`, v, z `[T, value heads, value dim]`, b, a
        `[T, value heads]`. The projections are laid out per key head: its q, k, then the
        v and z of its value heads (value head h belongs to key head h // ratio)."""
        tokens, ratio = x.shape[0], self.value_heads // self.key_heads
        qkvz = self.in_proj_qkvz(x).view(tokens, self.key_heads, -1)
        widths = [self.key_dim, self.key_dim, ratio * self.value_dim, ratio * self.value_dim]
        q, k, v, z = torch.split(qkvz, widths, dim=-1)
        b, a = torch.split(self.in_proj_ba(x).view(tokens, self.key_heads, 2 * ratio),
                           [ratio, ratio], dim=-1)
        v, z = (t.reshape(tokens, self.value_heads, self.value_dim) for t in (v, z))
        b, a = (t.reshape(tokens, self.value_heads) for t in (b, a))
        return q.reshape(tokens, -1), k.reshape(tokens, -1), v, z, b, a

    def forward(self, x: torch.Tensor, states: RecurrentStates) -> torch.Tensor:
        """x `[T, hidden]`, the step's tokens (sequence i: `states.query_lens[i]` consecutive
        tokens); reads and writes this layer's states in `states`."""
        tokens = x.shape[0]
        q, k, v, z, b, a = self.split_projections(x)
        mixed = torch.cat((q, k, v.reshape(tokens, -1)), dim=-1)  # the conv's channels
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        conv_state, recurrent_state = states.read(self.layer_index)
        new_conv, new_recurrent = conv_state.clone(), recurrent_state.clone()
        out = x.new_empty(tokens, self.value_heads, self.value_dim)
        for length, (seqs, starts) in sequence_groups(states.query_lens).items():
            index = (torch.tensor(starts, device=x.device)[:, None]
                     + torch.arange(length, device=x.device))  # [n, length]
            seq = torch.tensor(seqs, device=x.device)
            conv_out, conv_after = causal_conv(mixed[index], conv_state[seq], self.conv1d.weight)
            new_conv[seq] = conv_after.to(new_conv.dtype)
            core, state_after = self.delta_rule(conv_out, g[index], beta[index],
                                                recurrent_state[seq])
            new_recurrent[seq] = state_after.to(new_recurrent.dtype)
            out[index] = core.to(out.dtype)
        states.write(self.layer_index, (new_conv, new_recurrent))
        normed = self.norm(out.reshape(-1, self.value_dim), z.reshape(-1, self.value_dim))
        return self.out_proj(normed.reshape(tokens, -1))

    def delta_rule(self, conv_out: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                   state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One group's outputs `[n, L, value heads, value dim]` and states after, from its
        conv outputs `[n, L, conv channels]`: a one-token step by the recurrence (as
        transformers decodes), a longer one chunked (as it prefills); FLA's kernels on CUDA
        where fla imports, the group's n sequences as its varlen batch."""
        n, length = conv_out.shape[:2]
        keys = self.key_heads * self.key_dim
        q, k, v = torch.split(conv_out, [keys, keys, conv_out.shape[-1] - 2 * keys], dim=-1)
        kernels = fla_kernels_for(conv_out)
        if kernels is not None:
            tokens = n * length
            q, k = (t.reshape(1, tokens, self.key_heads, self.key_dim) for t in (q, k))
            v = v.reshape(1, tokens, self.value_heads, self.value_dim)
            g, beta = (t.reshape(1, tokens, self.value_heads) for t in (g, beta))
            cu_seqlens = torch.arange(0, tokens + 1, length, device=conv_out.device)
            out, state = fla_delta_rule(q, k, v, g, beta, state, cu_seqlens, kernels)
            return out.view(n, length, self.value_heads, self.value_dim), state
        ratio = self.value_heads // self.key_heads
        q, k = (t.reshape(n, length, self.key_heads, self.key_dim)
                .repeat_interleave(ratio, dim=2).float() for t in (q, k))
        v = v.reshape(n, length, self.value_heads, self.value_dim).float()
        q, k = l2norm(q), l2norm(k)
        q = q * self.key_dim**-0.5
        if length == 1:
            return recurrent_gated_delta_rule(q, k, v, g, beta.float(), state)
        return chunked_gated_delta_rule(q, k, v, g, beta.float(), state, self.chunk_size)
