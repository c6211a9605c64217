"""kvbench's simulated engine under `--batching vllm-v1`, stepped through a trace.

The engine is built as `kvbench simulate` builds it (`build_engine` with the simulated
executor), with the trace's pool, budget, seats and watermark; each step's schedule is read
from the batching policy's `schedule` (the policy seam), memory from the strategy's
`memory_split`, token events from the engine's sequences. Steps are taken one at a time
(`Engine.step`), never fast-forwarded: fast-forward's equality with stepping has its own
tests (tests/simulator/test_fast_forward.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.core.sequence import SequenceStatus
from tests.vllm_oracle.step_log import StepLog
from tests.vllm_oracle.traces import Trace

MAX_STEPS = 20_000


def engine_config(trace: Trace, strategy: str, kv_memory: int) -> EngineConfig:
    return EngineConfig(
        model=trace.model, strategy=strategy, batching="vllm-v1", block_size=trace.block_size,
        max_num_seqs=trace.max_num_seqs, max_num_batched_tokens=trace.max_num_batched_tokens,
        max_model_len=trace.max_model_len, watermark=trace.watermark, kv_memory=kv_memory,
        dtype="bfloat16", async_scheduling=trace.async_scheduling,
    )


def build(trace: Trace, strategy: str):
    """The engine with exactly `trace.num_blocks` pool blocks (of the block the strategy
    runs: a state-space hybrid's is raised past `trace.block_size`, as vLLM raises it)."""
    probe = build_engine(engine_config(trace, strategy, 1 << 30), SimulatedExecutors()).engine
    block = probe.strategy.block_size
    engine = build_engine(engine_config(trace, strategy,
                                        trace.num_blocks * probe.bytes_per_slot * block),
                          SimulatedExecutors()).engine
    if engine.strategy.capacity_slots != trace.num_blocks * block:
        raise AssertionError(f"{strategy}: pool of {engine.strategy.capacity_slots} slots, "
                             f"not {trace.num_blocks} blocks")
    return engine


def run(trace: Trace, strategy: str) -> list[StepLog]:
    engine = build(trace, strategy)
    policy, cache = engine.policy, engine.strategy
    captured = []
    schedule = policy.schedule

    def spy(now_s: float):
        out = schedule(now_s)
        captured.append((
            tuple((s.request.request_id, n, s.num_computed) for s, n in out.scheduled),
            tuple(s.request.request_id for s in out.preempted),
            {s.request.request_id for s in out.admitted},
        ))
        return out

    policy.schedule = spy
    pending = sorted(trace.requests, key=lambda r: (r.arrival_step, r.rid))
    seqs = {}
    had_token: set[int] = set()
    done: set[int] = set()
    logs: list[StepLog] = []
    for step in range(MAX_STEPS):
        while pending and pending[0].arrival_step == step:
            r = pending.pop(0)
            engine.add_request(Request(request_id=r.rid, arrival_s=float(step),
                                       prompt_token_ids=r.prompt, output_len=r.output_len))
            seqs[r.rid] = engine.sequences[r.rid][0]
        if len(done) == len(trace.requests):
            break
        if len(done) == len(seqs):  # nothing to run until the next arrival
            logs.append(StepLog(step, (), (), (), 0, (), ()))
            continue
        engine.step()
        scheduled, preempted, admitted = captured[-1]
        split = cache.memory_split(policy.holders(), engine.waiting.head())
        # Under async scheduling a token is seen a step after the step that sampled it
        # (`Engine.in_flight`), as vLLM processes it.
        unseen = {id(s) for s in engine.in_flight}
        first = tuple(sorted(rid for rid, s in seqs.items()
                            if rid not in had_token and len(s.token_ids) > s.prompt_len
                            and not (id(s) in unseen and len(s.token_ids) == s.prompt_len + 1)))
        had_token.update(first)
        finished = tuple(sorted(rid for rid, s in seqs.items()
                               if rid not in done and s.status is SequenceStatus.FINISHED))
        done.update(finished)
        logs.append(StepLog(
            step=step,
            scheduled=scheduled,
            admitted=tuple((rid, computed) for rid, _, computed in scheduled if rid in admitted),
            preempted=preempted,
            blocks_held=(cache.capacity_slots - split.free) // cache.block_size,
            first_token=first,
            finished=finished,
        ))
    return logs


@dataclass(frozen=True)
class Allocation:
    """What vLLM's `KVCacheConfig` is built from: kvbench's pool as the strategy lays it out."""

    windows: tuple[int | None, ...]  # each attention group's window (None: full attention)
    state_groups: int  # a state-space hybrid's state (Mamba) groups: a block each a request
    block_size: int  # the pool's block (a hybrid's raised past --block-size, as vLLM's)


def allocation(trace: Trace, strategy: str) -> Allocation:
    cache = build(trace, strategy).strategy
    return Allocation(tuple(getattr(cache, "windows", (None,))),
                      getattr(cache, "state_blocks", 0), cache.block_size)
