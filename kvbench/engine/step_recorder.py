"""`StepRecorder`: each engine step's `StepRecord`, its trace counters, and where the rows go."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvbench.core.decode_run_rows import BooksAfterStep, DecodeRunRows
from kvbench.core.host_transfers import HostTransfers
from kvbench.core.step_batch import StepBatch
from kvbench.core.step_record import StepRecord
from kvbench.engine.group_memory import GroupMemory
from kvbench.strategies.base import MemorySplit
from kvbench.tracing import trace_counter

_NO_PROBE: dict[str, int] = {}  # the device memory columns of a row without a probe: empty


class StepLog:
    """Where an engine's step rows go: into `steps`, or to a `StepWriter` when a runner
    streams them to disk (`stream_to`; then `steps` stays empty, so a long run's memory does
    not grow with its steps). Every engine keeps one; `num_steps` and `last` count and hold
    what it was given."""

    def __init__(self, steps: list[StepRecord]) -> None:
        self.steps = steps
        self._writer: Any = None
        self.num_steps = 0
        # The latest step: a `StepRecord`, or, where none was built for it, its row (a
        # `StepRecord` field tuple) or the run of decode steps it ends (`DecodeRunRows`).
        self._last: StepRecord | tuple | DecodeRunRows | None = None

    @property
    def last(self) -> StepRecord | None:
        """The latest step's record."""
        last = self._last
        if isinstance(last, DecodeRunRows):  # (a named tuple: checked first)
            last = self._last = StepRecord(*last.last_row())
        elif isinstance(last, tuple):
            last = self._last = StepRecord(*last)
        return last

    def keep(self, record: StepRecord) -> None:
        self.num_steps += 1
        self._last = record
        if self._writer is None:
            self.steps.append(record)
        else:
            self._writer.write(record)

    def keep_row(self, row: tuple) -> None:
        """One step's row as a `StepRecord` field tuple (streamed without a record)."""
        if self._writer is None:
            self.keep(StepRecord(*row))
            return
        self.num_steps += 1
        self._last = row
        self._writer.write_rows([row])

    def keep_run(self, run: DecodeRunRows) -> None:
        """The rows of a run of decode steps, given by what they follow from (streamed as
        that description, expanded by the writer)."""
        if self._writer is None:
            for row in run.rows():
                self.keep(StepRecord(*row))
            return
        self.num_steps += len(run.ends_s)
        self._last = run
        self._writer.write_run(run)

    def stream_to(self, writer: Any) -> None:
        """Stream every row to `writer` (a `StepWriter`: `write`, `write_rows`, `write_run`)
        instead of keeping it; None: stop, and keep what comes after in `steps`."""
        self._writer = writer

    def reset(self) -> None:
        """Start counting steps again (after warm-up; the engine clears `steps`)."""
        self.num_steps = 0
        self._last = None


class StepRecorder(StepLog):
    """kvbench's engine's `StepLog`: a step's batch, timings and memory split as its row.
    `memory_probe` adds the device's memory figures (CUDA); `group_memory` sums each KV
    group's part of the split."""

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
        self._unrecorded_copies = [0, 0]  # host blocks stored, loaded in steps with no row

    def stream_to(self, writer: Any) -> None:
        """`StepLog.stream_to`; the group sums take the runs' rows the writer expands
        (`run_arrays_sink`), so a run is expanded once for both."""
        super().stream_to(writer)
        if writer is not None and self.group_memory is not None:
            writer.run_arrays_sink = self.group_memory.add_run_arrays

    def reset(self) -> None:
        super().reset()
        if self.group_memory is not None:
            self.group_memory.reset()

    def skip(self, num_preempted: int) -> None:
        """A step that scheduled nothing makes no row: its preemptions go in the next one."""
        self._unrecorded_preemptions += num_preempted

    def host_copies(self, transfers: HostTransfers | None) -> None:
        """A host tier's copies started in a step that made no row: counted in the next."""
        if transfers is not None:
            self._unrecorded_copies[0] += len(transfers.stores)
            self._unrecorded_copies[1] += len(transfers.loads)

    def record(
        self, t_start: float, t_end: float, forward_s: float, batch: StepBatch,
        split: MemorySplit, num_preempted: int, num_running: int, num_waiting: int,
        traced: bool, host_load_waiting: int | None = None, num_unlisted_decodes: int = 0,
    ) -> None:
        """The row of a step that ran `batch` from `t_start` to `t_end` (`forward_s` of it in
        the model forward) and left memory as `split`; `traced`: the trace counters too.
        `host_load_waiting`: with a host tier, the sequences waiting for a load (the copies
        come from the batch's layout). `num_unlisted_decodes`: decodes the step ran that the
        batch does not list (a fast-forwarded mixed step's cohort)."""
        num_decode_seqs = batch.num_decode_seqs + num_unlisted_decodes
        num_tokens = batch.num_tokens + num_unlisted_decodes
        b = self.bytes_per_slot
        unrecorded, self._unrecorded_preemptions = self._unrecorded_preemptions, 0
        probe = self.memory_probe() if self.memory_probe else _NO_PROBE
        stores = loads = None
        if host_load_waiting is not None:
            transfers = batch.layout.host_transfers
            stores, loads = self._unrecorded_copies
            self._unrecorded_copies = [0, 0]
            if transfers is not None:
                stores += len(transfers.stores)
                loads += len(transfers.loads)
        # `StepRecord`'s fields in order, the row a streaming runner takes as it is.
        self.keep_row((
            self.num_steps,  # step
            t_start,  # t_s
            (t_end - t_start) * 1e3,  # step_ms
            ((t_end - t_start) - forward_s) * 1e3,  # overhead_ms
            batch.num_prefill_seqs,
            num_decode_seqs,
            num_tokens,  # num_batched_tokens
            num_tokens - num_decode_seqs,  # num_prefill_tokens: a decode is one token
            num_running,
            num_waiting,
            split.token * b,  # kv_token_bytes
            split.reserved * b,
            split.internal * b,
            split.external * b,
            split.free * b,
            split.cached * b,
            num_preempted + unrecorded,  # preemptions
            split.utilization,  # kv_utilization
            split.prompt_blocks,  # kv_prompt_blocks
            probe.get("gpu_used_bytes"),
            probe.get("torch_allocated_bytes"),
            probe.get("torch_reserved_bytes"),
            stores,  # host_store_blocks
            loads,  # host_load_blocks
            host_load_waiting,
        ))
        if self.group_memory is not None:
            self.group_memory.add(t_end - t_start, split)
        if traced:
            trace_counter("kv_bytes", t_end, {"token": split.token * b, "held": split.held * b})
            trace_counter("batch", t_end, {"running": num_running, "waiting": num_waiting})

    def record_decode_run(
        self, t_start_s: float, ends_s: list[float], num_seqs: int, num_waiting: int,
        token_slots: int, books: list[BooksAfterStep], totals_before: tuple[int, int, int],
        split_parts: tuple[int, int, bool], num_slots: int, num_running: int | None = None,
    ) -> None:
        """The rows of `len(ends_s)` decode steps of `num_seqs` sequences each, the first
        starting at `t_start_s`: the rows `record` gives them one at a time, to the bit (the
        fields: `DecodeRunRows`; `num_running`: after the last step, where some finished)."""
        if not ends_s:  # (a run cut to nothing by the next arrival: no row)
            return
        external, cached, has_prompt_blocks = split_parts
        unrecorded, self._unrecorded_preemptions = self._unrecorded_preemptions, 0
        run = DecodeRunRows(
            self.num_steps, t_start_s, ends_s, num_seqs, num_waiting, token_slots, books,
            totals_before, external, cached, has_prompt_blocks, num_slots, self.bytes_per_slot,
            unrecorded, num_seqs if num_running is None else num_running)
        if self.group_memory is not None and self._writer is None:  # (else: `stream_to`)
            self.group_memory.add_decode_run(run)
        self.keep_run(run)
