"""`kvbench sweep`: grids of runs, SLO capacity search, local or Ray execution, a report
(`driver.run_sweep` ties the modules up; docs/sweep.md)."""

from __future__ import annotations

import importlib
from typing import Any

# The names below load on first use: `import kvbench.sweep` (e.g. for `kvbench sweep
# --help`) must not pull in the driver, and with it torch and pandas.
_EXPORTS = {
    "ExecutorSpec": "config", "ReportSpec": "config", "SearchSpec": "config",
    "SweepSpec": "config", "load_sweep_config": "config",
    "SweepInterrupted": "driver", "SweepResult": "driver", "run_sweep": "driver",
    "load_sweep_folder": "sweep_folder",
    "metric_column": "table", "timing_free": "table",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvbench.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kvbench.sweep.{module}"), name)

