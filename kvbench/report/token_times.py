"""Per-token times of a run for its report (`tokens.jsonl`, `kvbench.bench.token_times`).
Folders written before the file existed have none: the charts that need it are left out."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvbench.bench.token_times import read_token_times
from kvbench.errors import KvbenchInputError


def token_times(folder: Path) -> list[np.ndarray] | None:
    """Each request sample's output-token times (seconds, run clock); None when the folder
    has no readable `tokens.jsonl`."""
    try:
        by_request = read_token_times(folder)
    except KvbenchInputError:
        return None  # a damaged file costs the charts that need it, not the whole report
    if by_request is None:
        return None
    return [np.asarray(times, dtype=float)
            for samples in by_request.values() for times in samples]


def inter_token_latencies_ms(samples: list[np.ndarray]) -> np.ndarray:
    """Every gap between consecutive output tokens of a sample, pooled (docs/design.md,
    Metrics: ITL)."""
    gaps = [np.diff(times) for times in samples if times.size > 1]
    return np.concatenate(gaps) * 1e3 if gaps else np.empty(0)
