"""The request traces both schedulers run: arrivals counted in steps, token ids explicit.

A trace is deterministic (its own seeded generator) and small enough that both schedulers
step through it in well under a second; each is shaped to reach one part of the scheduler:
chunked prefill, preemption, prefix hits and re-hits, eviction, sliding windows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class TraceRequest:
    rid: int
    arrival_step: int  # added to both schedulers before this step is scheduled
    prompt: tuple[int, ...]
    output_len: int


@dataclass(frozen=True)
class Trace:
    name: str
    requests: tuple[TraceRequest, ...]
    model: str = "tiny"  # a kvbench preset; its windows become vLLM's KV cache groups
    num_blocks: int = 1000  # usable KV blocks (vLLM's pool holds one more: its null block)
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    max_model_len: int = 2048
    async_scheduling: bool = False
    watermark: float = 0.0


def _ids(rng: random.Random, n: int) -> tuple[int, ...]:
    # Ids from 1: kvbench's simulated executor samples 0, so a prompt never matches the
    # blocks a generated run of zeros fills.
    return tuple(rng.randrange(1, 2048) for _ in range(n))


def _requests(specs: list[tuple[int, tuple[int, ...], int]]) -> tuple[TraceRequest, ...]:
    return tuple(TraceRequest(i, step, prompt, out) for i, (step, prompt, out) in enumerate(specs))


def uniform(seed: int = 1) -> tuple[TraceRequest, ...]:
    """24 prompts of 100 tokens, 20 output tokens, two arrivals a step."""
    rng = random.Random(seed)
    return _requests([(i // 2, _ids(rng, 100), 20) for i in range(24)])


def sharegpt_like(seed: int = 2, num: int = 40) -> tuple[TraceRequest, ...]:
    """Long-tailed prompt and output lengths (lognormal, as ShareGPT's), Poisson-ish arrivals."""
    rng = random.Random(seed)
    specs, step = [], 0
    for _ in range(num):
        prompt = min(1200, max(4, int(rng.lognormvariate(5.0, 0.9))))
        out = min(400, max(1, int(rng.lognormvariate(4.3, 0.9))))
        specs.append((step, _ids(rng, prompt), out))
        step += int(rng.expovariate(0.7))
    return _requests(specs)


def shared_prefix_chat(seed: int = 3, num: int = 30, system: int = 200) -> tuple[TraceRequest, ...]:
    """One system prompt (not a multiple of the block size), then each user's own turn."""
    rng = random.Random(seed)
    head = _ids(rng, system)
    return _requests([(i // 3, head + _ids(rng, rng.randrange(30, 120)), rng.randrange(10, 60))
                      for i in range(num)])


def prefix_repeat(seed: int = 4, distinct: int = 8, repeats: int = 3) -> tuple[TraceRequest, ...]:
    """The same prompts sent again later: whole-prompt hits (all but the last token)."""
    rng = random.Random(seed)
    prompts = [_ids(rng, rng.randrange(40, 300)) for _ in range(distinct)]
    specs = []
    for r in range(repeats):
        for i, prompt in enumerate(prompts):
            specs.append((r * 12 + i, prompt, rng.randrange(5, 40)))
    specs.sort(key=lambda s: s[0])
    return _requests(specs)


def tight(seed: int = 5, num: int = 30) -> tuple[TraceRequest, ...]:
    """More work than the pool holds: dozens of preemptions (and, with prefix caching,
    evictions of the cached blocks of finished and preempted requests)."""
    rng = random.Random(seed)
    return _requests([(i // 4, _ids(rng, rng.randrange(60, 200)), rng.randrange(50, 150))
                      for i in range(num)])


def tight_shared(seed: int = 6, num: int = 30) -> tuple[TraceRequest, ...]:
    """`tight` with a shared 100-token system prompt: re-hits after preemption, eviction."""
    rng = random.Random(seed)
    head = _ids(rng, 100)
    return _requests([(i // 4, head + _ids(rng, rng.randrange(20, 120)), rng.randrange(50, 150))
                      for i in range(num)])


def long_prompts(seed: int = 7, num: int = 8) -> tuple[TraceRequest, ...]:
    """Prompts many times the token budget: several chunks each, decodes between them."""
    rng = random.Random(seed)
    return _requests([(i * 3, _ids(rng, rng.randrange(900, 1900)), rng.randrange(20, 100))
                      for i in range(num)])


def windowed(seed: int = 8, num: int = 16) -> tuple[TraceRequest, ...]:
    """Prompts and outputs past tiny-hybrid's 128-token window."""
    rng = random.Random(seed)
    return _requests([(i * 2, _ids(rng, rng.randrange(150, 900)), rng.randrange(100, 300))
                      for i in range(num)])


def windowed_shared(seed: int = 9, num: int = 20) -> tuple[TraceRequest, ...]:
    """A 300-token system prompt (past the window) shared by every request, on tiny-hybrid."""
    rng = random.Random(seed)
    head = _ids(rng, 300)
    return _requests([(i // 2, head + _ids(rng, rng.randrange(20, 200)), rng.randrange(20, 150))
                      for i in range(num)])


def state_shared(seed: int = 10, num: int = 16, system: int = 1000) -> tuple[TraceRequest, ...]:
    """A system prompt of several of a state-space hybrid's raised blocks (272 tokens on
    tiny-granite-h), then each user's own turn: hits only where a state checkpoint is kept."""
    rng = random.Random(seed)
    head = _ids(rng, system)
    return _requests([(i // 2, head + _ids(rng, rng.randrange(50, 400)), rng.randrange(10, 80))
                      for i in range(num)])


def state_tight(seed: int = 11, num: int = 16) -> tuple[TraceRequest, ...]:
    """`state_shared` with longer outputs, for a pool a few requests fill: preemption."""
    rng = random.Random(seed)
    head = _ids(rng, 600)
    return _requests([(i // 3, head + _ids(rng, rng.randrange(50, 500)), rng.randrange(100, 300))
                      for i in range(num)])


# name -> (trace, strategies it is run under). Full-attention traces run `paged` and
# `prefix`; the sliding-window ones `hybrid` and `hybrid-prefix` (tiny-hybrid: five
# 128-token window layers to one full-attention layer, six allocation groups).
TRACES: dict[str, Trace] = {t.name: t for t in (
    Trace("uniform", uniform()),
    Trace("sharegpt", sharegpt_like(), num_blocks=400, max_num_batched_tokens=512),
    Trace("shared-prefix-chat", shared_prefix_chat(), num_blocks=300, max_num_batched_tokens=1024),
    Trace("prefix-repeat", prefix_repeat(), num_blocks=200, max_num_batched_tokens=1024),
    Trace("tight-preempt", tight(), num_blocks=60, max_num_batched_tokens=512),
    Trace("tight-shared-evict", tight_shared(), num_blocks=50, max_num_batched_tokens=512),
    Trace("long-prompts-chunked", long_prompts(), num_blocks=500, max_num_batched_tokens=256),
    Trace("watermark-1pct", tight(), num_blocks=120, max_num_batched_tokens=512, watermark=0.01),
    Trace("sliding-window", windowed(), model="tiny-hybrid", num_blocks=600,
          max_num_batched_tokens=256, max_model_len=8192),
    Trace("sliding-window-tight", windowed(), model="tiny-hybrid", num_blocks=200,
          max_num_batched_tokens=256, max_model_len=8192),
    Trace("hybrid-shared-prefix", windowed_shared(), model="tiny-hybrid", num_blocks=700,
          max_num_batched_tokens=512, max_model_len=8192),
    Trace("state-shared-prefix", state_shared(), model="tiny-granite-h", num_blocks=200,
          max_num_batched_tokens=1024),
    Trace("state-tight", state_tight(), model="tiny-granite-h", num_blocks=30,
          max_num_batched_tokens=1024),
    Trace("state-chunked", long_prompts(), model="tiny-granite-h", num_blocks=200,
          max_num_batched_tokens=256),
    Trace("async-state-shared-prefix", state_shared(), model="tiny-granite-h", num_blocks=200,
          max_num_batched_tokens=1024, async_scheduling=True),
    Trace("async-state-tight", state_tight(), model="tiny-granite-h", num_blocks=30,
          max_num_batched_tokens=1024, async_scheduling=True),
    Trace("async-uniform", uniform(), async_scheduling=True),
    Trace("async-tight", tight(), num_blocks=60, max_num_batched_tokens=512,
          async_scheduling=True),
)}

FULL_ATTENTION_STRATEGIES = ("paged", "prefix")
WINDOW_STRATEGIES = ("hybrid", "hybrid-prefix")
# A state-space hybrid under `prefix`: `--mamba-cache-mode align`, vLLM's default for it
# with prefix caching (one full-attention and three Mamba-2 groups, 272-token blocks).
STATE_STRATEGIES = ("prefix",)


def strategies_of(trace: Trace) -> tuple[str, ...]:
    if trace.model == "tiny-granite-h":
        return STATE_STRATEGIES
    return WINDOW_STRATEGIES if trace.model == "tiny-hybrid" else FULL_ATTENTION_STRATEGIES
