"""The run's token times: `tokens.parquet`, and the summary's inter-token latencies.

A sample's token times are ranges of its engine's step ends (`Sequence.token_steps`;
kvbench/core/step_times.py). The file's rows are gathered from those ranges a batch at a time
(a million requests hold hundreds of millions of tokens), and the same ranges give the gaps
per step rather than per token, as (gap, count) (`WeightedValues`).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.core.step_times import StepTimes
from kvbench.results.csv_table import arrow_array
from kvbench.results.token_times import TOKENS_SCHEMA, TokenTimes
from kvbench.results.weighted import WeightedValues

_SAMPLE = operator.attrgetter("sample_index")
# Tokens gathered at once (into the file's row groups, or `times_s`): an index of a whole
# run's tokens would be as large as the times themselves.
_CHUNK_TOKENS = 1 << 20


@dataclass(frozen=True)
class WrittenTokens:
    """What writing tokens.parquet hands back: the arrays the file reads back as (`times_s`
    gathered when first read) and every inter-token gap, ms, as
    `pooled_gaps_s` of the file read back gives them (in another order)."""

    times: TokenTimes
    itl_ms: WeightedValues


def write_token_file(handle: IO[bytes], requests: Iterable[Request],
                     sequences: dict[int, list[Sequence]]) -> WrittenTokens:
    """Write tokens.parquet to the binary `handle`: one row per sample of each request, in
    request order, samples in order (`request_id`, `sample`, `token_times_s`)."""
    ids, samples, seqs = _samples_in_order(requests, sequences)
    token_steps = list(map(_TOKEN_STEPS, seqs))
    num_steps = list(map(len, token_steps))
    logs = set(map(_STEP_TIMES, seqs)) - {None}  # (by identity)
    if len(logs) > 1:
        raise ValueError("a run's token times are the ends of one engine's steps")
    del seqs
    log = _LogValues.of(logs.pop() if logs else StepTimes())
    steps = np.fromiter(itertools.chain.from_iterable(token_steps), dtype=np.int64,
                        count=sum(num_steps)).reshape(-1, 2)
    del token_steps
    ranges = _Ranges.of(log, steps, np.array(num_steps, dtype=np.int64) // 2)
    values = log.values
    counts = np.bincount(ranges.owner, weights=ranges.stop - ranges.start,
                         minlength=len(ids)).astype(np.int64)
    source = RangeTimes(ranges, values)
    times = TokenTimes(np.array(ids, dtype=np.int64), np.array(samples, dtype=np.int64),
                       np.concatenate([[0], np.cumsum(counts)]), source=source)
    # Row groups of samples near in time share step ends: zstd packs them, where a
    # dictionary of a long run's step ends would outgrow its page.
    with pq.ParquetWriter(handle, TOKENS_SCHEMA, use_dictionary=False,
                          compression="zstd") as writer:
        for first, stop in chunk_bounds(np.diff(times.starts), _CHUNK_TOKENS):
            offsets = times.starts[first : stop + 1]
            writer.write_table(pa.table({
                "request_id": arrow_array(times.request_ids[first:stop]),
                "sample": arrow_array(times.samples[first:stop]),
                "token_times_s": pa.ListArray.from_arrays(
                    arrow_array((offsets - offsets[0]).astype(np.int32)),
                    arrow_array(source.gather(*source.ranges_of(first, stop))))},
                schema=TOKENS_SCHEMA))
    return WrittenTokens(times, source.gaps(1e3))


_TOKEN_STEPS = operator.attrgetter("token_steps")
_STEP_TIMES = operator.attrgetter("step_times")


def _samples_in_order(requests: Iterable[Request], sequences: dict[int, list[Sequence]],
                      ) -> tuple[list[int], list[int], list[Sequence]]:
    """The (request id, sample index, sequence) of each line, in request order, samples in
    order."""
    ids: list[int] = []
    samples: list[int] = []
    ordered: list[Sequence] = []
    for request in requests:
        for seq in sorted(sequences.get(request.request_id) or (), key=_SAMPLE):
            ids.append(int(request.request_id))
            samples.append(int(seq.sample_index))
            ordered.append(seq)
    return ids, samples, ordered


@dataclass(frozen=True)
class _LogValues:
    """The engine's `StepTimes` as the run's values: its step ends, then its decode
    cohort's."""

    steps: int  # the cohort's values start here
    cohort: np.ndarray  # the engine step of each cohort step
    values: np.ndarray

    @classmethod
    def of(cls, log: StepTimes) -> _LogValues:
        ends = np.array(log.ends, dtype=np.float64)  # a copy: the engine's array may grow
        cohort = np.array(log.cohort_steps, dtype=np.int64)
        return cls(ends.size, cohort, np.concatenate([ends, ends[cohort]]))


@dataclass(frozen=True)
class _Ranges:
    """Every sample's non-empty ranges, in file order, as `[start, stop)` of the run's values,
    and the sample each belongs to."""

    start: np.ndarray
    stop: np.ndarray
    owner: np.ndarray

    @classmethod
    def of(cls, log: _LogValues, steps: np.ndarray, num_ranges: np.ndarray) -> _Ranges:
        """From `token_steps` pairs (`steps`; sample i has the next `num_ranges[i]`): a
        cohort range `(~a, ~b)` is values `log.steps + a ...`."""
        owner = np.repeat(np.arange(num_ranges.size), num_ranges)
        start, stop = steps[:, 0], steps[:, 1]
        in_cohort = start < 0
        if in_cohort.any():
            start = np.where(in_cohort, log.steps + ~start, start)
            stop = np.where(in_cohort, log.steps + ~stop, stop)
        keep = stop > start  # an empty range holds no token and no gap
        if not keep.all():
            start, stop, owner = start[keep], stop[keep], owner[keep]
        if in_cohort.any():
            start, stop, owner = _merged(log, start, stop, owner)
        return cls(start, stop, owner)


def _merged(log: _LogValues, start: np.ndarray, stop: np.ndarray,
            owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same ranges, fewer: a cohort range whose steps are consecutive engine steps as
    that range of engine steps, and ranges of one sample that meet as one. A sample decoding
    while requests arrive leaves the cohort at every step that admits one and comes back, and
    each range is a gather of its own; the values (and so the times and the gaps)
    are the same either way."""
    engine = np.concatenate([np.arange(log.steps), log.cohort])  # each value's engine step
    first, last = engine[start], engine[stop - 1]
    steps = last - first == stop - 1 - start  # (cohort steps only grow)
    start = np.where(steps, first, start)
    stop = np.where(steps, last + 1, stop)
    new = np.ones(start.size, dtype=bool)
    new[1:] = (owner[1:] != owner[:-1]) | (start[1:] != stop[:-1])
    if new.all():
        return start, stop, owner
    ends = np.append(np.flatnonzero(new)[1:] - 1, start.size - 1)
    return start[new], stop[ends], owner[new]


class RangeTimes:
    """The tokens' times as ranges of the run's values (the report's `TokenTimes` source):
    per token only when `times_s` is asked for."""

    def __init__(self, ranges: _Ranges, values: np.ndarray) -> None:
        self.ranges = ranges
        self.values = values
        self._spans: np.ndarray | None = None

    def spans(self) -> np.ndarray:
        """How many ranges hold both value k and k + 1, for each k: +1 from a range's start,
        -1 from its last value on."""
        if self._spans is None:
            size = self.values.size
            edges = (np.bincount(self.ranges.start, minlength=size)
                     - np.bincount(self.ranges.stop - 1, minlength=size))
            self._spans = np.cumsum(edges)[:-1] if size else np.zeros(0, dtype=np.int64)
        return self._spans

    def gaps(self, scale: float) -> WeightedValues:
        """Every sample's gaps between consecutive times, each times `scale`: `(b - a) *
        scale` of the same two doubles the per-token arrays subtract."""
        values = self.values
        first, stop, owner = self.ranges.start, self.ranges.stop, self.ranges.owner
        within = np.diff(values) * scale if values.size >= 2 else np.empty(0)
        # Two ranges of one sample in a row: the gap from the first's last time to the next's.
        joined = owner[1:] == owner[:-1]
        across = (values[first[1:][joined]] - values[stop[:-1][joined] - 1]) * scale
        return WeightedValues(np.concatenate([within, across]),
                              np.concatenate([self.spans()[: within.size],
                                              np.ones(across.size, dtype=np.int64)]))

    def ranges_of(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The ranges (starts, stops) of samples `first:stop`."""
        lo, hi = np.searchsorted(self.ranges.owner, [first, stop])
        return self.ranges.start[lo:hi], self.ranges.stop[lo:hi]

    def gather(self, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
        """The values of ranges `start[i]:stop[i]`, laid end to end."""
        lengths = stop - start
        offsets = np.repeat(start - (np.cumsum(lengths) - lengths), lengths)
        return self.values[offsets + np.arange(offsets.size)]

    def times_s(self) -> np.ndarray:
        lengths = self.ranges.stop - self.ranges.start
        return np.concatenate([np.empty(0), *(
            self.gather(self.ranges.start[first:stop], self.ranges.stop[first:stop])
            for first, stop in chunk_bounds(lengths, _CHUNK_TOKENS))])

    def time_counts(self) -> WeightedValues:
        size = self.values.size
        edges = (np.bincount(self.ranges.start, minlength=size + 1)
                 - np.bincount(self.ranges.stop, minlength=size + 1))
        return WeightedValues(self.values, np.cumsum(edges)[:size])

    def gaps_s(self) -> WeightedValues:
        return self.gaps(1.0)


def chunk_bounds(lengths: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Consecutive (first, stop) index ranges of `lengths` (non-negative ints) holding about
    `size` in all each: a range ends with the element whose running total reaches the next
    multiple of `size`. Empty ranges are left out."""
    done = np.cumsum(lengths)
    total = int(done[-1]) if done.size else 0
    cuts = np.searchsorted(done, np.arange(size, total, size), side="right").tolist()
    return [(first, stop) for first, stop in zip([0, *cuts], [*cuts, len(lengths)],
                                                 strict=True) if stop > first]
