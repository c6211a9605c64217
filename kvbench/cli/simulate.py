"""`kvbench simulate`: the real engine, strategies and policies on a modelled GPU clock."""

from __future__ import annotations

from typing import Any

import click

from kvbench.cli import execute_runs, run_options
from kvbench.errors import KvbenchInputError


@click.command(name="simulate")
@run_options(dtype_default="bfloat16")
@click.option("--gpu", default="a100-80gb", show_default=True,
              help="GPU preset: a100-40gb, a100-80gb, h100-80gb, h200, l4, rtx-4090")
def simulate_command(gpu: str, **params: Any) -> None:
    """Replay a workload with a roofline cost model instead of the model (no GPU needed).

    Admission, allocation, preemption and queueing are the real code's; only step times are
    modelled (peak FLOP/s and HBM bandwidth of the --gpu preset, unvalidated constants).
    """
    from kvbench.execution.gpus import GPU_PRESETS

    if gpu not in GPU_PRESETS:
        raise KvbenchInputError(f"unknown --gpu {gpu!r} (presets: {', '.join(GPU_PRESETS)})")
    params.setdefault("device", "cpu")
    params.setdefault("attention_backend", "torch")
    execute_runs(params, engine_kind="simulated", gpu=gpu)
