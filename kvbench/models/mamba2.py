"""A Mamba-2 layer over a flat batch, in plain PyTorch: the math transformers'
GraniteMoeHybridMambaLayer computes (its torch path) and mamba_ssm's kernels fuse.

Per sequence, from its state (`RecurrentStates.read`): `in_proj` splits into the gate z, the
conv's input xBC and the time step dt; a depthwise causal conv continues from the conv state,
then silu, and x, B and C split from it (B and C shared by a group's heads); the selective
scan with dt = softplus(dt + dt_bias), A = -exp(A_log), per head h_t = exp(dt_t A) h_{t-1} +
dt_t x_t B_t^T, y_t = h_t C_t + D x_t (a chunk: the SSD chunked form, `ssd_scan`, Dao & Gu
2024 section 6; one token: `ssm_step`); the gated RMSNorm norm(y * silu(z)), then `out_proj`.
The scan and the norm run in float32 (as transformers' torch path); the SSM state is stored
in `RecurrentMixer.ssm_state_dtype`, the conv state in the model's dtype. Every device runs
this reference (docs/models.md, Recurrent kernels on CUDA).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.causal_conv import causal_conv
from kvbench.models.direct_call import DirectCall, Linear
from kvbench.models.recurrent import RecurrentMixer
from kvbench.models.recurrent_states import RecurrentStates, sequence_groups


class GatedRMSNorm(DirectCall):
    """transformers' `GraniteMoeHybridRMSNormGated`: x * silu(z), normalised over each of
    `groups` equal parts of the width, in float32, times the weight in x's dtype."""

    def __init__(self, size: int, groups: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.group_size = size // groups
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float() * F.silu(gate.float())
        grouped = xf.view(*xf.shape[:-1], -1, self.group_size)
        grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * grouped.view(xf.shape).to(dtype)


def ssd_scan(x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
             c: torch.Tensor, initial: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The selective scan of one sequence in chunks of `chunk` tokens (SSD), float32:
    x `[L, H, P]`, dt `[L, H]` (after softplus), a `[H]` (A, negative), b and c `[L, H, N]`
    (each head's group), initial `[H, P, N]` -> (y `[L, H, P]` without the D skip, the
    final state `[H, P, N]`).

    Within a chunk the output is the masked "attention" form, sum over s <= l of
    (C_l . B_s) exp(cum_l - cum_s) dt_s x_s; each chunk's start state carries what came
    before (a sequential recurrence over the chunks, their decays exp(cum_last)). Padding
    to whole chunks uses dt = 0: no input, no decay."""
    length = x.shape[0]
    pad = (-length) % chunk
    if pad:
        x, dt, b, c = (F.pad(t, (0,) * (2 * t.dim() - 2) + (0, pad)) for t in (x, dt, b, c))
    n = x.shape[0] // chunk
    heads, head_dim, state_size = initial.shape
    xdt = (x * dt[..., None]).view(n, chunk, heads, head_dim)
    b = b.view(n, chunk, heads, state_size)
    c = c.view(n, chunk, heads, state_size)
    cum = (dt * a).view(n, chunk, heads).cumsum(dim=1)  # [n, Q, H] log decay since chunk start
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    # exp(cum_l - cum_s) for s <= l, 0 above the diagonal (masked before exp: no overflow)
    seg = (cum[:, :, None, :] - cum[:, None, :, :]).masked_fill(~causal[None, :, :, None],
                                                               float("-inf"))
    scores = torch.einsum("clhn,cshn->clsh", c, b) * seg.exp()
    y = torch.einsum("clsh,cshp->clhp", scores, xdt)
    # each chunk's contribution to the state at its end, then the chunks in order
    to_end = (cum[:, -1:, :] - cum).exp()  # [n, Q, H]
    chunk_states = torch.einsum("clhn,clh,clhp->chpn", b, to_end, xdt)
    chunk_decay = cum[:, -1, :].exp()  # [n, H]
    state = initial
    starts = []
    for i in range(n):
        starts.append(state)
        state = state * chunk_decay[i][:, None, None] + chunk_states[i]
    start_states = torch.stack(starts)  # [n, H, P, N]: the state before each chunk
    y = y + torch.einsum("clhn,chpn->clhp", c, start_states) * cum.exp()[..., None]
    return y.reshape(n * chunk, heads, head_dim)[:length], state


def ssm_step(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor,
             b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of each of S sequences, float32: state `[S, H, P, N]`, x `[S, H, P]`, dt
    `[S, H]`, a `[H]`, b and c `[S, H, N]` -> (y `[S, H, P]` without the D skip, the new
    state)."""
    decay = (dt * a).exp()[..., None, None]
    state = state * decay + (x * dt[..., None])[..., None] * b[:, :, None, :]
    return torch.einsum("shpn,shn->shp", state, c), state


class Mamba2Mixer(DirectCall):
    """One Mamba-2 layer under transformers' parameter names (`mamba.in_proj`, `conv1d`,
    `dt_bias`, `A_log`, `D`, `norm`, `out_proj`)."""

    def __init__(self, shape: RecurrentMixer, hidden: int, eps: float, layer_index: int) -> None:
        super().__init__()
        self.shape = shape
        self.layer_index = layer_index  # the model's layer index, as `RecurrentStates` takes it
        inner, heads = shape.inner_size, shape.num_heads
        self.conv_dim = shape.conv_dim
        self.in_proj = Linear(hidden, inner + self.conv_dim + heads, bias=shape.proj_bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, shape.conv_kernel,
                                groups=self.conv_dim, bias=shape.conv_bias,
                                padding=shape.conv_kernel - 1)
        self.dt_bias = nn.Parameter(torch.ones(heads))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.D = nn.Parameter(torch.ones(heads))
        self.norm = GatedRMSNorm(inner, shape.num_groups, eps)
        self.out_proj = Linear(inner, hidden, bias=shape.proj_bias)

    def conv(self, xbc: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The causal conv (causal_conv1d's kernels on CUDA, where installed)."""
        return causal_conv(xbc, state, self.conv1d.weight, self.conv1d.bias)

    def scan(self, x: torch.Tensor, dt: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
             state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The selective scan of S sequences of L tokens each, float32 (`[S, L, ...]`):
        mamba_ssm's `mamba_chunk_scan_combined` / `selective_state_update` on CUDA, where
        installed."""
        a = -torch.exp(self.A_log.float())
        if x.shape[1] == 1:
            y, state = ssm_step(state, x[:, 0], dt[:, 0], a, b[:, 0], c[:, 0])
            return y[:, None], state
        outs = [ssd_scan(x[i], dt[i], a, b[i], c[i], state[i], self.shape.chunk_size)
                for i in range(x.shape[0])]
        return torch.stack([y for y, _ in outs]), torch.stack([s for _, s in outs])

    def forward(self, hidden: torch.Tensor, states: RecurrentStates) -> torch.Tensor:
        """`hidden` `[T, hidden]`, the flat batch (sequence i's `states.query_lens[i]`
        tokens in order) -> `[T, hidden]`; the sequences' states advanced in `states`."""
        shape = self.shape
        inner, heads, head_dim = shape.inner_size, shape.num_heads, shape.head_dim
        groups, state_size = shape.num_groups, shape.state_size
        dtype = hidden.dtype
        z, xbc, dt = self.in_proj(hidden).split([inner, self.conv_dim, heads], dim=-1)
        conv_states, ssm_states = states.read(self.layer_index)
        new_conv = torch.empty_like(conv_states)
        new_ssm = torch.empty_like(ssm_states)
        y = torch.empty(hidden.shape[0], heads, head_dim, dtype=torch.float32,
                        device=hidden.device)
        per_group = heads // groups
        # Sequences of one length run together (every decode in one step of the recurrence).
        for length, (seqs, starts) in sequence_groups(states.query_lens).items():
            rows = (torch.tensor(starts, device=hidden.device)[:, None]
                    + torch.arange(length, device=hidden.device))  # [n, length]
            index = torch.tensor(seqs, device=hidden.device)
            count = len(seqs)
            out, conv_state = self.conv(xbc[rows], conv_states[index])
            x, b, c = out.float().split([inner, groups * state_size, groups * state_size],
                                        dim=-1)
            b = b.reshape(count, length, groups, state_size).repeat_interleave(per_group, dim=2)
            c = c.reshape(count, length, groups, state_size).repeat_interleave(per_group, dim=2)
            x = x.reshape(count, length, heads, head_dim)
            step = F.softplus(dt[rows].float() + self.dt_bias.float())
            seq_y, ssm_state = self.scan(x, step, b, c, ssm_states[index].float())
            y[rows] = seq_y + x * self.D.float()[:, None]
            new_conv[index] = conv_state.to(new_conv.dtype)
            new_ssm[index] = ssm_state.to(new_ssm.dtype)
        states.write(self.layer_index, (new_conv, new_ssm))
        normed = self.norm(y.view(-1, inner), z)
        return self.out_proj(normed.to(dtype))
