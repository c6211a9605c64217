"""`kvbench simulate`: the real engine, strategies and policies on a modelled GPU clock."""

from __future__ import annotations

from kvbench.cli.run import session_command


def _one_thread() -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.execution.threads import default_no_arrow_thread, default_one_blas_thread

    default_one_blas_thread()  # (no BLAS-heavy work here: kvbench/execution/threads.py)
    default_no_arrow_thread()  # (nor an allocator thread)


simulate_command = session_command("simulate", """Replay a workload with a modelled GPU step
time instead of the model (no GPU needed).

Admission, allocation, preemption and queueing are the real code's; only step times are
modelled: a per-operation model of the --gpu preset (GEMMs, attention, all-reduce) whose
constants are fitted to published GPU profiles; docs/simulator.md gives each constant's source
and the error against it (presets without a profile are marked validated: false).
""", before=_one_thread)
