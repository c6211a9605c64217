"""Per-token times of a run, when its folder has them (`tokens.jsonl`, one JSON object per
request sample: `{"request_id": 3, "sample": 0, "token_times_s": [0.51, 0.53, ...]}`, see
results/README.md). Folders written before the file existed have none: the charts that need
it are left out of their report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TOKENS_FILE = "tokens.jsonl"


def token_times(folder: Path) -> list[np.ndarray] | None:
    """Each request sample's output-token times (seconds, run clock); None when the folder
    has no readable `tokens.jsonl`."""
    path = Path(folder) / TOKENS_FILE
    if not path.is_file():
        return None
    samples = []
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                samples.append(np.asarray(json.loads(line)["token_times_s"], dtype=float))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged file costs the charts that need it, not the whole report
    return samples


def inter_token_latencies_ms(samples: list[np.ndarray]) -> np.ndarray:
    """Every gap between consecutive output tokens of a sample, pooled (docs/design.md,
    Metrics: ITL)."""
    gaps = [np.diff(times) for times in samples if times.size > 1]
    return np.concatenate(gaps) * 1e3 if gaps else np.empty(0)
