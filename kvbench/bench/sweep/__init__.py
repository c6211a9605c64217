"""`kvbench sweep`: grids of runs, SLO capacity search, local or Ray execution, a report.

- `config`: `SweepSpec` and the TOML sweep file; `options`: which run options can be axes;
- `grid`: the points (a `RunConfig` and a stable id each); `point`: running one point;
- `executor`, `local`, `ray_executor`: where points run;
- `capacity`: bisection for the SLO capacity; `slo`: SLO targets on percentiles;
- `table`: `points.csv`; `report`: `report.html`; `driver`: `run_sweep`, which ties them up.
"""

from kvbench.bench.sweep.config import (
    ExecutorSpec,
    ReportSpec,
    SearchSpec,
    SweepSpec,
    load_sweep_config,
)
from kvbench.bench.sweep.driver import SweepInterrupted, SweepResult, load_sweep_folder, run_sweep
from kvbench.bench.sweep.table import metric_column, timing_free

__all__ = [
    "ExecutorSpec",
    "ReportSpec",
    "SearchSpec",
    "SweepInterrupted",
    "SweepResult",
    "SweepSpec",
    "load_sweep_config",
    "load_sweep_folder",
    "metric_column",
    "run_sweep",
    "timing_free",
]
