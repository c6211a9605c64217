"""Every kernel variant a run meets, and their compilation before anything is measured.

A model's attention shape (`AttentionShape`) fixes the constexprs of every launch; the only
choices left during a run are the layout (paged or contiguous), decode with or without
split-K, prefill, and (a hybrid model) a layer with or without its sliding window, a window
layer under `contiguous` reading a ring (``RING``). Per-step arguments (block-table width,
split count) are not specialized (``do_not_specialize``), the split-K scratch strides specialize alike for every split count
(``SPLIT_PAD``) and every packed step input starts 16-byte aligned
(``kvbench.execution.step_inputs``), so the launches of `shape_launches` are all the variants
there are (``tests/kernels/test_bit_arithmetic.py`` checks it with Triton's binder).
`precompile` compiles them on the device (``JITFunction.warmup``: nothing runs) and returns the
seconds it took, so a runner reports compile time apart from TTFT/TPOT.
"""

from __future__ import annotations

import time

import torch

from .attention_shape import AttentionShape
from .triton_ops import (
    SPLIT_MAX,
    Launch,
    Target,
    decode_launches,
    device_target,
    prefill_launches,
    write_kv_launches,
)


def _scales(shape: AttentionShape, device: torch.device):
    if shape.scale_kind == "scalar":
        return 0.05, 0.05
    if shape.scale_kind == "per_head":
        heads = torch.full((shape.num_kv_heads,), 0.05, device=device)
        return heads, heads
    return None, None


def shape_launches(shape: AttentionShape, device: torch.device,
                   target: Target | None = None) -> list[tuple[str, Launch]]:
    """``(name, launch)`` of every variant `shape` meets, made on small stand-in tensors with
    the strides and dtypes of the real ones (so they specialize alike): for each layout, decode
    with and without split-K and prefill, once per kind of layer (full attention, sliding
    window). Latent attention has no Triton prefill (it runs through the reference)."""
    device = torch.device(device)
    target = target or device_target(device)
    hq, hkv, d, bs = shape.num_q_heads, shape.num_kv_heads, shape.head_dim, shape.block_size
    num_seqs, blocks_per_seq = 2, 4
    num_slots = num_seqs * blocks_per_seq * bs + bs
    k_cache = torch.zeros(num_slots, hkv, d, device=device).to(shape.cache_dtype)
    latent = shape.kv_lora_rank is not None
    v_cache = k_cache[..., :shape.kv_lora_rank] if latent else torch.zeros_like(k_cache)
    ks, vs = _scales(shape, device)
    tables = torch.arange(num_seqs * blocks_per_seq, dtype=torch.int32,
                          device=device).reshape(num_seqs, blocks_per_seq)
    # The dtypes of kvbench.execution.model_executor's index tensors (they select the variant).
    starts = torch.arange(num_seqs, dtype=torch.int32, device=device) * blocks_per_seq * bs
    seq_lens = torch.full((num_seqs,), blocks_per_seq * bs, dtype=torch.int32, device=device)
    q_dec = torch.zeros(num_seqs, hq, d, dtype=shape.dtype, device=device)
    q_len = 3
    q_pre = torch.zeros(num_seqs * q_len, hq, d, dtype=shape.dtype, device=device)
    qsl = torch.arange(num_seqs + 1, dtype=torch.int32, device=device) * q_len
    scale = d**-0.5
    # Stand-in values: a window length and a cap are runtime arguments (not specialized).
    scores = dict(softcap=30.0 if shape.softcap else None,
                  sinks=torch.zeros(hq, device=device) if shape.sinks else None)
    kv = torch.zeros(num_seqs, hkv, d, dtype=shape.dtype, device=device)
    slots = torch.arange(num_seqs, device=device)
    out = [("write_kv", launch) for launch in
           write_kv_launches(kv, kv[..., :v_cache.shape[-1]], k_cache, v_cache, slots, ks, vs,
                             target=target)]
    # A window group's ring under `contiguous` (`ring_lens`): its own variant (``RING``).
    rings = torch.full((num_seqs,), blocks_per_seq * bs, dtype=torch.int32, device=device)
    for windowed in shape.window_kinds:
        variant = dict(scores, sliding_window=2 * bs if windowed else None)
        suffix = "-window" if windowed else ""
        kinds = [("paged", None), ("contiguous", None)]
        if windowed and not latent:
            kinds.append(("contiguous-ring", rings))
        for layout, ring_lens in kinds:
            paged = layout == "paged"
            table = tables if paged else starts
            ring = {} if ring_lens is None else {"ring_lens": ring_lens}
            for split in (False, True):
                _, launches = decode_launches(q_dec, k_cache, v_cache, table, paged, seq_lens,
                                              bs if paged else 1, scale, ks, vs,
                                              num_splits=SPLIT_MAX if split else 1,
                                              target=target, **variant, **ring)
                name = f"decode-{layout}-{'split' if split else 'nosplit'}{suffix}"
                out += [(f"{name}-{launch.kernel.fn.__name__}", launch) for launch in launches]
            if not latent:
                _, launches = prefill_launches(q_pre, k_cache, v_cache, table, paged, qsl,
                                               seq_lens, bs if paged else 1, scale, ks, vs,
                                               max_query_len=q_len, target=target, **variant,
                                               **ring)
                out += [(f"prefill-{layout}{suffix}", launch) for launch in launches]
    return out


def precompile(shape: AttentionShape, device: torch.device | str = "cuda") -> float:
    """Compile (without running) every kernel variant `shape` meets on `device`; returns the
    seconds spent, near zero when Triton's cache already holds them. Call it before measuring.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return 0.0  # the interpreter compiles nothing
    start = time.perf_counter()
    for _, launch in shape_launches(shape, device):
        launch.warmup()
    torch.cuda.synchronize(device)
    return time.perf_counter() - start
