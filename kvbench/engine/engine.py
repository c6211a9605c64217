"""`Engine`: one iteration at a time — schedule, lay out, execute, sample, commit, free."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kvbench.core.clock import RunClock
from kvbench.core.request import Request
from kvbench.core.sampling_params import SampleKey, SamplingParams
from kvbench.core.sequence import Sequence, SequenceStatus
from kvbench.core.step_batch import StepBatch
from kvbench.core.step_record import StepRecord
from kvbench.engine.base_engine import BaseEngine
from kvbench.errors import KvbenchInputError, KvbenchRunError
from kvbench.scheduling.base import BatchingPolicy
from kvbench.strategies.base import CacheStrategy
from kvbench.tracing import NO_RANGE, trace_counter, trace_range, tracing_active

if TYPE_CHECKING:  # the executor owns torch: the core never imports it
    from kvbench.core.executor import Executor


def check_request_lengths(request: Request, max_model_len: int) -> None:
    """A request any engine must refuse: empty, or longer than the model's maximum length."""
    if request.prompt_len < 1 or request.output_len < 1:
        raise KvbenchInputError(f"request {request.request_id}: empty prompt or output")
    if request.prompt_len + request.output_len > max_model_len:
        raise KvbenchInputError(
            f"request {request.request_id}: prompt ({request.prompt_len}) + output "
            f"({request.output_len}) tokens exceed the maximum model length {max_model_len}"
        )


def _split_prefills(
    scheduled: list[tuple[Sequence, int]],
) -> tuple[list[tuple[Sequence, int]], list[tuple[Sequence, int]], int]:
    """Prefills, decodes and the prefills' tokens. A decode computes the one token sampled
    last step; anything else (prompts, prompt chunks, recomputation after preemption) is a
    prefill. One pass with the checks inlined: this runs for every sequence of every step."""
    prefills: list[tuple[Sequence, int]] = []
    decodes: list[tuple[Sequence, int]] = []
    prefill_tokens = 0
    add_decode = decodes.append
    for item in scheduled:
        seq, n = item
        length = len(seq.token_ids)
        if n == 1 and seq.num_computed == length - 1 and length > len(seq.request.prompt_token_ids):
            add_decode(item)
        else:
            prefills.append(item)
            prefill_tokens += n
    return prefills, decodes, prefill_tokens


class Engine(BaseEngine):
    """Drives a `BatchingPolicy`, a `CacheStrategy` and an `Executor` over added requests.

    `clock()` returns seconds on the run's clock (wall time by default).
    """

    def __init__(
        self,
        strategy: CacheStrategy,
        policy: BatchingPolicy,
        executor: Executor,
        *,
        bytes_per_slot: int,
        max_model_len: int,
        temperature: float = 0.0,
        seed: int = 0,
        clock: RunClock | None = None,
        memory_probe: Callable[[], dict] | None = None,
    ) -> None:
        super().__init__(max_model_len=max_model_len, temperature=temperature, seed=seed,
                         clock=clock)
        self.strategy = strategy
        self.policy = policy
        self.executor = executor
        self.bytes_per_slot = bytes_per_slot
        self.memory_probe = memory_probe
        self._unrecorded_preemptions = 0
        self._traced = False  # whether this step records trace ranges (set at its start)

    # Requests ---------------------------------------------------------------------------

    def check_request(self, request: Request) -> None:
        """Raise `KvbenchInputError` for a request that could never run on this engine."""
        check_request_lengths(request, self.max_model_len)
        probe = Sequence(-1, request, 0, list(request.prompt_token_ids))
        need = self.strategy.required_slots(probe)
        if need > self.strategy.capacity_tokens:
            need_bytes = need * self.bytes_per_slot
            have_bytes = self.strategy.capacity_tokens * self.bytes_per_slot
            raise KvbenchInputError(
                f"--kv-memory too small: request {request.request_id} needs {need} KV slots "
                f"({need_bytes / 2**20:.2f} MiB) under {self.strategy.name}, the arena holds "
                f"{self.strategy.capacity_tokens} ({have_bytes / 2**20:.2f} MiB); "
                f"use --kv-memory {max(1, -(-need_bytes // 2**20))}MiB or more"
            )

    def add_request(self, request: Request) -> None:
        self.check_request(request)
        seq = self._new_sequence(request, 0)
        self.sequences[request.request_id] = [seq]
        self.policy.add(seq)
        self._unfinished += request.n

    # One iteration ----------------------------------------------------------------------

    def step(self) -> list[Sequence]:
        """Run one iteration; returns the sequences that finished in it."""
        t_start = self.clock()
        # Checked once a step: with nobody recording, the ranges and their arguments would
        # cost a long simulation a tenth of a second per 100k steps for nothing.
        traced = self._traced = tracing_active()
        with trace_range("step", step=self.num_steps) if traced else NO_RANGE:
            with (trace_range("schedule", waiting=len(self.waiting), running=self.num_running)
                  if traced else NO_RANGE):
                out = self.policy.schedule(t_start)
            if not out.scheduled:
                self._unrecorded_preemptions += len(out.preempted)  # goes in the next row
                if self.waiting and not self.policy.has_work():
                    raise KvbenchRunError(
                        f"scheduler stalled: request {self.waiting.head().request.request_id} "
                        "cannot be admitted into an empty cache"
                    )
                return []
            prefills, decodes, num_prefill_tokens = _split_prefills(out.scheduled)
            if prefills:
                batch, to_sample, forks = self._build_batch(prefills + decodes, len(prefills))
            else:  # the common step: nothing but decodes, each samples (and never forks)
                batch, to_sample, forks = self._build_decode_batch(decodes)
            sampling = SamplingParams(self.temperature, self.seed, rows=to_sample, forks=forks)
            t_forward = self.clock()
            tokens = self.executor.execute_and_sample(batch, sampling)
            t_forward_end = self.clock()
            with trace_range("sample", rows=len(batch.sample_rows)) if traced else NO_RANGE:
                finished = self._commit(to_sample, tokens, t_forward_end, bool(forks))
            split = self.strategy.memory_split(self.policy.holders(), self.waiting.head())
        t_end = self.clock()
        self.prefill_tokens_computed += num_prefill_tokens
        b = self.bytes_per_slot
        unrecorded, self._unrecorded_preemptions = self._unrecorded_preemptions, 0
        record = StepRecord(
            step=self.num_steps,
            t_s=t_start,
            step_ms=(t_end - t_start) * 1e3,
            overhead_ms=((t_end - t_start) - (t_forward_end - t_forward)) * 1e3,
            num_prefill_seqs=len(prefills),
            num_decode_seqs=len(decodes),
            num_batched_tokens=batch.num_tokens,
            num_prefill_tokens=num_prefill_tokens,
            num_running=self.num_running,
            num_waiting=len(self.waiting),
            kv_token_bytes=split.token * b,
            kv_reserved_bytes=split.reserved * b,
            kv_internal_bytes=split.internal * b,
            kv_external_bytes=split.external * b,
            kv_free_bytes=split.free * b,
            kv_cached_bytes=split.cached * b,
            preemptions=len(out.preempted) + unrecorded,
            kv_utilization=split.utilization,
            kv_prompt_blocks=split.prompt_blocks,
            **(self.memory_probe() if self.memory_probe else {}),
        )
        self._record(record)
        if traced:
            trace_counter("kv_bytes", t_end, {"token": record.kv_token_bytes,
                                              "held": split.held * b})
            trace_counter("batch", t_end, {"running": record.num_running,
                                           "waiting": record.num_waiting})
        return finished

    def _build_batch(
        self, ordered: list[tuple[Sequence, int]], num_prefill: int
    ) -> tuple[StepBatch, list[Sequence], dict[int, tuple[SampleKey, ...]]]:
        """The step's batch, the sequences that sample (row order) and the sampling keys of
        the forking rows; counts the step's tokens as computed. Token ids and positions only
        for an executor that reads them. One pass over the sequences: the engine's hot loop."""
        with trace_range("layout", seqs=len(ordered)) if self._traced else NO_RANGE:
            layout = self.strategy.build_layout(ordered)
        sample_rows: list[int] = []
        to_sample: list[Sequence] = []
        forks: dict[int, tuple[SampleKey, ...]] = {}
        reads_inputs = self.executor.reads_token_inputs
        input_ids: list[int] = []
        positions: list[int] = []
        num_tokens = 0
        for seq, n in ordered:
            start = seq.num_computed
            tokens = seq.token_ids
            if reads_inputs:
                input_ids.extend(tokens[start : start + n])
                positions.extend(range(start, start + n))
            num_tokens += n
            seq.num_computed = start + n
            if start + n == len(tokens):
                sample_rows.append(num_tokens - 1)
                # first_token_s is set after the first token: the fork test rarely goes on.
                if seq.first_token_s is None and seq.sample_index == 0 and seq.request.n > 1:
                    forks[len(to_sample)] = self._fork_keys(seq)
                to_sample.append(seq)
        batch = StepBatch(input_ids, positions, layout, num_prefill, sample_rows,
                          num_tokens=num_tokens)
        return batch, to_sample, forks

    def _build_decode_batch(
        self, decodes: list[tuple[Sequence, int]]
    ) -> tuple[StepBatch, list[Sequence], dict[int, tuple[SampleKey, ...]]]:
        """`_build_batch` for a step of decodes only: one token each, every row samples, and
        no row forks (a decode has sampled its first token already)."""
        with trace_range("layout", seqs=len(decodes)) if self._traced else NO_RANGE:
            layout = self.strategy.build_layout(decodes)
        to_sample = [seq for seq, _ in decodes]
        if self.executor.reads_token_inputs:
            input_ids = [seq.token_ids[-1] for seq in to_sample]
            positions = [seq.num_computed for seq in to_sample]
        else:
            input_ids, positions = [], []
        for seq in to_sample:
            seq.num_computed += 1
        batch = StepBatch(input_ids, positions, layout, 0, list(range(len(to_sample))),
                          num_tokens=len(to_sample))
        return batch, to_sample, {}

    @staticmethod
    def _fork_keys(seq: Sequence) -> tuple[SampleKey, ...]:
        """A forking parent's keys (its request's first token, with `n > 1`): its own, then,
        from the same logits, one per sibling (seeded by the sibling's key, at the prompt's
        end)."""
        request = seq.request
        own = (request.request_id, seq.sample_index, len(seq.token_ids))
        return (own, *((request.request_id, i, request.prompt_len) for i in range(1, request.n)))

    def _commit(
        self, to_sample: list[Sequence], tokens: list[list[int]], now_s: float,
        forking: bool = True,
    ) -> list[Sequence]:
        """Append each row's token; `forking`: some row also carries its siblings' tokens."""
        finished: list[Sequence] = []
        for seq, row_tokens in zip(to_sample, tokens, strict=True):
            token_ids = seq.token_ids
            token_ids.append(row_tokens[0])
            seq.token_times_s.append(now_s)
            if seq.first_token_s is None:
                seq.first_token_s = now_s
            if forking and len(row_tokens) > 1:  # a forking parent's siblings' tokens
                self._fork_children(seq, row_tokens[1:], now_s)
            request = seq.request
            # `Sequence.is_finished`, inlined: this runs for every sampled token.
            if len(token_ids) - len(request.prompt_token_ids) >= request.output_len:
                finished.append(seq)
        for seq in finished:
            self._finish(seq, now_s)
        return finished

    def _append_token(self, seq: Sequence, token: int, now_s: float) -> None:
        seq.token_ids.append(token)
        seq.token_times_s.append(now_s)
        if seq.first_token_s is None:
            seq.first_token_s = now_s

    def _fork_children(self, parent: Sequence, tokens: list[int], now_s: float) -> None:
        """Parallel sampling: children take the parent's prompt KV; `tokens[i]` is the first
        token of sample `i + 1`, drawn from the parent's logits by its own key."""
        request = parent.request
        group = self.sequences[request.request_id]
        for sample_index in range(1, request.n):
            child = self._new_sequence(request, sample_index)
            group.append(child)
            child.admitted_s = parent.admitted_s
            if self.strategy.fork(parent, child) is None:
                self.policy.requeue(child)  # no room to share or copy: prefill on its own
                continue
            child.num_computed = parent.prompt_len
            child.cached_prompt_tokens = parent.prompt_len
            self.policy.add_running(child)
            self._append_token(child, tokens[sample_index - 1], now_s)
            if child.is_finished:
                self._finish(child, now_s)

    def _finish(self, seq: Sequence, now_s: float) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_s = now_s
        self.policy.on_finished(seq)
        self._unfinished -= 1

    def drain(self) -> None:
        """Give back memory still held by finished members (static batching's last batch)."""
        self.policy.release_finished()

    def reset_stats(self) -> None:
        super().reset_stats()
        self.strategy.reset_stats()
