"""The runner: replays a workload's arrivals against an engine and writes the results folder."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from kvbench.build.engine_build import (
    BuildContext,
    BuiltEngine,
    EnginePlan,
    engine_shape,
    keeps_fp8_cache,
)
from kvbench.build.engines import executor_factory
from kvbench.core.clock import WallClock
from kvbench.core.engine_kind import EngineKind
from kvbench.core.request import Request
from kvbench.engine.base_engine import BaseEngine
from kvbench.engine.engine import Engine
from kvbench.errors import KvbenchRunError, RunInterrupted
from kvbench.execution.gpu_memory import reset_peak_memory
from kvbench.execution.threads import thread_settings
from kvbench.results.run_writer import RunOutcome, RunWriter
from kvbench.session.progress import Progress
from kvbench.session.run_config import RunConfig
from kvbench.strategies import STRATEGIES, reads_option
from kvbench.tracing import TraceRecorder, set_recorder, trace_range
from kvbench.versions import versions
from kvbench.workloads import WorkloadResult, check_workload_fits, is_trace, load_workload

DEFAULT_NUM_REQUESTS = 64


def strategy_label(run: RunConfig) -> str:
    engine = run.engine
    label = engine.strategy
    if reads_option(engine.strategy, "reserve"):
        label += f"-{engine.reserve}"
    if keeps_fp8_cache(engine) and STRATEGIES.get(engine.strategy).kv_cache_dtype is None:
        label += "-fp8"  # where the strategy's name does not say it
    if run.engine.batching != "continuous":
        label += f"-{engine.batching}"
    if engine.queue_order != "fcfs":
        label += f"-{engine.queue_order}"
    if run.executor.kind is EngineKind.TRANSFORMERS:
        label = "hf-generate"
    return label


def check_run(run: RunConfig, model_cache: dict | None = None
              ) -> tuple[EnginePlan, WorkloadResult]:
    """The run's engine planned (its model loaded; on CUDA its budget measured) and its
    workload built, every request checked against the plan: everything a run can refuse,
    refused before anything is written, and no engine built."""
    if not is_trace(run.workload.name):  # a trace's warm-up replays at most the file
        check_workload_fits(run.replay.warmup, 0, "--warmup", "give a smaller --warmup")
    # The workload before the model: a bad trace is refused before the model loads (and
    # torch with it).
    shape = engine_shape(run.engine)
    spec, replay = run.workload, run.replay
    workload = load_workload(
        spec.name,
        spec.num_requests or (None if is_trace(spec.name) else DEFAULT_NUM_REQUESTS),
        run.engine.seed,
        shape.model_config.vocab_size,
        max_model_len=shape.max_model_len,
        request_rate=replay.request_rate,
        burstiness=replay.burstiness,
        max_concurrency=replay.max_concurrency,
        conversation_rate=replay.conversation_rate,
        time_scale=spec.time_scale, tokenizer=spec.tokenizer,
        **spec.params,
    )
    plan = _factory(run).plan(shape, BuildContext(model_cache=model_cache))
    check = plan.request_check()
    for request in workload.requests:
        check(request)
    return plan, workload


def as_planned(run: RunConfig, plan: EnginePlan) -> RunConfig:
    """`run` with its engine's options as planned, the implied ones applied (what config.json
    records); the transformers baseline's as given (no strategy or policy implies any)."""
    if run.executor.kind is EngineKind.TRANSFORMERS:
        return run
    return dataclasses.replace(run, engine=plan.shape.config)


def build(run: RunConfig, plan: EnginePlan) -> BuiltEngine:
    """The run's engine, built from its plan (the arena is allocated here)."""
    return _factory(run).build(plan, BuildContext(clock=WallClock()))


def prepare(run: RunConfig, model_cache: dict | None = None) -> tuple[BuiltEngine, WorkloadResult]:
    """`check_run`, then the engine built at once: for a caller that runs it now."""
    plan, workload = check_run(run, model_cache)
    return build(run, plan), workload


def _factory(run: RunConfig):
    return executor_factory(run.executor.kind, run.executor.simulated_gpu)


def _warm_up(built: BuiltEngine, run: RunConfig) -> int:
    """Run `run.replay.warmup` requests of the workload (another seed) and forget them."""
    count, spec = run.replay.warmup, run.workload
    if count <= 0:
        return 0
    warm = load_workload(
        spec.name, count,
        run.engine.seed + 7919, built.model_config.vocab_size,
        max_model_len=built.max_model_len, tokenizer=spec.tokenizer, **spec.params,
    ).requests[:count]
    engine = built.engine
    for i, request in enumerate(warm):
        request = dataclasses.replace(request, request_id=-(i + 1), arrival_s=0.0)
        try:
            engine.check_request(request)
        except Exception:  # noqa: BLE001 - a warm-up request that cannot run is skipped
            continue
        engine.add_request(request)
    engine.run_to_completion()
    engine.reset_stats()
    return len(warm)


def run_one(
    run: RunConfig,
    folder: Path,
    *,
    show_progress: bool = True,
    command: str = "",
    prepared: tuple[BuiltEngine, WorkloadResult] | None = None,
    keep_for_report: bool = False,
) -> RunOutcome:
    """Replay the workload into `folder` (a working folder: its caller renames it once
    whole). A run that stops writes what it has, its summary's status says how it ended,
    and raises `RunInterrupted` or `KvbenchRunError`."""
    built, workload = prepared or prepare(run)
    engine = built.engine
    label = strategy_label(run)
    reset_peak_memory(built.device)  # the peak is this run's: weights, arena and activations
    with trace_range("warmup", requests=run.replay.warmup):
        warmup_done = _warm_up(built, run)
    config = {
        "run": run.to_dict(),
        "label": label,
        "command": command,
        "device": _device_name(built, run),
        "executor": run.executor.kind.value,
        "attention_backend": built.backend,
        "kv_budget_bytes": built.kv_budget_bytes,
        # The simulator's budget as vLLM's start-up would size it: its terms (`estimate`'s).
        "kv_budget_terms": built.kv_budget_terms,
        "kv_cache_dtype": str(built.kv_dtype).replace("torch.", ""),
        "max_model_len": built.max_model_len,
        # Triton compiles every kernel variant before the run, kept out of TTFT/TPOT.
        "kernel_compile_s": built.compile_s,
        "model_config": built.model_config.to_dict(),
        "versions": versions(),
        # What the run measured under: torch threads and the OpenMP wait policy
        # (spinning threads collapse a run on a shared machine).
        "threads": thread_settings(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # The session's report draws the steps and token times kept here, not the files read back.
    writer = RunWriter(folder, config, run.engine, slo_ms=run.replay.slo_ms,
                       steps_every=run.replay.steps_every, keep_for_report=keep_for_report)
    clock = engine.clock
    clock.reset()
    # The trace runs on the engine's clock: simulated under `kvbench simulate`, as the summary.
    simulated = run.executor.kind is EngineKind.SIMULATED
    recorder = TraceRecorder(
        f"kvbench {label}{' (simulated)' if simulated else ''}",
        clock=clock, drawn_by_executor=engine.drawn_trace_ranges,
    ) if run.replay.trace else None
    set_recorder(recorder)
    # Rows stream to disk as the engine makes them (a fast-forwarded run's described, and
    # expanded in batches).
    engine.step_recorder.stream_to(writer.steps)
    status = "complete"
    if isinstance(engine, Engine) and not engine.executor.reads_token_inputs:
        engine.keep_finished_token_ids = False  # the results count a sequence's tokens only
    with _gc_frozen(young_every=50_000 if simulated else None):
        try:
            _replay(engine, workload, run, Progress(len(workload.requests), label, show_progress),
                    writer)
            if engine.strategy is not None and not engine.strategy.is_whole():
                status = "failed"  # before the summary is written, so that it says so
                failure = "KV memory leaked: the pool is not whole after the run"
        except KeyboardInterrupt:
            status = "interrupted"
        except Exception as err:  # noqa: BLE001 - reported with where the partial results are
            status = "failed"
            failure = f"{type(err).__name__}: {err}"
        finally:
            engine.settle()  # a run that stopped early: its sequences as far as they got
            set_recorder(None)
            engine.step_recorder.stream_to(None)
        outcome = writer.close(
            built, workload, status, warmup_done=warmup_done, recorder=recorder,
            accuracy=(lambda: _fp8_accuracy(built, run, workload))
            if measures_fp8_accuracy(run) else None)
    if status == "interrupted":
        raise RunInterrupted(folder)
    if status == "failed":
        raise KvbenchRunError(f"{label}: {failure}; partial results in {folder}")
    return outcome


@contextlib.contextmanager
def _gc_frozen(young_every: int | None = None) -> Iterator[None]:
    """Keep the objects alive now (the workload's prompts: millions of token ids) out of the
    garbage collector's view, which its full collections would otherwise walk again and again.
    `young_every`: collect the youngest generation every this many allocations instead of
    Python's 700 (a simulation's steps allocate many short-lived objects, few in cycles); a
    run on a device keeps the default, so tensors caught in a cycle are freed as before."""
    thresholds = gc.get_threshold()
    gc.freeze()
    if young_every is not None:
        gc.set_threshold(max(thresholds[0], young_every), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _device_name(built: BuiltEngine, run: RunConfig) -> str:
    if run.executor.kind is EngineKind.SIMULATED:
        return f"simulated {built.engine.executor.gpu.name}"
    from kvbench.execution.device import describe_device  # imports torch: not for a simulation

    return describe_device(built.device)


def _replay(engine: BaseEngine, workload: WorkloadResult, run: RunConfig,
            progress: Progress, writer: RunWriter | None = None) -> None:
    """Send each request at its arrival; with `max_concurrency` C (closed loop) also not
    before one of C slots is free, as `vllm bench serve` does (docs/design.md, Metrics: Sent).
    The engine gets it `--frontend-latency-ms` later, with `arrival_s` the send time, so every
    latency counts from the send. Each request's rows go to `writer` as it ends."""
    pending: deque[Request] = deque(workload.requests)
    workload_request = {request.request_id: request for request in workload.requests}
    limit = workload.max_concurrency
    clock = engine.clock
    # When each free slot freed, earliest first (finishes come in time order).
    free_slots: deque[float] | None = (deque([-math.inf] * limit) if limit is not None
                                       else None)
    delay_s = run.replay.frontend_latency_ms / 1e3

    def next_send_s() -> float:
        """When the next request is sent: at its arrival, and in a closed loop not before
        a slot frees (inf: none is free, only a finish frees one)."""
        if not pending:
            return math.inf
        if free_slots is None:
            return pending[0].arrival_s
        return max(pending[0].arrival_s, free_slots[0]) if free_slots else math.inf

    ended: set[int] = set()
    done = 0
    tokens = 0
    steps = 0
    fast_forward = run.replay.fast_forward
    with trace_range("replay", requests=len(workload.requests)):
        while pending or engine.has_unfinished():
            now = clock()
            # (the next request's hand-off to the engine)
            while (reaches_s := (sent_s := next_send_s()) + delay_s) <= now:
                request = pending.popleft()
                if free_slots is not None:
                    free_slots.popleft()
                if sent_s != request.arrival_s:
                    request = dataclasses.replace(request, arrival_s=sent_s)
                engine.add_request(request, checked=True)  # `check_run` checked every one
            if not engine.has_unfinished():
                if pending:
                    with trace_range("idle", until_s=reaches_s):
                        clock.sleep_until(reaches_s)
                continue
            advanced = 0
            if fast_forward:
                # Until the next request reaches the engine (never, while every slot is
                # taken: only a finish frees one, and in a closed loop a finish ends the run).
                advanced, finished = engine.fast_forward(reaches_s, free_slots is None)
                if advanced:
                    steps += advanced - 1  # the last is counted with `step`'s below
            if not advanced:
                finished = engine.step()
            finished_requests: list[Request] = []  # as the workload has them (arrival)
            for seq in finished:
                tokens += seq.num_generated
                request_id = seq.request.request_id
                group = engine.sequences[request_id]
                # (samples of one request that finish in one step: the request ends once)
                if (request_id not in ended and len(group) == seq.request.n
                        and all(s.finish_s is not None for s in group)):
                    ended.add(request_id)
                    done += 1
                    if free_slots is not None:
                        free_slots.append(max(s.finish_s for s in group))
                    finished_requests.append(workload_request[request_id])
            if finished_requests and writer is not None:
                writer.requests_finished(finished_requests, engine.sequences)
            steps += 1
            # The bar's figures: when a request ends, after a run, and every 64 steps (a
            # long simulation runs hundreds of thousands of steps of microseconds each),
            # gathered only when they would show.
            if (progress.enabled and (finished or advanced or not steps % 64)
                    and progress.due(done)):
                progress.update(done, tokens, _held_share(engine))
    progress.close()
    engine.drain()


def _held_share(engine: BaseEngine) -> float | None:
    """Share of the KV arena held after the engine's last step (None before any)."""
    last = engine.step_recorder.last
    if last is None or last.kv_free_bytes is None:
        return None
    arena = last.kv_token_bytes + last.kv_reserved_bytes + last.kv_internal_bytes + \
        last.kv_external_bytes + last.kv_free_bytes
    return (arena - last.kv_free_bytes) / arena if arena else None


def measures_fp8_accuracy(run: RunConfig) -> bool:
    """A run of the model with an fp8 cache: its summary carries an `accuracy` section."""
    return run.executor.kind is EngineKind.MODEL and keeps_fp8_cache(run.engine)


def _fp8_accuracy(built: BuiltEngine, run: RunConfig, workload: WorkloadResult) -> dict:
    from kvbench.session.fp8_accuracy import measure_fp8_accuracy  # torch: a model run only

    return measure_fp8_accuracy(built, run.engine, workload.requests)

