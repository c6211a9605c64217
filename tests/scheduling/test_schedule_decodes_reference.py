"""The batched decode scheduling (`BatchingPolicy._schedule_decodes`, one
`CacheStrategy.allocate_each` call per step) against a plain reference: one `allocate` per
sequence in admission order, preempting the most recently admitted unscheduled sequence
whenever the pool is dry (the loop it replaced, issue 15).

Both run the same random workloads with tight memory, step by step; every step must schedule,
preempt and account exactly the same.
"""

from __future__ import annotations

from collections import deque

from hypothesis import given

from kvbench.scheduling.base import ScheduleOutput
from kvbench.scheduling.continuous import ContinuousBatching
from kvbench.scheduling.static import StaticBatching
from tests.scheduling.helpers import drive, make_engine
from tests.scheduling.test_properties import SETTINGS, STRATEGY_NAMES, scenarios


def _reference_schedule_decodes(policy, seqs, out: ScheduleOutput) -> None:
    budget = policy.limits.max_num_batched_tokens - out.num_tokens
    pending = deque(seqs)
    while pending and budget > 0:
        seq = pending.popleft()
        n = len(seq.token_ids) - seq.num_computed
        if n > budget:
            break
        while not policy.cache.allocate(seq, n):
            victim = pending.pop() if pending else seq
            policy.preempt(victim, out)
            if victim is seq:
                break
        else:
            out.scheduled.append((seq, n))
            budget -= n


class ReferenceContinuous(ContinuousBatching):
    def _schedule_decodes(self, seqs, out):
        _reference_schedule_decodes(self, seqs, out)


class ReferenceStatic(StaticBatching):
    def _schedule_decodes(self, seqs, out):
        _reference_schedule_decodes(self, seqs, out)


def _trace(options, requests, reference: bool) -> list[tuple]:
    engine = make_engine(**options)
    if reference:
        cls = ReferenceStatic if options["batching"] == "static" else ReferenceContinuous
        engine.policy = cls(engine.strategy, engine.policy.limits, engine.policy.waiting.order)
    steps: list[tuple] = []
    schedule = engine.policy.schedule

    def recording_schedule(now_s):
        out = schedule(now_s)
        steps.append((
            [(seq.seq_id, n) for seq, n in out.scheduled],
            [seq.seq_id for seq in out.preempted],
        ))
        return out

    engine.policy.schedule = recording_schedule
    drive(engine, requests, check=None)
    books = [(r.num_batched_tokens, r.num_running, r.num_waiting, r.kv_token_bytes,
              r.kv_reserved_bytes, r.kv_free_bytes, r.preemptions) for r in engine.steps]
    return steps + books


@SETTINGS
@given(scenarios(strategies=tuple(s for s in STRATEGY_NAMES if s != "contiguous"),
                 policies=("continuous", "static"), tight=True))
def test_batched_decode_scheduling_equals_the_per_sequence_reference(scenario):
    options, requests = scenario
    assert _trace(options, requests, reference=False) == _trace(options, requests,
                                                                reference=True)
