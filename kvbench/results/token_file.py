"""`tokens.jsonl` written from the engines' step ends, a step's time formatted once.

A sequence's token times are the ends of the steps it sampled in, held as ranges of its
engine's `StepTimes` (`Sequence.token_steps`; kvbench/core/step_times.py): a range of engine
steps `(start, stop)`, or of the engine's decode cohort steps `(~start, ~stop)`. So the file
needs each step end's text once: every end is formatted into one text, each followed by a
comma (`token_times.value_text`, which formats them as integer microseconds), then the decode
cohort's ends (`ends[cohort_steps]`) the same way after them, and a range of either kind is
one slice of that text. A sample's line is its prefix and the slices of its ranges: no time
is formatted, rounded or copied per token (a million requests hold about 330 million), and
the text each range needs is exactly what formatting its times one by one gives (the format
is per value: `json.dumps` of a list is its values' texts joined by commas).

The same ranges describe the rest per step rather than per token:

- the inter-token latencies: within a range, the gaps are differences of consecutive values
  of that text's times, each counted once per range that spans it (a running sum of +1 at
  a range's start and -1 at its last value); between two ranges of one sample, one gap
  each. `WeightedValues` holds them as (gap, count), from which the summary's figures come
  without expanding them; every gap is the very double the per-token arrays gave (`(b - a)
  * 1e3` of the same two times);
- the report's times (`TokenTimes.times_s`, what reading the file back gives): gathered from
  the rounded step ends only if something reads them.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

import numpy as np

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.core.step_times import StepTimes
from kvbench.results.gather_write import chunk_bounds, write_slices
from kvbench.results.token_times import TokenTimes, value_text
from kvbench.results.weighted import WeightedValues

_SAMPLE = operator.attrgetter("sample_index")


@dataclass(frozen=True)
class WrittenTokens:
    """What writing tokens.jsonl hands back: the arrays the file reads back as (`times_s`
    gathered when first read) and every inter-token gap of the unrounded times, ms, as
    `metrics.inter_token_latencies_ms` gives them (in another order)."""

    times: TokenTimes
    itl_ms: WeightedValues


def write_token_file(handle: IO[bytes], requests: Iterable[Request],
                     sequences: dict[int, list[Sequence]]) -> WrittenTokens:
    """Write tokens.jsonl to the binary `handle`: one line per sample of each request, in
    request order, samples in order, each `json.dumps` of `{"request_id", "sample",
    "token_times_s"}` with separators `,` and `:`, the times rounded with `round(t, 6)`.

    The file is cut into pieces of one text: each line's head (its ids), and each of its
    ranges' values with their commas (the last range's without). The samples and their
    ranges are gathered by maps over them; the pieces are placed with numpy and copied
    into the file's buffer one after another (`gather_write`). A sample decoding while
    requests arrive has dozens of ranges: it leaves the decode cohort at every step that
    admits a prompt (fewer once merged)."""
    ids, samples, seqs = _samples_in_order(requests, sequences)
    heads = list(map(_HEAD.__mod__, zip(ids, samples, strict=True)))
    token_steps = list(map(_TOKEN_STEPS, seqs))
    num_steps = list(map(len, token_steps))
    # Each sample's StepTimes (an engine's: one for all; a sequence's own where its tokens'
    # times are not step ends, `generate()`'s), as an index.
    step_logs, sample_log = _logs_of(list(map(_STEP_TIMES, seqs)), num_steps)
    del seqs
    texts = [_log_text(log) for log in step_logs]
    # Every sample's token_steps end to end (fromiter: the ints are scattered over the heap,
    # a cache miss each; numpy's list path took 52 ms for the 960,000 of 10,000 ShareGPT
    # requests, fromiter 37 ms).
    steps = np.fromiter(itertools.chain.from_iterable(token_steps), dtype=np.int64,
                        count=sum(num_steps)).reshape(-1, 2)
    del token_steps
    ranges = _Ranges.of(texts, steps, np.array(num_steps, dtype=np.int64) // 2, sample_log)
    _write_pieces(handle, texts, heads, ranges)
    values = np.concatenate([t.values for t in texts]) if texts else np.empty(0)
    rounded = np.concatenate([t.rounded for t in texts]) if texts else np.empty(0)
    return _written(np.array(ids, dtype=np.int64), np.array(samples, dtype=np.int64),
                    ranges, values, rounded)


_HEAD = b'{"request_id":%d,"sample":%d,"token_times_s":['
_TOKEN_STEPS = operator.attrgetter("token_steps")
_STEP_TIMES = operator.attrgetter("step_times")
_REQUEST_ID = operator.attrgetter("request_id")
_FIRST = operator.itemgetter(0)


def _samples_in_order(requests: Iterable[Request], sequences: dict[int, list[Sequence]],
                      ) -> tuple[list[int], list[int], list[Sequence]]:
    """The (request id, sample index, sequence) of each line, in request order, samples in
    order. When every request sent has one sample (nearly always), by maps that run in C."""
    requests = list(requests)
    found = list(map(sequences.get, map(_REQUEST_ID, requests)))
    sent = list(itertools.compress(requests, found))  # (those with sequences)
    found = list(filter(None, found))
    if found and set(map(len, found)) == {1}:
        seqs = list(map(_FIRST, found))
        return (list(map(int, map(_REQUEST_ID, sent))), list(map(int, map(_SAMPLE, seqs))),
                seqs)
    ids: list[int] = []
    samples: list[int] = []
    ordered: list[Sequence] = []
    for request, seqs in zip(sent, found, strict=True):
        for seq in (seqs if len(seqs) == 1 else sorted(seqs, key=_SAMPLE)):
            ids.append(int(request.request_id))
            samples.append(int(seq.sample_index))
            ordered.append(seq)
    return ids, samples, ordered


def _logs_of(logs: list[StepTimes | None], num_steps: list[int],
             ) -> tuple[list[StepTimes], np.ndarray]:
    """The distinct StepTimes of the samples with tokens, and each sample's index into them
    (0 for a sample without tokens)."""
    one = set(logs)  # (by identity, in C)
    one.discard(None)
    if len(one) <= 1:  # an engine's, or none
        return list(one), np.zeros(len(logs), dtype=np.int64)
    distinct_by_id = {id(log): log for log, n in zip(logs, num_steps, strict=True) if n}
    index = {key: i for i, key in enumerate(distinct_by_id)}
    distinct = list(distinct_by_id.values())
    return (distinct,
            np.array([index[id(log)] if n else 0 for log, n in zip(logs, num_steps, strict=True)],
                     dtype=np.int64))


@dataclass(frozen=True)
class _LogText:
    """One `StepTimes`' values, its step ends then its decode cohort's, and their text:
    value `k` reads `text[pos[k] : pos[k + 1] - 1]`, its comma at `pos[k + 1] - 1`."""

    steps: int  # the cohort's values start here
    cohort: np.ndarray  # the engine step of each cohort step
    values: np.ndarray
    rounded: np.ndarray
    text: bytes
    pos: np.ndarray


def _log_text(log: StepTimes) -> _LogText:
    ends = np.array(log.ends, dtype=np.float64)  # a copy: the engine's array may grow
    cohort = np.array(log.cohort_steps, dtype=np.int64)
    values = np.concatenate([ends, ends[cohort]])
    text, pos, rounded = value_text(values)
    return _LogText(ends.size, cohort, values, rounded, text, pos)


@dataclass(frozen=True)
class _Ranges:
    """Every sample's non-empty ranges, in file order, as `[start, stop)` of the run's values
    (each log's laid end to end), and the sample each belongs to."""

    start: np.ndarray
    stop: np.ndarray
    owner: np.ndarray
    num_samples: int

    @classmethod
    def of(cls, texts: list[_LogText], steps: np.ndarray, num_ranges: np.ndarray,
           sample_log: np.ndarray) -> _Ranges:
        """From `token_steps` pairs (`steps`; sample i has the next `num_ranges[i]`, of log
        `sample_log[i]`): a cohort range `(~a, ~b)` is values `cohort_at + a ...`."""
        owner = np.repeat(np.arange(num_ranges.size), num_ranges)
        log = sample_log[owner]
        bases = np.cumsum([0] + [t.values.size for t in texts])[:-1]
        cohort_at = np.array([t.steps for t in texts], dtype=np.int64)
        start, stop = steps[:, 0], steps[:, 1]
        in_cohort = start < 0
        offset = bases[log] if len(texts) > 1 else 0
        if in_cohort.any():
            shift = cohort_at[log] if len(texts) > 1 else cohort_at[0]
            start = np.where(in_cohort, shift + ~start, start)
            stop = np.where(in_cohort, shift + ~stop, stop)
        start, stop = start + offset, stop + offset
        keep = stop > start  # an empty range holds no token and no gap
        if not keep.all():
            start, stop, owner = start[keep], stop[keep], owner[keep]
        if in_cohort.any():
            start, stop, owner = _merged(texts, start, stop, owner)
        return cls(start, stop, owner, num_ranges.size)


def _merged(texts: list[_LogText], start: np.ndarray, stop: np.ndarray,
            owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same ranges, fewer: a cohort range whose steps are consecutive engine steps as
    that range of engine steps, and ranges of one sample that meet as one. A sample decoding
    while requests arrive leaves the cohort at every step that admits one and comes back, and
    each range is a piece of its line; the values (and so the text, the times and the gaps)
    are the same either way."""
    # Each value's engine step, as an index of the run's values.
    engine = np.concatenate([np.concatenate([np.arange(t.steps), t.cohort]) + base
                             for t, base in zip(texts, np.cumsum(
                                 [0] + [t.values.size for t in texts]), strict=False)])
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


def _write_pieces(handle: IO[bytes], texts: list[_LogText], heads: list[bytes],
                  ranges: _Ranges) -> None:
    """The lines: for each sample its head (after the previous line's end), then its
    ranges' text, each with its values' commas but the last."""
    if not heads:
        return
    pos = np.concatenate([*(t.pos[:-1] + at for t, at in zip(
        texts, np.cumsum([0] + [len(t.text) for t in texts]), strict=False)),
        [sum(len(t.text) for t in texts)]]).astype(np.int64)
    ends = [b""] + [b"]}\n"] * (len(heads) - 1)
    head_text = b"".join(map(operator.add, ends, heads))
    head_len = np.fromiter(map(len, heads), dtype=np.int64, count=len(heads)) + 3
    head_len[0] -= 3
    head_stop = np.cumsum(head_len) + pos[-1]
    text = b"".join([*(t.text for t in texts), head_text])
    del head_text
    owner = ranges.owner
    last = np.ones(owner.size, dtype=bool)  # the last range of its sample: no comma after
    last[:-1] = owner[1:] != owner[:-1]
    before = np.searchsorted(owner, np.arange(ranges.num_samples))  # ranges of earlier samples
    at_head = np.arange(ranges.num_samples) + before
    lo = np.empty(owner.size + len(heads), dtype=np.int64)
    hi = np.empty_like(lo)
    lo[at_head], hi[at_head] = head_stop - head_len, head_stop
    is_range = np.ones(lo.size, dtype=bool)
    is_range[at_head] = False
    lo[is_range], hi[is_range] = pos[ranges.start], pos[ranges.stop] - last
    write_slices(handle, text, lo, hi)
    handle.write(b"]}\n")


def _written(ids: np.ndarray, samples: np.ndarray, ranges: _Ranges, values: np.ndarray,
             rounded: np.ndarray) -> WrittenTokens:
    """The arrays and ITLs of samples whose times are `ranges` of `values`."""
    counts = np.bincount(ranges.owner, weights=ranges.stop - ranges.start,
                         minlength=ids.size).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    source = _RangeTimes(ranges, rounded, int(starts[-1]))
    return WrittenTokens(TokenTimes(ids, samples, starts, source=source),
                         source.gaps(values, 1e3))


class _RangeTimes:
    """The tokens' times as ranges of the run's values (the report's `TokenTimes` source):
    per token only when `times_s` is asked for."""

    def __init__(self, ranges: _Ranges, rounded: np.ndarray, total: int) -> None:
        self.ranges = ranges
        self.rounded = rounded
        self.total = total
        self._spans: np.ndarray | None = None

    def spans(self) -> np.ndarray:
        """How many ranges hold both value k and k + 1, for each k: +1 from a range's start,
        -1 from its last value on."""
        if self._spans is None:
            size = self.rounded.size
            edges = (np.bincount(self.ranges.start, minlength=size)
                     - np.bincount(self.ranges.stop - 1, minlength=size))
            self._spans = np.cumsum(edges)[:-1] if size else np.zeros(0, dtype=np.int64)
        return self._spans

    def gaps(self, values: np.ndarray, scale: float) -> WeightedValues:
        """Every sample's gaps between consecutive times of `values` (the run's values, or
        their rounding), each times `scale`: `(b - a) * scale` of the same two doubles the
        per-token arrays subtract."""
        first, stop, owner = self.ranges.start, self.ranges.stop, self.ranges.owner
        within = np.diff(values) * scale if values.size >= 2 else np.empty(0)
        # Two ranges of one sample in a row: the gap from the first's last time to the next's.
        joined = owner[1:] == owner[:-1]
        across = (values[first[1:][joined]] - values[stop[:-1][joined] - 1]) * scale
        return WeightedValues(np.concatenate([within, across]),
                              np.concatenate([self.spans()[: within.size],
                                              np.ones(across.size, dtype=np.int64)]))

    def times_s(self) -> np.ndarray:
        return _gather(self.rounded, np.stack([self.ranges.start, self.ranges.stop], axis=1),
                       self.total)

    def time_counts(self) -> WeightedValues:
        size = self.rounded.size
        edges = (np.bincount(self.ranges.start, minlength=size + 1)
                 - np.bincount(self.ranges.stop, minlength=size + 1))
        return WeightedValues(self.rounded, np.cumsum(edges)[:size])

    def gaps_s(self) -> WeightedValues:
        return self.gaps(self.rounded, 1.0)


def _gather(values: np.ndarray, bounds: np.ndarray, total: int) -> np.ndarray:
    """The ranges `bounds` of `values` laid end to end, about `_CHUNK_TOKENS` at a time (an
    index of a whole run's tokens would be as large as the result)."""
    out = np.empty(total)
    lengths = bounds[:, 1] - bounds[:, 0]
    at = 0
    for first, stop in chunk_bounds(lengths, _CHUNK_TOKENS):
        batch, size = lengths[first:stop], int(lengths[first:stop].sum())
        offsets = np.repeat(bounds[first:stop, 0] - (np.cumsum(batch) - batch), batch)
        out[at : at + size] = values[offsets + np.arange(size)]
        at += size
    return out


_CHUNK_TOKENS = 1 << 20


__all__ = ["WrittenTokens", "write_token_file"]
