"""HTML reports: `write_report(run_dirs, out_path)` (called after every `kvbench run`).

A run folder is one strategy's results (`summary.json`, `requests.csv`, `steps.csv`) or a
comparison folder (`comparison.json` and a subfolder per strategy), which expands into its
strategies. Folders of different runs (e.g. two git revisions) are shown side by side with
their differences. The page is self-contained: plotly.js is inlined once, nothing is fetched.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kvbench.report.page import build_page
from kvbench.report.runs import load_runs
from kvbench.results.files import atomic_write_text
from kvbench.results.token_times import TokenTimes


def write_report(run_dirs: list[Path], out_path: Path,
                 token_times: Mapping[Path, TokenTimes] | None = None) -> Path:
    """Write one HTML report over `run_dirs` to `out_path`; returns the path written.

    `token_times`: folders' `tokens.jsonl` already in memory, as `read_token_arrays` gives
    them (the session that just wrote them); the others are read from their files."""
    runset = load_runs([Path(d) for d in run_dirs], token_times)
    out_path = Path(out_path)
    atomic_write_text(out_path, build_page(runset))
    return out_path


__all__ = ["write_report"]
