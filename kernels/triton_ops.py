"""Triton kernels behind the same API as `kvbench.kernels.reference` (the GPU attention backend).

``write_kv``, ``paged_attention``, ``contiguous_attention``, ``paged_decode_attention`` and
``contiguous_decode_attention`` take the reference signatures (plus keyword-only tuning extras
at the end), score variants included. The decodes also take a latent-attention (MLA) cache;
the prefills refuse one (MLA prefills through the torch backend). Importing this module
imports triton and raises ``ImportError`` where it is not installed.

Tensors must be on a CUDA device, or on the CPU when ``TRITON_INTERPRET=1`` was set before
triton was imported (the interpreter: correct but slow, for tests on tiny shapes).

Numerics: softmax and accumulation are float32. With 16-bit queries on a GPU the matmul
operands are fed to ``tl.dot`` in the query's dtype (fp8 K/V are exact in bf16/fp16; the
softmax probabilities are rounded to it before P @ V, as in flash attention), accumulating in
float32. With float32 queries or caches, and always in the interpreter, operands are float32
and ``tl.dot`` runs in IEEE float32. Sequences of length 0 give zeros.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch
import triton

from kvbench.errors import KvbenchInputError

from . import launch_config
from .attention_shape import AttentionShape
from .backend import interpreting
from .reference import Scale, is_fp8
from .triton_decode import _decode_kernel, _merge_splits_kernel
from .triton_kv_write import _write_kv_kernel
from .triton_mla_decode import _mla_decode_kernel
from .triton_prefill import _prefill_kernel

# Flash-decoding heuristic (see choose_num_splits).
SPLIT_MIN_CONTEXT = 512  # never split contexts shorter than this
SPLIT_MIN_TOKENS = 256  # each split gets at least this many tokens
SPLIT_MAX = 32  # at most BLOCK_SPLITS
# The split counts `choose_num_splits` returns: a few, so a run (and its CUDA graphs, keyed by
# split count) meets a small fixed set.
SPLIT_COUNTS = (1, 2, 4, 8, 16, 32)
# The merge kernel's split tile: fixed, so that no split count compiles a new variant.
BLOCK_SPLITS = 32
# Triton specializes integer arguments on divisibility by 16: the split-K scratch buffers'
# split dimension is padded to a multiple of it, so their strides specialize alike whatever
# the split count.
SPLIT_PAD = 16
INTERPRETER_SMS = 4  # stand-in SM count on the CPU interpreter


@dataclass(frozen=True)
class Target:
    """What the launch choice depends on: compute capability (e.g. 80, 90; None for the CPU
    interpreter) and the number of SMs (split-K heuristic)."""

    arch: int | None
    sms: int


@dataclass
class Launch:
    """One kernel launch, fully decided: ``kernel[grid](*args, **constexprs, **options)``.

    The same object is launched (``run``), compiled ahead of time for another GPU
    (``kvbench.kernels.aot``) or compiled without running (``warmup``).
    """

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
    constexprs: dict[str, Any]
    options: dict[str, int] = field(default_factory=dict)

    def run(self) -> None:
        self.kernel[self.grid](*self.args, **self.constexprs, **self.options)

    def warmup(self) -> None:
        self.kernel.warmup(*self.args, grid=self.grid, **self.constexprs, **self.options)


@functools.lru_cache(maxsize=16)
def device_target(device: torch.device) -> Target:
    """The `Target` of a CUDA device, or of the CPU interpreter."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return Target(arch=10 * major + minor, sms=sms)
    return Target(arch=None, sms=INTERPRETER_SMS)


def _check_device(t: torch.Tensor) -> None:
    if t.device.type == "cuda" or (t.device.type == "cpu" and interpreting()):
        return
    raise KvbenchInputError(
        f"Triton kernels need CUDA tensors (got {t.device}); on the CPU set TRITON_INTERPRET=1 "
        "before importing triton, or use the torch backend"
    )


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.lru_cache(maxsize=64)
def _const_scale(value: float, device: torch.device) -> torch.Tensor:
    return torch.tensor([value], dtype=torch.float32, device=device)


def _scale_arg(scale: Scale, num_kv_heads: int, device: torch.device) -> tuple[torch.Tensor, bool]:
    """A scale as a float32 1-d tensor on `device` and whether it is per KV head."""
    if scale is None:
        return _const_scale(1.0, device), False
    if not isinstance(scale, torch.Tensor):
        return _const_scale(float(scale), device), False
    t = scale.to(device=device, dtype=torch.float32).reshape(-1)
    if t.numel() == 1:
        return t, False
    if t.numel() == num_kv_heads:
        return t.contiguous(), True
    raise ValueError(f"scale has {t.numel()} elements; expected 1 or num_kv_heads={num_kv_heads}")


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, head_dim: int) -> None:
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.dim() != 3 or c.shape[-1] != head_dim:
            raise ValueError(f"{name} must be [num_slots, num_kv_heads, {head_dim}], got {tuple(c.shape)}")
        if c.stride(-1) != 1:
            raise ValueError(f"{name} must have unit stride in head_dim")
    if k_cache.dtype != v_cache.dtype or k_cache.shape != v_cache.shape:
        raise ValueError("k_cache and v_cache must have the same shape and dtype")


def _unit_last_stride(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _kernel_inputs(kind: str, q: torch.Tensor, cache: torch.Tensor, table: torch.Tensor,
                   seq_lens: torch.Tensor, target: Target | None):
    """The launch target, the views the kernels index (unit-stride rows of q and of the table,
    contiguous lengths), whether ``tl.dot`` takes float32 operands (float32 queries or caches,
    and always in the interpreter) and the launch configuration of a `kind` kernel."""
    target = target or device_target(q.device)
    dot_fp32 = target.arch is None or q.dtype == torch.float32 or cache.dtype == torch.float32
    cfg = launch_config.choose(target.arch, kind, q.shape[-1], dot_fp32)
    return (target, _unit_last_stride(q), _unit_last_stride(table), seq_lens.contiguous(),
            dot_fp32, cfg)


def _num_kv_heads(k_cache: torch.Tensor, num_q_heads: int) -> int:
    """The cache's KV heads, of which the query heads must be a multiple (grouped queries)."""
    num_kv_heads = k_cache.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    return num_kv_heads


def _check_block(name: str, value: int | None) -> None:
    if value is not None and (value < 16 or value & (value - 1)):
        raise ValueError(f"{name} must be a power of two >= 16, got {value}")


# ----------------------------------------------------------------------------------------------
# KV write


def write_kv_launches(k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None,
                      target: Target | None = None) -> list[Launch]:
    """The launches `write_kv` makes (none for zero tokens).

    Latent attention (`v_cache` is ``k_cache[..., :kv_lora_rank]``): the key rows are written
    and carry the values with them (``v`` is their latent part and is not read).
    """
    num_tokens, num_kv_heads, head_dim = k.shape
    if v_cache.shape[-1] != k_cache.shape[-1]:
        _check_latent_cache(k_cache, v_cache, head_dim)
        v, v_cache, v_scale = k, k_cache, k_scale
    _check_cache(k_cache, v_cache, head_dim)
    if num_tokens == 0:
        return []
    k = _unit_last_stride(k)
    v = _unit_last_stride(v)
    ks, vs, fp8, per_head = _attention_scales(k_cache, k_scale, v_scale, num_kv_heads, k.device)
    slot_mapping = slot_mapping.contiguous()
    kc, vc = _cache_views(k_cache, v_cache)
    block_d = _next_pow2(head_dim)
    block_h = min(_next_pow2(num_kv_heads), max(1, 4096 // block_d))
    grid = (num_tokens, triton.cdiv(num_kv_heads, block_h))
    args = (
        k, v, kc, vc, slot_mapping, ks, vs,
        num_kv_heads,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        kc.stride(0), kc.stride(1), vc.stride(0), vc.stride(1),
    )
    constexprs = dict(
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_H=block_h,
        FP8=fp8, PER_HEAD_SCALE=per_head,
        SAME_DTYPE=(k.dtype == k_cache.dtype and v.dtype == v_cache.dtype),
    )
    return [Launch(_write_kv_kernel, grid, args, constexprs)]


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: Scale = None,
    v_scale: Scale = None,
) -> None:
    """Scatter new tokens' K/V `[T, Hkv, D]` into their slots ("reshape and cache").

    Slots < 0 are skipped. fp8 caches receive exactly `reference.quantize_fp8(k, k_scale)`.
    """
    _run(k, (None, write_kv_launches(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)))


# ----------------------------------------------------------------------------------------------
# Attention helpers


def _attention_scales(k_cache, k_scale, v_scale, num_kv_heads, device):
    fp8 = is_fp8(k_cache)
    if not fp8:
        one = _const_scale(1.0, device)
        return one, one, False, False
    ks, k_ph = _scale_arg(k_scale, num_kv_heads, device)
    vs, v_ph = _scale_arg(v_scale, num_kv_heads, device)
    if k_ph != v_ph:
        ks = ks.expand(num_kv_heads).contiguous()
        vs = vs.expand(num_kv_heads).contiguous()
    return ks, vs, True, k_ph or v_ph


def _cache_views(k_cache, v_cache):
    """fp8 caches are read as uint8 and decoded in the kernel (works before sm_89 too)."""
    if is_fp8(k_cache):
        return k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    return k_cache, v_cache


@dataclass(frozen=True)
class _VariantArgs:
    """The score variants of one call: constexpr flags and their runtime values."""

    window: int
    softcap: float
    sinks: torch.Tensor
    constexprs: dict[str, bool]


def _variant_args(sliding_window: int | None, softcap: float | None, sinks: torch.Tensor | None,
                  num_q_heads: int, device: torch.device) -> _VariantArgs:
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be > 0, got {softcap}")
    if sinks is None:
        sinks_arg = _const_scale(0.0, device)
    else:
        if sinks.numel() != num_q_heads:
            raise ValueError(f"sinks has {sinks.numel()} elements; expected one per query head "
                             f"({num_q_heads})")
        sinks_arg = sinks.to(device=device, dtype=torch.float32).reshape(-1).contiguous()
    flags = dict(WINDOW=sliding_window is not None, SOFTCAP=softcap is not None,
                 SINKS=sinks is not None)
    return _VariantArgs(window=sliding_window or 0, softcap=float(softcap or 0.0),
                        sinks=sinks_arg, constexprs=flags)


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int,
                      device: torch.device | Target) -> int:
    """How many programs share one sequence's context in decode (1: no split-K).

    Splitting pays when the (sequence, KV head) programs alone cannot fill the GPU and the
    contexts are long: aim for about two programs per SM (rounded up to one of
    `SPLIT_COUNTS`), with at least `SPLIT_MIN_TOKENS` tokens per split and never for contexts
    under `SPLIT_MIN_CONTEXT`.
    """
    if max_seq_len < SPLIT_MIN_CONTEXT:
        return 1
    target = device if isinstance(device, Target) else device_target(torch.device(device))
    programs = max(1, num_seqs * num_kv_heads)
    want = triton.cdiv(2 * target.sms, programs)
    by_length = max_seq_len // SPLIT_MIN_TOKENS
    fits = [n for n in SPLIT_COUNTS if n <= by_length]
    return next((n for n in fits if n >= want), fits[-1])


def decode_launches(q, k_cache, v_cache, table, paged, seq_lens, block_size, softmax_scale,
                    k_scale=None, v_scale=None, num_splits=None, max_seq_len=None, block_n=None,
                    target: Target | None = None, out=None, sliding_window=None, softcap=None,
                    sinks=None, ring_lens=None) -> tuple[torch.Tensor, list[Launch]]:
    """The output tensor and the launches of one decode call (see `paged_decode_attention`).

    `ring_lens` (contiguous only): each sequence's ring length (`_ring_table`). A `v_cache`
    narrower than `k_cache` is latent attention, without score variants or rings: `q`
    `[S, H, kv_lora_rank + rope_dim]` (key up-projection absorbed), `k_cache`
    `[num_slots, 1, kv_lora_rank + rope_dim]`, `v_cache = k_cache[..., :kv_lora_rank]`, the
    output `[S, H, kv_lora_rank]`.
    """
    if ring_lens is not None:
        table = _ring_table(table, ring_lens, paged)
    num_seqs, num_q_heads, head_dim = q.shape
    latent = v_cache.shape[-1] != k_cache.shape[-1]
    if latent:
        lora_dim = _check_latent_cache(k_cache, v_cache, head_dim)
        named = [name for name, value in (("sliding_window", sliding_window), ("softcap", softcap),
                                          ("sinks", sinks), ("ring_lens", ring_lens))
                 if value is not None]
        if named:
            raise NotImplementedError(f"the Triton latent-attention decode does not implement "
                                      f"{', '.join(named)}")
        num_kv_heads = 1
    else:
        _check_cache(k_cache, v_cache, head_dim)
        num_kv_heads = _num_kv_heads(k_cache, num_q_heads)
    _check_block("block_n", block_n)
    if out is None:
        out = torch.empty((*q.shape[:-1], v_cache.shape[-1]), dtype=q.dtype, device=q.device)
    if num_seqs == 0:
        return out, []
    target, q, table, seq_lens, dot_fp32, cfg = _kernel_inputs(
        "mla_decode" if latent else "decode", q, k_cache, table, seq_lens, target)
    ks, vs, fp8, per_head = _attention_scales(k_cache, k_scale, v_scale, num_kv_heads, q.device)
    var = _variant_args(sliding_window, softcap, sinks, num_q_heads, q.device)
    # A latent program owns a block of query heads, a plain one a KV head and its GQA group.
    block_h = min(cfg.block_m, max(16, _next_pow2(num_q_heads)))
    head_programs = triton.cdiv(num_q_heads, block_h) if latent else num_kv_heads
    num_splits = _split_count(num_splits, num_seqs, head_programs, seq_lens, max_seq_len,
                              sliding_window, target)
    split = num_splits > 1
    kc, vc = _cache_views(k_cache, v_cache)
    stride_table = table.stride(0) if paged or ring_lens is not None else 0
    dest, dest_strides = _decode_outputs(out, num_splits)
    common = dict(BLOCK_N=block_n or cfg.block_n, BLOCK_SIZE=block_size if paged else 1,
                  PAGED=paged, SPLIT=split, FP8=fp8, DOT_FP32=dot_fp32)
    if latent:
        rope_dim = head_dim - lora_dim
        kernel = _mla_decode_kernel
        constexprs = dict(
            NUM_HEADS=num_q_heads, BLOCK_H=block_h,
            LORA_DIM=lora_dim, BLOCK_L=max(16, _next_pow2(lora_dim)),
            ROPE_DIM=rope_dim, BLOCK_R=max(16, _next_pow2(rope_dim)), **common,
        )
        args = (q, kc, ks, vs, table, seq_lens, *dest, softmax_scale, num_splits,
                q.stride(0), q.stride(1), kc.stride(0), stride_table, *dest_strides)
    else:
        group = num_q_heads // num_kv_heads
        block_d = max(16, _next_pow2(head_dim))
        kernel = _decode_kernel
        constexprs = dict(
            GROUP=group, BLOCK_G=max(16, _next_pow2(group)),
            HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_DK=cfg.head_chunk(block_d), **common,
            PER_HEAD_SCALE=per_head, RING=ring_lens is not None, **var.constexprs,
        )
        args = (
            q, kc, vc, ks, vs, table, seq_lens, *dest, var.sinks,
            softmax_scale, num_splits, var.window, var.softcap,
            q.stride(0), q.stride(1),
            kc.stride(0), kc.stride(1), vc.stride(0), vc.stride(1),
            stride_table, *dest_strides,
        )
    launches = [Launch(kernel, (num_seqs, head_programs, num_splits), args, constexprs,
                       cfg.options)]
    if split:
        launches.append(_merge_launch(*dest, out, var, num_splits))
    return out, launches


def _decode_outputs(out: torch.Tensor, num_splits: int) -> tuple[tuple, tuple]:
    """Where a decode kernel writes, and the strides it takes: `out` itself without split-K,
    else float32 partial outputs `[S, H, splits, D]` with their running max and sum
    `[S, H, splits]` (splits padded to SPLIT_PAD) for `_merge_launch`."""
    if num_splits == 1:
        return (out, out, out), (out.stride(0), out.stride(1), 0, 0, 0)
    num_seqs, num_heads, head_dim = out.shape
    padded = triton.cdiv(num_splits, SPLIT_PAD) * SPLIT_PAD
    partial = torch.empty((num_seqs, num_heads, padded, head_dim), dtype=torch.float32,
                          device=out.device)
    m = torch.empty((num_seqs, num_heads, padded), dtype=torch.float32, device=out.device)
    sums = torch.empty_like(m)
    return (partial, m, sums), (*partial.stride()[:3], m.stride(0), m.stride(1))


def _check_latent_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, head_dim: int) -> int:
    """Latent attention's cache: ``v_cache`` is ``k_cache[..., :lora_dim]`` (the value is the
    latent part of the key row); returns ``lora_dim``."""
    if k_cache.dim() != 3 or k_cache.shape[-1] != head_dim or k_cache.shape[1] != 1:
        raise ValueError(f"latent attention needs k_cache [num_slots, 1, {head_dim}], got "
                         f"{tuple(k_cache.shape)}")
    lora_dim = v_cache.shape[-1]
    same_rows = (v_cache.data_ptr() == k_cache.data_ptr() and v_cache.stride() == k_cache.stride()
                 and v_cache.shape[:2] == k_cache.shape[:2] and v_cache.dtype == k_cache.dtype)
    if not same_rows or not 0 < lora_dim < head_dim or k_cache.stride(-1) != 1:
        raise ValueError("latent attention needs v_cache = k_cache[..., :kv_lora_rank] (a view "
                         f"of the key cache), got v_cache {tuple(v_cache.shape)}")
    return lora_dim


def _split_count(num_splits, num_seqs, num_kv_heads, seq_lens, max_seq_len, sliding_window,
                 target: Target) -> int:
    """The split-K factor of a decode: given, or chosen from the longest span read (a window
    caps it)."""
    if num_splits is None:
        if max_seq_len is None:
            max_seq_len = int(seq_lens.max())
        if sliding_window is not None:
            max_seq_len = min(max_seq_len, sliding_window)
        num_splits = choose_num_splits(num_seqs, num_kv_heads, max_seq_len, target)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return min(num_splits, BLOCK_SPLITS)


def _merge_launch(partial, m, sums, out, var: _VariantArgs, num_splits: int) -> Launch:
    """The launch that merges split-K partials `[S, Hq, splits, Dv]` into `out`."""
    merge_args = (
        partial, m, sums, out, var.sinks, num_splits,
        partial.stride(0), partial.stride(1), partial.stride(2),
        m.stride(0), m.stride(1),
        out.stride(0), out.stride(1),
    )
    head_dim = out.shape[-1]
    block_d = max(16, _next_pow2(head_dim))
    merge = dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_SPLITS=BLOCK_SPLITS,
                 SINKS=var.constexprs["SINKS"])
    # A [BLOCK_SPLITS, 512] float32 tile (latent attention) needs twice the threads of 256.
    options = {"num_warps": 8} if block_d > 256 else {}
    return Launch(_merge_splits_kernel, (out.shape[0], out.shape[1]), merge_args, merge,
                  options)


def _ring_table(start_slots: torch.Tensor, ring_lens: torch.Tensor,
                paged: bool) -> torch.Tensor:
    """`[S, 2]` (start slot, ring length) rows: what a ring launch (``RING``) reads per
    sequence; position p of sequence i lives at ``start + p % ring``."""
    if paged:
        raise ValueError("ring_lens addresses a contiguous cache; a paged one has none")
    if ring_lens.shape != start_slots.shape or start_slots.dim() != 1:
        raise ValueError(f"ring_lens {tuple(ring_lens.shape)} must match start_slots "
                         f"{tuple(start_slots.shape)}, one per sequence")
    return torch.stack((start_slots, ring_lens.to(start_slots.dtype)), dim=1)


def _run(q: torch.Tensor, result: tuple[torch.Tensor, list[Launch]]) -> torch.Tensor:
    """Runs the launches of `result` (an output and its launches); returns the output."""
    out, launches = result
    if launches:
        _check_device(q)
    for launch in launches:
        launch.run()
    return out


def prefill_launches(q, k_cache, v_cache, table, paged, query_start_loc, seq_lens, block_size,
                     softmax_scale, k_scale=None, v_scale=None, max_query_len=None, block_m=None,
                     block_n=None, target: Target | None = None, sliding_window=None,
                     softcap=None, sinks=None, ring_lens=None) -> tuple[torch.Tensor, list[Launch]]:
    """The output tensor and the launches of one prefill call (see `paged_attention`);
    `ring_lens` as for `decode_launches`."""
    if ring_lens is not None:
        table = _ring_table(table, ring_lens, paged)
    if v_cache.shape[-1] != k_cache.shape[-1]:
        raise NotImplementedError(
            "the Triton prefill kernel does not implement latent attention (v_cache narrower "
            "than k_cache); prefill through kvbench.kernels.cpu_attention")
    num_tokens, num_q_heads, head_dim = q.shape
    _check_cache(k_cache, v_cache, head_dim)
    _check_block("block_n", block_n)
    _check_block("block_m", block_m)
    num_kv_heads = _num_kv_heads(k_cache, num_q_heads)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return out, []
    target, q, table, seq_lens, dot_fp32, cfg = _kernel_inputs("prefill", q, k_cache, table,
                                                               seq_lens, target)
    query_start_loc = query_start_loc.contiguous()
    group = num_q_heads // num_kv_heads
    ks, vs, fp8, per_head = _attention_scales(k_cache, k_scale, v_scale, num_kv_heads, q.device)
    var = _variant_args(sliding_window, softcap, sinks, num_q_heads, q.device)
    bn = block_n or cfg.block_n
    bm = block_m or cfg.block_m
    block_g = _next_pow2(group)
    block_q = max(1, bm // block_g, triton.cdiv(16, block_g))
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    if max_query_len <= 0:
        return out, []
    kc, vc = _cache_views(k_cache, v_cache)
    block_d = max(16, _next_pow2(head_dim))
    grid = (num_seqs, triton.cdiv(max_query_len, block_q), num_kv_heads)
    args = (
        q, kc, vc, ks, vs, table, query_start_loc, seq_lens, out, var.sinks,
        softmax_scale, var.window, var.softcap,
        q.stride(0), q.stride(1),
        kc.stride(0), kc.stride(1), vc.stride(0), vc.stride(1),
        table.stride(0) if paged or ring_lens is not None else 0,
        out.stride(0), out.stride(1),
    )
    constexprs = dict(
        GROUP=group, BLOCK_G=block_g, BLOCK_Q=block_q,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_DK=cfg.head_chunk(block_d),
        BLOCK_N=bn, BLOCK_SIZE=block_size if paged else 1,
        PAGED=paged, FP8=fp8, PER_HEAD_SCALE=per_head, DOT_FP32=dot_fp32,
        RING=ring_lens is not None, **var.constexprs,
    )
    return out, [Launch(_prefill_kernel, grid, args, constexprs, cfg.options)]


# ----------------------------------------------------------------------------------------------
# Public API (signatures of kvbench.kernels.reference; extras are keyword-only, at the end)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    max_query_len: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Varlen causal attention (prefill, chunked prefill, prefix hits) through block tables.

    `max_query_len` (longest `q_len` in the batch) avoids a device sync when given.
    """
    return _run(q, prefill_launches(
        q, k_cache, v_cache, block_tables, True, query_start_loc, seq_lens, block_size,
        softmax_scale, k_scale, v_scale, max_query_len, block_m, block_n,
        sliding_window=sliding_window, softcap=softcap, sinks=sinks))


def contiguous_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    start_slots: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    ring_lens: torch.Tensor | None = None,
    max_query_len: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Varlen causal attention reading each sequence from `[start_slot, start_slot + len)`;
    with `ring_lens` position p of sequence i from `start_slots[i] + p % ring_lens[i]`."""
    return _run(q, prefill_launches(
        q, k_cache, v_cache, start_slots, False, query_start_loc, seq_lens, 1, softmax_scale,
        k_scale, v_scale, max_query_len, block_m, block_n, sliding_window=sliding_window,
        softcap=softcap, sinks=sinks, ring_lens=ring_lens))


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Decode: `q` `[S, Hq, D]`, the newest token of each sequence, already written to the cache.

    `num_splits`: split-K (flash decoding) factor, at most `BLOCK_SPLITS` (larger values are
    capped); None picks it from the context length, or the window's length
    (`choose_num_splits`), 1 disables it. `max_seq_len` avoids a device sync when given.
    Latent attention: `q` `[S, H, kv_lora_rank + rope_dim]`, `v_cache` =
    `k_cache[..., :kv_lora_rank]`, output `[S, H, kv_lora_rank]` (`decode_launches`).
    """
    return _run(q, decode_launches(
        q, k_cache, v_cache, block_tables, True, seq_lens, block_size, softmax_scale, k_scale,
        v_scale, num_splits, max_seq_len, block_n, sliding_window=sliding_window,
        softcap=softcap, sinks=sinks))


def contiguous_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    start_slots: torch.Tensor,
    seq_lens: torch.Tensor,
    softmax_scale: float,
    k_scale: Scale = None,
    v_scale: Scale = None,
    *,
    sliding_window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    ring_lens: torch.Tensor | None = None,
    num_splits: int | None = None,
    max_seq_len: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Decode reading each sequence's K/V from `[start_slot, start_slot + seq_len)`; with
    `ring_lens` position p of sequence i from `start_slots[i] + p % ring_lens[i]`."""
    return _run(q, decode_launches(
        q, k_cache, v_cache, start_slots, False, seq_lens, 1, softmax_scale, k_scale, v_scale,
        num_splits, max_seq_len, block_n, sliding_window=sliding_window, softcap=softcap,
        sinks=sinks, ring_lens=ring_lens))


class TritonAttentionOps:
    """The `AttentionOps` of these kernels: CUDA, or the CPU under ``TRITON_INTERPRET=1``."""

    name = "triton"
    write_kv = staticmethod(write_kv)
    paged_attention = staticmethod(paged_attention)
    contiguous_attention = staticmethod(contiguous_attention)
    paged_decode_attention = staticmethod(paged_decode_attention)
    contiguous_decode_attention = staticmethod(contiguous_decode_attention)
    choose_num_splits = staticmethod(choose_num_splits)

    def precompile(self, shape: AttentionShape, device: torch.device) -> float:
        from .variants import precompile  # (variants builds on this module)

        return precompile(shape, device)
