"""HTML reports: `write_report` over results folders (`kvbench report`), `write_runs_report`
over runs already in memory (the session that ran them); the folders: `kvbench.report.runs`."""

from __future__ import annotations

from pathlib import Path

from kvbench.report.page import build_page
from kvbench.report.runs import RunSet, load_runs
from kvbench.results.files import atomic_write_bytes


def write_report(run_dirs: list[Path], out_path: Path) -> Path:
    """Write one HTML report over the folders `run_dirs` to `out_path`; returns the path."""
    return write_runs_report(load_runs([Path(d) for d in run_dirs]), out_path)


def write_runs_report(runset: RunSet, out_path: Path) -> Path:
    """Write one HTML report over `runset` (`kvbench.report.runs.collect_runs`) to
    `out_path`; returns the path written."""
    out_path = Path(out_path)
    atomic_write_bytes(out_path, build_page(runset))
    return out_path
