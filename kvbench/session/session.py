"""A benchmark session: what `kvbench run` and `kvbench simulate` do, as a library.

`plan_session(options)` expands the comma lists into runs, plans every engine and checks every
request, so bad input fails before a file is written; `run_session(plan)` runs them (repeats
taking turns), each engine built as its run starts, and writes the folder and the reports.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench.build.engine_build import keeps_fp8_cache
from kvbench.config import EngineConfig
from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError, KvbenchRunError, RunInterrupted
from kvbench.report.runs import RunData, collect_runs
from kvbench.results.files import check_output_folder, disk_full_error, out_of_space
from kvbench.results.session_folder import SessionFolder
from kvbench.scheduling import POLICIES, QUEUE_ORDERS
from kvbench.session.input_warnings import input_warnings
from kvbench.session.run_config import RunConfig
from kvbench.session.run_options import RunOptions, build_run_config, option_fields
from kvbench.session.runner import (
    RunOutcome,
    as_planned,
    build,
    check_run,
    run_one,
    strategy_label,
)
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpus import GPU_PRESETS
from kvbench.strategies import STRATEGIES, reads_option
from kvbench.units import parse_duration_s, parse_rate
from kvbench.workloads import is_trace, parse_workload_params


def split_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


# vLLM's `--goodput` names E2E latency `e2el`.
_SLO_NAMES = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2e", "e2el": "e2e"}


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft=500ms,tpot=50ms`, or vLLM's `--goodput` pairs `ttft:500 tpot:50` (a number without
    unit is milliseconds), -> {"ttft": 500.0, "tpot": 50.0} (milliseconds)."""

    if not text:
        return {}
    slo: dict[str, float] = {}
    for item in split_list(text.replace(" ", ",")):
        sep = "=" if "=" in item else ":"
        key, found, value = item.partition(sep)
        key = key.strip().removesuffix(".p99").removesuffix(".mean")
        if not found or key not in _SLO_NAMES:
            raise KvbenchInputError(
                f"cannot read --slo item {item!r}: use ttft=500ms,tpot=50ms (or e2e=), or "
                "vLLM's ttft:500 tpot:50"
            )
        slo[_SLO_NAMES[key]] = parse_duration_s(value.strip()) * 1e3
    return slo


def expand_runs(options: RunOptions) -> list[RunConfig]:
    """One `RunConfig` per strategy × reserve × batching in the comma lists; the options'
    `engine_kind` says what runs them (`RunOptions.for_kind("simulate")`: the simulator)."""

    engine_kind = EngineKind.parse(options.engine_kind)
    simulated = engine_kind is EngineKind.SIMULATED
    if simulated:

        if options.gpu_spec is not None and not options.gpu_spec.endswith(".toml"):
            raise KvbenchInputError(f"--gpu-spec {options.gpu_spec!r}: expected a .toml file")
        if options.gpu_spec is None and options.gpu not in GPU_PRESETS:
            raise KvbenchInputError(
                f"unknown --gpu {options.gpu!r} (presets: {', '.join(GPU_PRESETS)})")
        get_gpu(options.gpu_spec or options.gpu)  # a bad --gpu-spec file fails before a run
    strategies = STRATEGIES.names() if options.strategy == "all" else split_list(options.strategy)
    if not strategies:
        raise KvbenchInputError("--strategy is empty")
    for name in strategies:
        STRATEGIES.get(name)
    for name in split_list(options.batching):
        POLICIES.get(name)
    QUEUE_ORDERS.get(options.queue_order)
    if is_trace(options.workload) and options.workload_params:
        raise KvbenchInputError(
            f"--workload-param {options.workload_params[0]}: a trace file takes no workload "
            "parameters (they shape the built-in workloads)")
    values = {name: getattr(options, name) for name in option_fields()}
    values.update(
        workload_params=({} if is_trace(options.workload)
                         else parse_workload_params(options.workload, options.workload_params)),
        request_rate=parse_rate(options.request_rate),
        conversation_rate=parse_rate(options.conversation_rate),
        dtype=_resolve_dtype(options.dtype, options.device, simulated),
    )
    slo_ms = parse_slo(options.slo)
    fp8_names = {name for name in strategies
                 if keeps_fp8_cache(EngineConfig(strategy=name,
                                                 kv_cache_dtype=options.kv_cache_dtype))}
    if options.kv_scale is not None and not fp8_names:
        # A scale that nothing reads: the user believes they measure something they do not.
        raise KvbenchInputError(
            "--kv-scale applies only to an fp8 KV cache: add --kv-cache-dtype fp8 or "
            "--strategy fp8"
        )
    runs = []
    for batching in split_list(options.batching):
        for strategy in strategies:
            reserves = split_list(options.reserve) if reads_option(strategy, "reserve") else ["max"]
            for reserve in reserves:
                runs.append(build_run_config({
                    **values, "strategy": strategy, "batching": batching, "reserve": reserve,
                    # In a list, the scale is the fp8 runs' (docs/cli.md, Contradictions).
                    "kv_scale": options.kv_scale if strategy in fp8_names else None,
                    "slo": dict(slo_ms),
                }))
    # `all` with --kv-cache-dtype fp8 names `fp8` twice (it is `paged` then): run it once.
    return check_distinct(runs, drop=options.strategy == "all")


def _resolve_dtype(dtype: str, device: str, simulated: bool) -> str:
    """`--dtype auto`: the modelled GPU's under `simulate` (its command's default), as vLLM
    elsewhere (bfloat16 on CUDA, float32 on the CPU); config.json records the result."""
    if dtype != "auto":
        return dtype
    if simulated:
        return option_fields()["dtype"].default_for("simulate")
    # Without an NVIDIA driver loaded no torch build sees a CUDA device: the CPU's, without
    # loading torch.
    driver = (Path("/proc/driver/nvidia/version").exists()
              or any(Path("/dev").glob("nvidia[0-9]*")))
    if device == "cpu" or (device == "auto" and not driver):
        return "float32"
    # torch: never for a simulation
    from kvbench.execution.device import resolve_device, resolve_dtype

    return resolve_dtype("auto", resolve_device(device))


def _run_identity(run: RunConfig) -> tuple:
    """What a run measures: `fp8` and `paged --kv-cache-dtype fp8` are one run."""

    engine = run.engine
    if run.executor.kind is EngineKind.TRANSFORMERS:
        return ("hf", engine.batching)  # transformers keeps its own cache: no strategy
    entry = STRATEGIES.get(engine.strategy)
    return (entry.base or entry.name, engine.reserve if reads_option(engine.strategy, "reserve") else "",
            keeps_fp8_cache(engine), engine.batching)


def check_distinct(runs: list[RunConfig], drop: bool = False) -> list[RunConfig]:
    """Refuse a list that names one run twice (`paged,paged`, `fp8` next to `paged` with
    `--kv-cache-dtype fp8`): a comparison of a run with itself is a typo, not a question.
    `drop`: keep the first of each instead."""
    seen: dict[tuple, str] = {}
    kept = []
    for run in runs:
        label, key = strategy_label(run), _run_identity(run)
        if key in seen and not drop:
            first = seen[key]
            what = f"{label} twice" if first == label else f"{first} and {label}, the same run"
            raise KvbenchInputError(f"the strategy list names {what}: list it once")
        if key not in seen:
            seen[key] = label
            kept.append(run)
    return kept


def run_id(labels: list[str], workload: str, now: time.struct_time | None = None) -> str:
    # A trace is named by its file's stem, whatever its format or path (a path would nest).
    stem = Path(workload).stem if is_trace(workload) else workload
    what = labels[0] if len(labels) == 1 else "compare"
    return f"{time.strftime('%Y%m%d-%H%M%S', now or time.localtime())}-{what}-{stem}"


@dataclass
class SessionPlan:
    """Checked runs with their engines planned, and the folder they will write. A plan runs
    once: `run_session` lets go of each run's workload after its last repeat."""

    runs: list[RunConfig]
    labels: list[str]
    prepared: list[Any]  # (EnginePlan, WorkloadResult) per run
    root: Path
    repeat: int
    warnings: list[str] = field(default_factory=list)
    per_strategy_reports: bool = False


@dataclass
class SessionResult:
    root: Path
    outcomes: list[RunOutcome]  # the first repeat of each configuration
    repeats: list[dict[str, Any]]  # mean ± CI per configuration when repeat > 1
    measured: bool = True  # False when every run is simulated (no clock noise)

    @property
    def notes(self) -> list[str]:
        """Lines to print under the summary table: a ranking from single measured runs is
        not significant below the machine's noise."""
        if self.measured and len(self.outcomes) > 1 and not self.repeats:
            return ["strategies ran one after another, once each: differences below the "
                    "machine's run-to-run noise are not significant; rerun with --repeat 3 "
                    "for confidence intervals (repeats run interleaved)"]
        return []

    @property
    def summaries(self) -> list[dict[str, Any]]:
        """The outcomes' summaries in their JSON form (as `kvbench_summary.json` holds them)."""
        return [o.summary.to_dict() for o in self.outcomes]


def plan_session(options: RunOptions) -> SessionPlan:
    """Every input checked and every engine planned; nothing built or written yet."""

    runs = expand_runs(options)
    labels = [strategy_label(r) for r in runs]
    check_output_folder(options.out)  # before any model loads
    if options.repeat < 1:
        raise KvbenchInputError("--repeat must be at least 1")
    prepared = _prepare_all(runs, {})  # one model for every run of the session
    warnings = [note for _, w in prepared[:1] for note in (*w.notes, w.clip_message) if note]
    warnings += input_warnings(options, runs, prepared)
    # The folder is created (atomically) when the session runs; planning writes nothing.
    root = Path(options.out) / run_id(labels, options.workload)
    return SessionPlan(runs, labels, prepared, root, options.repeat, warnings,
                       options.per_strategy_reports)


def _prepare_all(runs: list[RunConfig], model_cache: dict) -> list[Any]:
    """(EnginePlan, WorkloadResult) per run, every input checked before anything runs. A
    measured budget (CUDA) is measured once, by the first plan, and pinned in bytes into every
    run of the list (docs/design.md, One build path)."""
    prepared: list[Any] = []
    budget: int | None = None
    for i, run in enumerate(runs):
        if budget is not None:
            run = runs[i] = _pinned(run, budget)
        plan, workload = check_run(run, model_cache)
        run = runs[i] = as_planned(run, plan)
        if (budget is None and len(runs) > 1 and run.engine.kv_memory is None
                and plan.device.type == "cuda"):  # a GPU's budget is measured, not fixed
            budget = plan.kv_budget_bytes
            runs[i] = _pinned(run, budget)
        prepared.append((plan, workload))
    return prepared


def _pinned(run: RunConfig, kv_budget_bytes: int) -> RunConfig:
    """`run` on a KV budget of exactly `kv_budget_bytes` (nothing measured for it)."""
    engine = dataclasses.replace(run.engine, kv_memory=kv_budget_bytes,
                                 gpu_memory_utilization=None)
    return dataclasses.replace(run, engine=engine)


def run_session(
    plan: SessionPlan,
    *,
    command: str = "",
    show_progress: bool = False,
    on_run_start: Callable[[str, int, int], None] | None = None,
) -> SessionResult:
    """Run the plan into `<root>.partial/`, renamed `<root>/` once whole, then write the
    report (docs/design.md, Results contract); `on_run_start(label, k, repeat)` before each
    run (k from 1). Ctrl-C raises `RunInterrupted` naming the strategies that finished; a
    disk that fills raises `KvbenchRunError`; what was written stays, still `.partial`."""

    try:
        folder = SessionFolder(plan.root.parent, plan.root.name, plan.labels, plan.repeat)
    except OSError as err:  # checked writable at planning; full or gone since
        raise KvbenchRunError(
            f"cannot create a results folder in {plan.root.parent}: {err.strerror or err}"
        ) from None
    plan.root = folder.work
    try:
        # Repeats go round the configurations (A B A B, not A A B B), so a slow spell of a
        # shared machine lands on every strategy instead of on one of them.
        for k in range(plan.repeat):
            for i, (run, label) in enumerate(zip(plan.runs, plan.labels, strict=True)):
                engine_plan, workload = plan.prepared[i]
                if k == plan.repeat - 1:
                    plan.prepared[i] = None  # (a long trace's requests: GBs)
                if on_run_start is not None:
                    on_run_start(label, k + 1, plan.repeat)
                # Each run's engine is built as it starts, from its plan, and let go when it
                # ends (a GPU holds one arena at a time). The first round's runs are the ones
                # reported: their token times go to the report from memory.
                folder.run_done(run_one(
                    run, folder.run_folder(i, k), show_progress=show_progress, command=command,
                    prepared=(build(run, engine_plan), workload), keep_for_report=k == 0))
        outcomes, repeats = folder.finish()
        plan.root = folder.root
    except (KeyboardInterrupt, RunInterrupted):
        finished = folder.finished_labels()
        raise RunInterrupted(plan.root, None if len(plan.runs) == 1 else finished) from None
    except OSError as err:
        if out_of_space(err):
            raise disk_full_error(plan.root, err) from None
        if err.filename is None:
            raise
        raise KvbenchRunError(
            f"cannot write {err.filename}: {err.strerror or err}; {plan.root} keeps what was "
            "written (unfinished)") from None
    try:
        write_reports(plan.root, outcomes, per_strategy=plan.per_strategy_reports,
                      repeats=repeats)
    except OSError as err:
        # The results are whole and their folder says so; only the report is missing.
        raise KvbenchRunError(
            f"cannot write {plan.root / 'report.html'}: {err.strerror or err}; the results "
            f"are whole: `kvbench report {plan.root}` writes the report") from None
    except KeyboardInterrupt:
        raise RunInterrupted(plan.root) from None
    measured = any(run.executor.kind is not EngineKind.SIMULATED for run in plan.runs)
    return SessionResult(plan.root, outcomes, repeats, measured)


def write_reports(root: Path, outcomes: list[RunOutcome], per_strategy: bool = False,
                  repeats: list[dict[str, Any]] | None = None) -> None:
    """One `report.html` per results folder: the run's own for one strategy; for several, one
    comparing them in `root`, and each strategy's own only when `per_strategy` (each report
    inlines plotly.js, ~5 MB). The reports draw what the outcomes hold, as `kvbench report`
    would read it back; `repeats`: each outcome's `repeat.json` under `--repeat`."""
    from kvbench.report.writer import write_runs_report  # pandas: only once results exist

    runs = [_report_run(o, o.folder if len(outcomes) == 1 else root,
                        repeats[i]["figures"] if repeats else None)
            for i, o in enumerate(outcomes)]
    if len(runs) == 1:
        write_runs_report(collect_runs(runs), outcomes[0].folder / "report.html")
    else:
        write_runs_report(collect_runs(runs), root / "report.html")
        if per_strategy:
            for run in runs:
                write_runs_report(collect_runs([run]), run.path / "report.html")
    for o in outcomes:
        o.token_times = o.steps = None  # tens of MB each for a long run: not needed after


def _report_run(outcome: RunOutcome, group: Path, repeat: dict[str, Any] | None) -> RunData:
    """The report's `RunData` of a finished run (its folder renamed whole)."""
    run = RunData(path=outcome.folder, group=group, label=outcome.label,
                  summary=outcome.summary, config=outcome.config, requests=outcome.requests,
                  repeat=repeat)
    if outcome.token_times is not None:
        run.token_times = outcome.token_times
    if outcome.steps is not None:
        run.steps = outcome.steps
    return run
