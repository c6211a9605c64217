"""`RunWriter`: the one door from a run to its results folder (docs/design.md, Results
contract): opened when the run starts, streamed to as steps and requests finish (so a killed
run keeps them), closed once to write the summary, `requests.csv` whole and the token file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvbench.build.engine_build import BuiltEngine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.execution.gpu_memory import peak_allocated_bytes
from kvbench.results.columns import Columns
from kvbench.results.files import atomic_file, write_json
from kvbench.results.metrics import (
    goodput,
    latency_stats,
    nan_to_none,
    per_request,
    send_rate,
    throughput,
)
from kvbench.results.request_writer import RequestWriter
from kvbench.results.residency_figures import residency_figures
from kvbench.results.step_writer import (
    CHART_STEP_COLUMNS,
    StepColumns,
    StepTotals,
    StepWriter,
)
from kvbench.results.summary import (
    REQUEST_LATENCIES,
    SUMMARY_FILE,
    Goodput,
    Latencies,
    LatencyStats,
    Load,
    Memory,
    MemoryBreakdown,
    Scheduler,
    Summary,
    Throughput,
)
from kvbench.results.tier_figures import tier_figures
from kvbench.results.token_file import write_token_file
from kvbench.results.token_times import TOKENS_FILE, TokenTimes
from kvbench.strategies import reads_option
from kvbench.tracing import TraceRecorder, trace_range
from kvbench.workloads import WorkloadResult
from kvbench.workloads.arrivals import conversation_groups, each_alone


@dataclass
class RunOutcome:
    """What a finished run holds of its results folder: everything but `steps.csv` (which
    streams to disk) and, unless kept, the token times."""

    label: str
    folder: Path
    summary: Summary  # as written to kvbench_summary.json
    config: dict[str, Any]  # as written to config.json
    requests: Columns  # as written to requests.csv
    # What the folder's token file reads back as, when the caller asked to keep it: the
    # session's report then does not parse it again.
    token_times: TokenTimes | None = dataclasses.field(default=None, repr=False,
                                                        compare=False)
    # `steps.csv`'s columns that the report draws, kept as the file was written (with the
    # token times; None when not, or the run was too long to hold them).
    steps: Columns | None = dataclasses.field(default=None, repr=False, compare=False)


class RunWriter:
    """A run's results folder, open while the run goes. `config`: config.json's content
    (its `label`, `device` and `executor` are the summary's too); `keep_for_report`: keep the
    chart columns of `steps.csv` and the token times in memory for the caller's report."""

    def __init__(self, folder: Path, config: dict[str, Any], engine: EngineConfig, *,
                 slo_ms: dict[str, float] | None = None, steps_every: int = 1,
                 keep_for_report: bool = False) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config = nan_to_none(config)  # what the file holds: the outcome keeps it
        self.engine_config = engine
        self.slo_ms = slo_ms or {}
        write_json(self.folder / "config.json", self.config)
        self.keep_for_report = keep_for_report
        self.steps = StepWriter(self.folder / "steps.csv", steps_every,
                                StepColumns(CHART_STEP_COLUMNS) if keep_for_report else None)
        self._requests = RequestWriter(self.folder)

    def requests_finished(self, requests: Iterable[Request],
                          samples: dict[int, list[Sequence]]) -> None:
        """Stream the rows of `requests` (each finished: every sample done)."""
        self._requests.write(requests, samples)

    def close(self, built: BuiltEngine, workload: WorkloadResult, status: str, *,
              warmup_done: int = 0, recorder: TraceRecorder | None = None,
              accuracy: Callable[[], dict] | None = None) -> RunOutcome:
        """Write the run's files; `accuracy` measures the summary's `accuracy` section of a
        complete run. A failure to write keeps the streamed `requests.csv`."""
        try:
            return self._close(built, workload, status, warmup_done, recorder, accuracy)
        except BaseException:
            self._requests.abandon()  # its rows are what is left of requests.csv
            raise

    def _close(self, built, workload, status, warmup_done, recorder, accuracy) -> RunOutcome:
        engine = built.engine
        with trace_range("metrics"), _no_collection():
            step_totals = self.steps.close()
            sequences = engine.sequences
            added = [r for r in workload.requests if r.request_id in sequences]
            # Each row built once: the finished requests' as they were streamed.
            table = self._requests.table(added, sequences)
            requests = Columns(table.columns)
            with atomic_file(self.folder / "requests.csv") as handle:
                table.write_csv(handle)
            del table
            self._requests.close()
            with atomic_file(self.folder / TOKENS_FILE) as handle:
                written = write_token_file(handle, added, sequences)
            # Its ITLs are the summary's: the file holds every sample the engine ran (the
            # warm-up's were forgotten at its reset), as gaps with counts.
            summary = self.summarize(built, workload, status, warmup_done, requests,
                                     step_totals, written.itl_ms.stats())
        token_times = written.times
        del written
        if status == "complete" and accuracy is not None:
            with trace_range("fp8_accuracy"):
                summary.accuracy = nan_to_none(accuracy())
        if recorder is not None:
            recorder.request_tracks(engine.sequences)
            write_json(self.folder / "trace.json", recorder.to_json())
        summary.write(self.folder / SUMMARY_FILE)
        whole = status == "complete"  # (an unfinished run writes no report: nothing to keep)
        kept_steps = self.steps.kept.columns() if self.steps.kept is not None and whole else None
        return RunOutcome(self.config["label"], self.folder, summary, self.config, requests,
                          token_times if self.keep_for_report and whole else None, kept_steps)

    def summarize(self, built: BuiltEngine, workload: WorkloadResult, status: str,
                  warmup_done: int, requests: Columns, steps: StepTotals,
                  itl: dict[str, Any]) -> Summary:
        """The run's `Summary` from its per-request rows, the totals over its steps and
        its inter-token latencies' statistics."""
        engine = built.engine
        by_request = per_request(requests)  # a request's prompt counts once, not per sample
        any_rows = not requests.empty
        completed = int(by_request["completed"].sum()) if any_rows else 0
        tput, makespan = throughput(requests) if any_rows else ({}, 0.0)
        cfg = self.engine_config
        prompt_tokens = int(by_request["prompt_len"].sum()) if any_rows else 0
        cached = int(by_request["cached_prompt_tokens"].sum()) if any_rows else 0
        use = steps.memory()
        breakdown = MemoryBreakdown(**use.pop("breakdown_mean"))
        sums = getattr(getattr(engine, "step_recorder", None), "group_memory", None)
        memory = Memory(
            kv_budget_bytes=built.kv_budget_bytes,
            kv_capacity_tokens=engine.strategy.capacity_tokens if engine.strategy else None,
            kv_bytes_per_token=built.bytes_per_slot,
            kv_cache_dtype=str(built.kv_dtype).replace("torch.", ""),
            **use, breakdown_mean=breakdown,
            # KV held per token and each KV group's split, where the engine keeps them.
            **(sums.summary() if sums is not None else {}),
            peak_gpu_bytes=peak_allocated_bytes(built.device),
            prompt_blocks_max=steps.maxima["kv_prompt_blocks"],
            gpu_used_bytes_max=steps.maxima["gpu_used_bytes"],
            torch_reserved_bytes_max=steps.maxima["torch_reserved_bytes"],
        )
        overhead, step_total, count = steps.overhead_ms, steps.step_ms, steps.steps
        # Sequences each step ran (prefill + decode): batch_size_mean is their plain mean
        # over steps (see kvbench.results.summary.Scheduler).
        scheduler = Scheduler(
            steps=count,
            preemptions=steps.preemptions,
            prefix_hit_rate=cached / prompt_tokens if prompt_tokens else None,
            prefix_hit_ceiling=(engine.strategy.stats().get("cache_hit_ceiling")
                                if engine.strategy else None),
            prompt_tokens=prompt_tokens,
            cached_prompt_tokens=cached,
            batch_size_mean=steps.batch_sum / count if count else None,
            batch_size_max=steps.batch_max,
            waiting_mean=steps.waiting_sum / count if count else None,
            prefill_tokens_computed=engine.prefill_tokens_computed,
            overhead_ms_total=float(overhead),
            overhead_fraction=float(overhead / step_total) if step_total else None,
            extra=({**engine.strategy.stats(), **tier_figures(engine),
                    **residency_figures(engine.strategy)} if engine.strategy else {}),
        )

        latency = Latencies(
            **{name: LatencyStats(**latency_stats(requests.get(f"{name}_ms", [])))
               for name in REQUEST_LATENCIES},
            itl=LatencyStats(**itl),
            client_wait=LatencyStats(**latency_stats(by_request.get("client_wait_ms", []))))
        return Summary(
            label=self.config["label"],
            status=status,
            strategy=cfg.strategy,
            batching=cfg.batching,
            reserve=cfg.reserve if reads_option(cfg.strategy, "reserve") else None,
            # the strategy's: a state-space hybrid pages in vLLM's raised block, not --block-size
            block_size=(getattr(engine.strategy, "block_size", cfg.block_size)
                        if reads_option(cfg.strategy, "block_size") else None),
            workload=workload.name,
            model=cfg.model,
            dtype=cfg.dtype,
            device=self.config["device"],
            executor=self.config["executor"],
            seed=cfg.seed,
            num_requests=len(workload.requests),
            completed=completed,
            failed=len(workload.requests) - completed,
            warmup_requests_excluded=warmup_done,
            clipped_requests=workload.num_clipped,
            duration_s=makespan,
            throughput=Throughput(**tput),
            latency_ms=latency,
            memory=memory,
            scheduler=scheduler,
            load=_load(workload, requests),
            goodput=(Goodput(**goodput(requests, self.slo_ms, makespan))
                     if self.slo_ms and any_rows else None),
        )


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No garbage collection while the results are made: they build millions of short-lived
    containers in no cycle, and each collection would walk the run's sequences again. What
    cycles they make are collected after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_REQUEST_ID = operator.attrgetter("request_id")


def _load(workload: WorkloadResult, rows: Columns) -> Load:
    """The offered rates (`Load`: both, whichever was given) and those the client achieved,
    from the send times of the requests sent: `requests.csv`'s `sent_s` (a request's first
    row holds it)."""
    requests = workload.requests
    sent: dict[Any, float] = {}
    if not rows.empty:
        sent_s = rows.floats("sent_s")
        first = (rows["sample"] == 0) & ~np.isnan(sent_s)
        sent = dict(zip(rows["request_id"][first].tolist(), sent_s[first].tolist(),
                        strict=True))
    if each_alone(requests):
        # Every request a conversation of its own (a trace, most workloads): no pass over
        # groups of one.
        conversations = len(requests)
        starts = [sent[rid] for rid in map(_REQUEST_ID, requests) if rid in sent]
    else:
        groups = conversation_groups(requests)
        conversations = len(groups)
        starts = [min(sent[requests[i].request_id] for i in members
                      if requests[i].request_id in sent)
                  for members in groups
                  if any(requests[i].request_id in sent for i in members)]
    process = workload.arrivals
    conversation_rate = process.conversation_start_rate(conversations, len(requests))
    request_rate = process.request_rate
    if not math.isinf(process.conversation_rate):
        request_rate = (conversation_rate * len(requests) / conversations if conversations
                        else math.inf)
    return Load(
        request_rate=None if math.isinf(request_rate) else request_rate,
        conversation_rate=None if math.isinf(conversation_rate) else conversation_rate,
        max_concurrency=process.max_concurrency,
        conversations=conversations,
        achieved_request_rate=send_rate(list(sent.values())),
        achieved_conversation_rate=send_rate(starts),
    )
