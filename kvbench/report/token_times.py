"""Per-token times of a run for its report (`tokens.parquet`, or an older folder's
`tokens.jsonl`), read once per folder (`RunData.token_times`); without them the charts that
need them are left out."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.results.token_times import TokenTimes, pooled_gaps_s, read_token_arrays


def token_times(folder: Path) -> TokenTimes | None:
    """The folder's output-token times (seconds, run clock); None when it has no readable
    token file."""
    try:
        return read_token_arrays(folder)
    except KvbenchInputError:
        return None  # a damaged file costs the charts that need it, not the whole report


def inter_token_latencies_ms(tokens: TokenTimes) -> np.ndarray:
    """Every gap between consecutive output tokens of a sample, pooled in file order
    (docs/design.md, Metrics: ITL)."""
    return pooled_gaps_s(tokens.times_s, tokens.starts) * 1e3


def sorted_inter_token_gaps_s(tokens: TokenTimes) -> np.ndarray:
    """The gaps of `inter_token_latencies_ms` in seconds, ascending, NaN left out. A long run
    has millions: they are computed into one array and sorted in place, where filtering and
    sorting copies would cost as much again (fresh memory is dear on a busy machine)."""
    times = tokens.times_s
    if times.size < 2:
        return np.empty(0)
    gaps = np.diff(times)
    # The gap from one sample's last token to the next sample's first is no ITL: NaN, which
    # the sort puts last, with any NaN gap, and the slice below drops.
    across = np.asarray(tokens.starts)[1:-1] - 1
    gaps[across[(across >= 0) & (across < gaps.size)]] = np.nan
    gaps.sort()
    return gaps[: np.searchsorted(gaps, np.nan)]
