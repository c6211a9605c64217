"""Per-token times of a run for its report (`tokens.jsonl`, `kvbench.results.token_times`).
Folders written before the file existed have none: the charts that need it are left out.
A report reads each folder's file once (`RunData.token_times`), for every chart that uses it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.results.token_times import TokenTimes, pooled_gaps_s, read_token_arrays


def token_times(folder: Path) -> TokenTimes | None:
    """The folder's output-token times (seconds, run clock); None when it has no readable
    `tokens.jsonl`."""
    try:
        return read_token_arrays(folder)
    except KvbenchInputError:
        return None  # a damaged file costs the charts that need it, not the whole report


def inter_token_latencies_ms(tokens: TokenTimes) -> np.ndarray:
    """Every gap between consecutive output tokens of a sample, pooled in file order
    (docs/design.md, Metrics: ITL)."""
    return pooled_gaps_s(tokens.times_s, tokens.starts) * 1e3
