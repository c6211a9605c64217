"""`StepRecorder`: each engine step's `StepRecord`, its trace counters, and where the rows go."""

from __future__ import annotations

from collections.abc import Callable

from kvbench.core.step_batch import StepBatch
from kvbench.core.step_record import StepRecord
from kvbench.engine.group_memory import GroupMemory
from kvbench.strategies.base import MemorySplit
from kvbench.tracing import trace_counter


class StepLog:
    """Where an engine's step rows go: into `steps`, or to `sink` when a runner streams them
    to disk (then `steps` stays empty, so a long run's memory does not grow with its steps).
    Every engine keeps one; `num_steps` and `last` count and hold what it was given."""

    def __init__(self, steps: list[StepRecord]) -> None:
        self.steps = steps
        self.sink: Callable[[StepRecord], None] | None = None
        self.num_steps = 0
        self.last: StepRecord | None = None

    def keep(self, record: StepRecord) -> None:
        self.num_steps += 1
        self.last = record
        if self.sink is None:
            self.steps.append(record)
        else:
            self.sink(record)

    def reset(self) -> None:
        """Start counting steps again (after warm-up; the engine clears `steps`)."""
        self.num_steps = 0
        self.last = None


class StepRecorder(StepLog):
    """kvbench's engine's `StepLog`: turns a step's batch, timings and memory split into its
    `StepRecord`. `memory_probe` adds the device's memory figures (CUDA) to every row;
    `group_memory` sums each KV group's part of the split."""

    def __init__(
        self,
        steps: list[StepRecord],
        *,
        bytes_per_slot: int,
        memory_probe: Callable[[], dict] | None = None,
        group_memory: GroupMemory | None = None,
    ) -> None:
        super().__init__(steps)
        self.bytes_per_slot = bytes_per_slot
        self.group_memory = group_memory
        self.memory_probe = memory_probe
        self._unrecorded_preemptions = 0

    def reset(self) -> None:
        super().reset()
        if self.group_memory is not None:
            self.group_memory.reset()

    def skip(self, num_preempted: int) -> None:
        """A step that scheduled nothing makes no row: its preemptions go in the next one."""
        self._unrecorded_preemptions += num_preempted

    def record(
        self, t_start: float, t_end: float, forward_s: float, batch: StepBatch,
        split: MemorySplit, num_preempted: int, num_running: int, num_waiting: int,
        traced: bool,
    ) -> StepRecord:
        """The row of a step that ran `batch` from `t_start` to `t_end`, `forward_s` of it
        in the model forward, and left memory as `split` and the queues with `num_running`
        and `num_waiting` sequences; `traced`: emit the trace counters too."""
        b = self.bytes_per_slot
        num_decode_seqs = batch.num_decode_seqs
        unrecorded, self._unrecorded_preemptions = self._unrecorded_preemptions, 0
        record = StepRecord(
            step=self.num_steps,
            t_s=t_start,
            step_ms=(t_end - t_start) * 1e3,
            overhead_ms=((t_end - t_start) - forward_s) * 1e3,
            num_prefill_seqs=batch.num_prefill_seqs,
            num_decode_seqs=num_decode_seqs,
            num_batched_tokens=batch.num_tokens,
            num_prefill_tokens=batch.num_tokens - num_decode_seqs,  # a decode is one token
            num_running=num_running,
            num_waiting=num_waiting,
            kv_token_bytes=split.token * b,
            kv_reserved_bytes=split.reserved * b,
            kv_internal_bytes=split.internal * b,
            kv_external_bytes=split.external * b,
            kv_free_bytes=split.free * b,
            kv_cached_bytes=split.cached * b,
            preemptions=num_preempted + unrecorded,
            kv_utilization=split.utilization,
            kv_prompt_blocks=split.prompt_blocks,
            **(self.memory_probe() if self.memory_probe else {}),
        )
        self.keep(record)
        if self.group_memory is not None:
            self.group_memory.add(t_end - t_start, split)
        if traced:
            trace_counter("kv_bytes", t_end, {"token": record.kv_token_bytes,
                                              "held": split.held * b})
            trace_counter("batch", t_end, {"running": record.num_running,
                                           "waiting": record.num_waiting})
        return record
