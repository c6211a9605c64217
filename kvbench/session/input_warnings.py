"""Warnings on options that a session accepts but that do not do what they seem to: an option
the runs ignore, or a value that makes the run far longer than it can have been meant to be.
Each is one line for the CLI's warning path (printed even under `--quiet`)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from kvbench.core.engine_kind import EngineKind
from kvbench.session.run_config import RunConfig
from kvbench.session.run_options import RunOptions, option_fields
from kvbench.strategies import reads_option
from kvbench.workloads import detect_trace_format, is_trace

# A replay whose arrivals spread wider than this waits, in real time, longer than any
# benchmark is meant to.
LONG_REPLAY_S = 24 * 3600.0


def _long_duration(seconds: float) -> str:
    """`31.7 years`, `3.5 days`: a span longer than a day, in the largest unit that fits."""
    for unit, size_s in (("years", 365.25 * 86400), ("days", 86400.0)):
        if seconds >= size_s:
            return f"{seconds / size_s:,.1f} {unit}"
    return f"{seconds / 3600:.1f} hours"


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def input_warnings(options: RunOptions, runs: Sequence[RunConfig],
                   prepared: Sequence[Any]) -> list[str]:
    """One line per ignored or runaway option; `prepared` holds (engine plan, workload) per
    run."""
    notes: list[str] = []
    defaults = option_fields()
    if options.block_size != defaults["block_size"].default and not any(
            reads_option(run.engine.strategy, "block_size") for run in runs):
        notes.append(f"--block-size {options.block_size} is ignored: no strategy listed "
                     "uses blocks (contiguous reserves whole ranges)")
    trace = is_trace(options.workload)
    if options.tokenizer is not None and not (
            trace and detect_trace_format(options.workload) == "sharegpt-json"):
        notes.append(f"--tokenizer {options.tokenizer} is ignored: only a ShareGPT JSON "
                     f"dataset is tokenized, {options.workload} gives token counts")
    rate = runs[0].replay.request_rate if runs else math.inf
    if options.burstiness != defaults["burstiness"].default and math.isinf(rate):
        notes.append(f"--burstiness {options.burstiness:g} is ignored: it shapes the gaps of "
                     "--request-rate arrivals, and no rate is given")
    simulated = all(run.executor.kind is EngineKind.SIMULATED for run in runs)
    cores = usable_cores()
    if not simulated and options.cpu_threads > cores:
        notes.append(f"--cpu-threads {options.cpu_threads} is more than the {cores} cores "
                     "this process may use: the threads take turns and every CPU timing "
                     f"is slower than with --cpu-threads {cores}")
    if not prepared:
        return notes
    requests = prepared[0][1].requests
    if options.warmup > len(requests):
        notes.append(f"--warmup {options.warmup} runs more warm-up requests than the "
                     f"{len(requests)} measured ones; a batch's worth warms the engine up")
    span_s = max((r.arrival_s for r in requests), default=0.0)
    if options.time_scale != defaults["time_scale"].default and span_s == 0:
        notes.append(f"--time-scale {options.time_scale:g} is ignored: every request of the "
                     "workload arrives at t = 0, there is no time to scale")
    if not simulated and span_s > LONG_REPLAY_S:
        scale = f" (--time-scale {options.time_scale:g})" if options.time_scale != 1 else ""
        notes.append(f"the last request arrives {_long_duration(span_s)} after the "
                     f"first{scale}: the run replays arrivals in real time")
    return notes
