"""kvbench's forward against the plain transformers forward of the same checkpoint (CPU).

One random `LlamaForCausalLM` is saved with `save_pretrained`; kvbench loads the folder as
its model and transformers loads it back. Each case times, interleaved in one process (blocks
of steps of each side in turn, each timed in its steady state: `interleaved`) and on one torch
thread, a whole step of the real engine (schedule, layout, forward, sample, commit)
and transformers' forward of the same batch with a `DynamicCache` holding the same context
(cropped back after every step, so both sides stay at the same context). `extra_info`
records both medians and `ratio_vs_plain_forward` (kvbench / plain) in CPU time of the
calling thread (torch on one thread runs its kernels there, so other processes' load on a
shared machine leaves it mostly alone), and the wall-clock medians and ratio beside it
(`ratio_wall`): the plain forward is the floor a user would accept, so the target is at most
1.0 (1.1 for fp8). The ratio is recorded, not asserted: a shared runner's timings are too
noisy to gate on.

By default one small decode case per strategy runs (CI). The full matrix, on a 4-layer
Llama (hidden 256, GQA 8/2, vocab 4096): batch 1, 8, 32, 64 x context 128, 512, 1,024, and
a one-sequence prefill of 512 and 2,048 tokens, for every strategy:

    KVBENCH_BENCH_FULL=1 python -m pytest -p no:cacheprovider \\
        tests/benchmarks/test_decode_vs_plain_forward.py --benchmark-only
"""

from __future__ import annotations

import inspect
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.engine.engine import Engine

transformers = pytest.importorskip("transformers")

FULL = os.environ.get("KVBENCH_BENCH_FULL") == "1"
STRATEGIES = ("contiguous", "paged", "prefix", "fp8")


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    hidden: int
    intermediate: int
    num_heads: int
    num_kv_heads: int
    vocab: int


# The model for the full matrix; a smaller one keeps the CI case to about a second.
FULL_MODEL = ModelShape(4, 256, 688, 8, 2, 4096)
CI_MODEL = ModelShape(2, 64, 160, 8, 2, 512)
MODEL = FULL_MODEL if FULL else CI_MODEL

DECODE_SHAPES = (
    tuple((b, c) for b in (1, 8, 32, 64) for c in (128, 512, 1024)) if FULL else ((4, 64),)
)
PREFILL_LENS = (512, 2048) if FULL else ()
STEPS = 20 if FULL else 8  # timed steps per side, interleaved
BLOCK = 4  # timed steps a side runs back to back, after one untimed switch step
SWITCHES = -(-STEPS // BLOCK)  # switch steps per side
WARMUP_STEPS = 3
RUN_STEPS = WARMUP_STEPS + 1 + STEPS + SWITCHES  # steps each side runs in a case
MAX_POSITIONS = 4096
# transformers 5 renamed the forward's cache argument
CACHE_ARG = ("cache" if "cache" in inspect.signature(transformers.LlamaForCausalLM.forward).parameters
             else "past_key_values")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, transformers model) of one random Llama saved with `save_pretrained`."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=MODEL.vocab, hidden_size=MODEL.hidden, intermediate_size=MODEL.intermediate,
        num_hidden_layers=MODEL.num_layers, num_attention_heads=MODEL.num_heads,
        num_key_value_heads=MODEL.num_kv_heads, max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5, tie_word_embeddings=False,
    )
    folder = tmp_path_factory.mktemp("plain-forward-llama")
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    plain = transformers.LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    return folder, plain.eval()


@pytest.fixture(scope="module")
def model_cache():
    return {}


def kv_engine(folder, strategy: str, batch: int, max_model_len: int, model_cache) -> Engine:
    """A real engine over the checkpoint whose arena holds `batch` sequences of
    `max_model_len` tokens (fp8 gets the same budget in bytes, so more slots)."""
    kv_bytes_per_token = 2 * MODEL.num_layers * MODEL.hidden // MODEL.num_heads \
        * MODEL.num_kv_heads * 4
    config = EngineConfig(
        model=str(folder), strategy=strategy, dtype="float32",
        kv_memory=batch * (max_model_len + 32) * kv_bytes_per_token,
        max_model_len=max_model_len, max_num_seqs=batch,
        # every prompt in one prefill step: all sequences then decode at the same context
        max_num_batched_tokens=max(2048, batch * max_model_len),
    )
    return build_engine(config, model_cache=model_cache).engine


def record_logits_shape(engine: Engine) -> list[tuple[int, ...]]:
    """The shape of the logits of each step the engine's executor computes from now on."""
    shapes: list[tuple[int, ...]] = []
    execute = engine.executor.execute

    def recording(batch):
        logits = execute(batch)
        shapes.append(tuple(logits.shape))
        return logits

    engine.executor.execute = recording  # execute_and_sample calls self.execute
    return shapes


def distinct_prompt(index: int, length: int) -> tuple[int, ...]:
    """A prompt no other index shares a prefix with (the prefix strategy finds nothing)."""
    return tuple((index * 7919 + j * 31 + 1) % MODEL.vocab for j in range(length))


def filled_cache(batch: int, context: int):
    """A `DynamicCache` holding `context` tokens of random KV for each of `batch` rows."""
    cache = transformers.DynamicCache()
    head_dim = MODEL.hidden // MODEL.num_heads
    for layer in range(MODEL.num_layers):
        k = torch.randn(batch, MODEL.num_kv_heads, context, head_dim)
        cache.update(k, torch.randn_like(k), layer)
    return cache


@dataclass
class Timings:
    """Seconds of each timed call, CPU time of this thread and wall clock; and of each
    switch step, the first after the other side ran (`after_switch_cpu_s`)."""

    cpu_s: list[float]
    wall_s: list[float]
    after_switch_cpu_s: list[float]


def _timed(step: Callable[[], object]) -> tuple[float, float]:
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    step()
    return time.thread_time() - cpu0, time.perf_counter() - wall0


def interleaved(kv_step: Callable[[], object], plain_step: Callable[[], object],
                steps: int) -> tuple[Timings, Timings]:
    """`steps` timed calls of each, in alternating blocks (one switch step, then `BLOCK`
    timed ones) so that load drifts hit both. Each side is timed in its steady state, as an
    engine runs its steps back to back: right after the other side ran, a step first reloads
    its own weights and cache into the CPU's caches (both models' weights together overflow
    the last-level cache), which the switch step pays and the timed steps do not."""
    kv, plain = Timings([], [], []), Timings([], [], [])
    while len(kv.cpu_s) < steps:
        for step, into in ((kv_step, kv), (plain_step, plain)):
            into.after_switch_cpu_s.append(_timed(step)[0])
            for _ in range(min(BLOCK, steps - len(into.cpu_s))):
                cpu_s, wall_s = _timed(step)
                into.cpu_s.append(cpu_s)
                into.wall_s.append(wall_s)
    return kv, plain


def record(benchmark, strategy: str, phase: str, batch: int, context: int,
           kv: Timings, plain: Timings) -> float:
    def ms(seconds: list[float]) -> float:
        return statistics.median(seconds) * 1e3

    ratio = ms(kv.cpu_s) / ms(plain.cpu_s)
    benchmark.extra_info.update({
        "strategy": strategy, "phase": phase, "batch": batch, "context": context,
        "num_layers": MODEL.num_layers, "hidden": MODEL.hidden, "vocab": MODEL.vocab,
        "kvbench_ms_median": ms(kv.cpu_s), "plain_forward_ms_median": ms(plain.cpu_s),
        "ratio_vs_plain_forward": ratio,
        "kvbench_wall_ms_median": ms(kv.wall_s), "plain_forward_wall_ms_median": ms(plain.wall_s),
        "ratio_wall": ms(kv.wall_s) / ms(plain.wall_s),
        # each side's first step after the other ran (caches holding the other's weights)
        "ratio_after_switch": ms(kv.after_switch_cpu_s) / ms(plain.after_switch_cpu_s),
    })
    return ratio


@pytest.mark.parametrize(("batch", "context"), DECODE_SHAPES,
                         ids=[f"b{b}xc{c}" for b, c in DECODE_SHAPES])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_decode_step_vs_plain_forward(benchmark, checkpoint, model_cache, strategy, batch,
                                      context):
    folder, plain = checkpoint
    engine = kv_engine(folder, strategy, batch, context + RUN_STEPS + 8, model_cache)
    for i in range(batch):  # prompts of context - 1: the first decode step reads `context`
        engine.add_request(Request(i, 0.0, distinct_prompt(i, context - 1),
                                   RUN_STEPS + 4))
    while engine.waiting or engine.steps[-1].num_prefill_seqs:
        engine.step()
    kv_shapes = record_logits_shape(engine)

    cache = filled_cache(batch, context)
    input_ids = torch.randint(MODEL.vocab, (batch, 1))
    plain_shapes: list[tuple[int, ...]] = []

    def plain_step() -> None:
        with torch.inference_mode():
            logits = plain(input_ids, use_cache=True, logits_to_keep=1, **{CACHE_ARG: cache}).logits
        plain_shapes.append(tuple(logits[:, -1].shape))
        cache.crop(-1)  # the next step reads the same context again

    interleaved(engine.step, plain_step, WARMUP_STEPS)
    first = len(engine.steps)
    times: list[tuple[Timings, Timings]] = []
    benchmark.pedantic(lambda: times.append(interleaved(engine.step, plain_step, STEPS)),
                       rounds=1, iterations=1)
    kv, plain_times = times[0]

    timed = engine.steps[first:]
    assert all(r.num_decode_seqs == batch and not r.num_prefill_seqs for r in timed)
    assert set(kv_shapes) == set(plain_shapes) == {(batch, MODEL.vocab)}
    ratio = record(benchmark, strategy, "decode", batch, context, kv, plain_times)
    assert math.isfinite(ratio) and ratio > 0


@pytest.mark.skipif(not PREFILL_LENS, reason="prefill cases run with KVBENCH_BENCH_FULL=1")
@pytest.mark.parametrize("prompt_len", PREFILL_LENS or (0,))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_prefill_vs_plain_forward(benchmark, checkpoint, model_cache, strategy, prompt_len):
    folder, plain = checkpoint
    engine = kv_engine(folder, strategy, 1, prompt_len + 8, model_cache)
    kv_shapes = record_logits_shape(engine)
    input_ids = torch.randint(MODEL.vocab, (1, prompt_len))
    plain_shapes: list[tuple[int, ...]] = []
    requests = iter(range(10**6))

    def kv_step() -> None:  # one request prefilled; one output token, so it frees at once
        i = next(requests)
        engine.add_request(Request(i, 0.0, distinct_prompt(i, prompt_len), 1))
        engine.step()

    def plain_step() -> None:
        with torch.inference_mode():
            logits = plain(input_ids, use_cache=True, logits_to_keep=1,
                           **{CACHE_ARG: transformers.DynamicCache()}).logits
        plain_shapes.append(tuple(logits[:, -1].shape))

    interleaved(kv_step, plain_step, WARMUP_STEPS)
    first = len(engine.steps)
    times: list[tuple[Timings, Timings]] = []
    benchmark.pedantic(lambda: times.append(interleaved(kv_step, plain_step, STEPS)),
                       rounds=1, iterations=1)
    kv, plain_times = times[0]

    timed = engine.steps[first:]
    assert all(r.num_prefill_seqs == 1 and not r.num_decode_seqs for r in timed)
    assert set(kv_shapes) == set(plain_shapes) == {(1, MODEL.vocab)}
    ratio = record(benchmark, strategy, "prefill", 1, prompt_len, kv, plain_times)
    assert math.isfinite(ratio) and ratio > 0
