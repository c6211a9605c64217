"""The run's per-token times read back: `tokens.parquet`, or an older folder's `tokens.jsonl`
(results/README.md, tokens.parquet).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from kvbench.errors import KvbenchInputError
from kvbench.results.weighted import WeightedValues

if TYPE_CHECKING:
    from kvbench.results.token_file import RangeTimes

TOKENS_FILE = "tokens.parquet"
JSONL_TOKENS_FILE = "tokens.jsonl"  # what folders written before tokens.parquet hold
TOKENS_SCHEMA = pa.schema([("request_id", pa.int64()), ("sample", pa.int64()),
                           ("token_times_s", pa.list_(pa.float64()))])


class TokenTimes:
    """A token file read into arrays: sample i's times are
    `times_s[starts[i]:starts[i + 1]]`, belonging to `request_ids[i]`, sample `samples[i]`.
    `times_s` is given, or made by `source` (a run's, in memory) when first read;
    `time_counts` and `gaps_s` give the same multisets as values with counts, which a source
    makes per step without the per-token array (a million-request run's is GBs)."""

    __slots__ = ("request_ids", "samples", "starts", "_times_s", "_source")

    def __init__(self, request_ids: np.ndarray, samples: np.ndarray, starts: np.ndarray,
                 times_s: np.ndarray | None = None, *, source: RangeTimes | None = None,
                 ) -> None:
        if (times_s is None) == (source is None):
            raise ValueError("TokenTimes takes its times or a source of them, not both")
        self.request_ids = request_ids
        self.samples = samples
        self.starts = starts
        self._times_s = times_s
        self._source = source

    @property
    def times_s(self) -> np.ndarray:
        """Every token's time (seconds, run clock), sample after sample."""
        if self._times_s is None:
            self._times_s = self._source.times_s()
        return self._times_s

    @property
    def in_memory(self) -> bool:
        """Whether these times come from a run in memory (`source`) rather than a file: then
        `time_counts` and `gaps_s` are compact, and `times_s` is made only when read."""
        return self._source is not None

    def time_counts(self) -> WeightedValues:
        """Every token's time, as values with how many tokens have each (a histogram of
        `times_s` is the histogram of the values weighted by the counts)."""
        if self._times_s is None:
            return self._source.time_counts()
        return WeightedValues(self._times_s, np.ones(self._times_s.size, dtype=np.int64))

    def gaps_s(self) -> WeightedValues:
        """`pooled_gaps_s(times_s, starts)` (each sample's inter-token gaps, seconds), as
        values with counts: the same multiset of doubles."""
        if self._times_s is None:
            return self._source.gaps_s()
        gaps = pooled_gaps_s(self._times_s, self.starts)
        return WeightedValues(gaps, np.ones(gaps.size, dtype=np.int64))

    def sample_times(self) -> list[np.ndarray]:
        """Each sample's times, in file order (views into `times_s`)."""
        return np.split(self.times_s, self.starts[1:-1]) if len(self.request_ids) else []

    def __repr__(self) -> str:
        return f"TokenTimes({len(self.request_ids)} samples, {int(self.starts[-1])} times)"


def tokens_path(folder: Path) -> Path | None:
    """The folder's token file (`tokens.parquet`, or an older folder's `tokens.jsonl`); None
    when it has neither."""
    for name in (TOKENS_FILE, JSONL_TOKENS_FILE):
        if (path := Path(folder) / name).is_file():
            return path
    return None


def read_token_arrays(folder: Path) -> TokenTimes | None:
    """The folder's token times as arrays; None when the folder has no token file (written
    by an older kvbench). A file that cannot be read raises KvbenchInputError."""
    path = tokens_path(folder)
    if path is None:
        return None
    try:
        table = _read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise KvbenchInputError(f"cannot read {path}: {err}") from None
    times = table.column("token_times_s").combine_chunks()
    if times.null_count:
        raise KvbenchInputError(f"cannot read {path}: a row without token_times_s")
    offsets = times.offsets.to_numpy()
    samples = table.column("sample").fill_null(0)
    return TokenTimes(table.column("request_id").to_numpy(), samples.to_numpy(),
                      (offsets - offsets[0]).astype(np.int64),
                      times.flatten().to_numpy(zero_copy_only=False))


def _read_table(path: Path) -> pa.Table:
    if path.name == JSONL_TOKENS_FILE:
        import pyarrow.json as pa_json  # (an older folder's file only)

        return pa_json.read_json(path, pa_json.ReadOptions(block_size=1 << 26),
                                 pa_json.ParseOptions(explicit_schema=TOKENS_SCHEMA,
                                                      unexpected_field_behavior="ignore"))
    import pyarrow.parquet as pq  # (only to read a folder back: a run writes, in token_file)

    return pq.read_table(path, schema=TOKENS_SCHEMA)


def read_token_times(folder: Path) -> dict[int, list[list[float]]] | None:
    """request id -> each sample's token times (seconds); None when the folder has no file
    (written by an older kvbench)."""
    arrays = read_token_arrays(folder)
    if arrays is None:
        return None
    out: dict[int, list[list[float]]] = {}
    for request_id, times in zip(arrays.request_ids.tolist(), arrays.sample_times(),
                                 strict=True):
        out.setdefault(request_id, []).append(times.tolist())
    return out


def token_gaps_s(times: list[float]) -> list[float]:
    """Every gap between consecutive output tokens of one sample (docs/design.md, ITL)."""
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def pooled_gaps_s(times_s: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """`token_gaps_s` of every sample, pooled in order, for samples laid end to end in one
    array (sample i is `times_s[starts[i]:starts[i + 1]]`): one numpy pass over millions."""
    if times_s.size < 2:
        return np.empty(0)
    gaps = np.diff(times_s)
    # The gap from one sample's last token to the next sample's first is no ITL.
    across = np.asarray(starts)[1:-1] - 1
    keep = np.ones(gaps.size, dtype=bool)
    keep[across[(across >= 0) & (across < gaps.size)]] = False
    return gaps[keep]
