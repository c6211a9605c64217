"""`kvbench simulate`: the real engine, strategies and policies on a modelled GPU clock."""

from __future__ import annotations

from typing import Any

import click

from kvbench.cli.options import run_options, split_params
from kvbench.cli.run import execute
from kvbench.execution.threads import default_no_arrow_thread, default_one_blas_thread
from kvbench.session.run_options import RunOptions


@run_options("simulate")
@click.command(name="simulate")
def simulate_command(**params: Any) -> None:
    """Replay a workload with a modelled GPU step time instead of the model (no GPU needed).

    Admission, allocation, preemption and queueing are the real code's; only step times are
    modelled: a per-operation model of the --gpu preset (GEMMs, attention, all-reduce) whose
    constants are fitted to published GPU profiles; docs/simulator.md gives each constant's
    source and the error against it (presets without a profile are marked validated: false).
    """
    options, output = split_params(params)
    default_one_blas_thread()  # (no BLAS-heavy work here: kvbench/execution/threads.py)
    default_no_arrow_thread()  # (nor an allocator thread)
    execute(RunOptions.for_kind("simulate", **options), **output)


__all__ = ["simulate_command"]
