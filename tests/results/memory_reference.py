"""The time-weighted memory means computed from `steps.csv` with pandas: an independent
reference for the streaming `kvbench.results.step_writer.StepTotals` the runner uses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kvbench.results.step_writer import SPLIT_PARTS


def step_weights_s(steps: pd.DataFrame) -> np.ndarray:
    """Time each step's memory state lasted: until the next step starts (the last: its length)."""
    if steps.empty:
        return np.array([])
    starts = steps["t_s"].to_numpy(dtype=float)
    durations = steps["step_ms"].to_numpy(dtype=float) / 1e3
    nxt = np.append(starts[1:], starts[-1] + durations[-1])
    return np.maximum(nxt - starts, durations)


def memory_summary(steps: pd.DataFrame) -> dict[str, Any]:
    if steps.empty:
        return {"utilization_mean": None, "utilization_saturated": None,
                "breakdown_mean": {p: None for p in SPLIT_PARTS}}
    weights = step_weights_s(steps)
    token = steps["kv_token_bytes"].to_numpy(dtype=float)
    held = token + sum(
        steps[f"kv_{p}_bytes"].to_numpy(dtype=float) for p in ("reserved", "internal", "external")
    )
    arena = held + steps["kv_free_bytes"].to_numpy(dtype=float)

    def weighted(values, mask):
        w = weights[mask]
        return float(np.average(values[mask], weights=w)) if w.sum() > 0 else None

    has_held = held > 0
    util = np.divide(token, held, out=np.zeros_like(token), where=has_held)
    saturated = has_held & (steps["num_waiting"].to_numpy() > 0)
    breakdown = {
        p: weighted(steps[f"kv_{p}_bytes"].to_numpy(dtype=float) / arena, arena > 0)
        for p in SPLIT_PARTS
    }
    return {
        "utilization_mean": weighted(util, has_held),
        "utilization_saturated": weighted(util, saturated) if saturated.any() else None,
        "breakdown_mean": breakdown,
    }
