"""`tokens.jsonl`: every output token's time, one line per sample of a request.

Kept so that per-request inter-token latencies (vLLM's `itls`, `std_itl_ms`) can be rebuilt
from a results folder. One JSON object a line:
`{"request_id": 3, "sample": 0, "token_times_s": [0.512301, 0.530112, ...]}`, times on the
run's clock (the clock of `requests.csv`'s `arrival_s`), rounded to the microsecond.
See results/README.md.

A 10,000-request simulation holds ~4M token times: formatting or parsing them one Python float
at a time costs about a second each way. Both directions therefore work on whole
numpy arrays of integer microseconds. The text is exactly what `json.dumps` writes for
`round(t, 6)` (a value with at most 15 significant digits prints as its own decimal digits);
values outside the plain `123.456` form (negative, NaN, below 1e-4 s, which Python writes as
`1e-05`, or beyond 1e9 s) go through `json` itself. A run writes its file from the engine's
step ends, each formatted once (`kvbench.results.token_file`, through `value_text`); this
module formats and reads files back.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Protocol

import numpy as np

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.results.weighted import WeightedValues

TOKENS_FILE = "tokens.jsonl"

_US_PER_S = 1_000_000
# Integer microseconds printed by the array path: 1e-4 s (below it `repr` switches to an
# exponent) up to 1e9 s (15 digits: `repr` of the nearest double is those digits). 0 prints as
# "0.0".
_MIN_US, _MAX_US = 100, 10**15


def token_time_lines(requests: Iterable[Request],
                     sequences: dict[int, list[Sequence]]) -> list[str]:
    """One compact JSON line per sample of each request, in request order; each line is
    `json.dumps` of the sample's times rounded with `round(t, 6)` (separators `,` and `:`)."""
    return token_times_file(requests, sequences)[0]


def token_times_file(requests: Iterable[Request], sequences: dict[int, list[Sequence]],
                     ) -> tuple[list[str], TokenTimes]:
    """`token_time_lines`, and exactly what `read_token_arrays` gives for the file they make
    (each time is `round(t, 6)`): a session hands the arrays to its report instead of
    parsing the file back. A run writes the file itself with
    `kvbench.results.token_file.write_token_file`, which this reads into memory."""
    from kvbench.results.token_file import write_token_file  # (it imports this module)

    buffer = io.BytesIO()
    written = write_token_file(buffer, requests, sequences)
    return buffer.getvalue().decode("utf-8").splitlines(), written.times


def token_time_series(seqs: Seq[Sequence]) -> list[np.ndarray]:
    """Each sequence's token times (`Sequence.token_times_s`) as a float64 array, read from
    its engine's step ends in one copy per engine rather than a Python float per token: a
    sequence sampled in one stretch of steps gets a view of that stretch."""
    copies: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    out: list[np.ndarray] = []
    empty = np.empty(0)
    for seq in seqs:
        steps = seq.token_steps
        if not steps:
            out.append(empty)
            continue
        log = seq.step_times
        arrays = copies.get(id(log))
        if arrays is None:  # copies, not views: a view would pin the engine's growing arrays
            arrays = copies[id(log)] = (np.array(log.ends, dtype=np.float64),
                                        np.array(log.cohort_steps, dtype=np.int64))
        ends, cohort = arrays
        pieces = [ends[start:stop] if start >= 0 else ends[cohort[~start : ~stop]]
                  for start, stop in zip(steps[::2], steps[1::2], strict=True)]
        out.append(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
    return out


def value_text(values: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Each value as `json.dumps(round(t, 6))` writes it, followed by a comma, end to end;
    where each value's text starts (and the text's length last); and each value as
    `round(t, 6)` (`us / 1e6` is that double; a value the array path does not print is
    Python's own). The format is per value: `json.dumps` of a list is its values' texts
    joined by commas, so a slice of this text is the list of those values."""
    texts: list[bytes] = []
    pos = [np.zeros(1, dtype=np.int64)]
    parts: list[np.ndarray] = []
    at = 0
    for first in range(0, values.size, _CHUNK_VALUES):
        text, ends, part = _chunk_text(values[first : first + _CHUNK_VALUES])
        texts.append(text)
        pos.append(ends + at)
        parts.append(part)
        at += len(text)
    return (b"".join(texts), np.concatenate(pos),
            np.concatenate(parts) if parts else np.empty(0))


# Values formatted at once: the arrays of a batch stay in the CPU cache and in memory the
# allocator reuses (a 4M-value array at once spends as long in page faults).
_CHUNK_VALUES = 1 << 16


def _chunk_text(values: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    """`value_text` of a few values: the text, where each value's text ends (after its
    comma) and the rounded values."""
    us, plain = round_to_us(values)
    rounded = us / _US_PER_S
    text, comma_at = format_us_bytes(us)
    ends = comma_at + 1
    odd = np.flatnonzero(~plain)
    if odd.size:  # a value the array path does not print (NaN, negative, < 1e-4, >= 1e9 s)
        pieces: list[bytes] = []
        lengths = np.diff(ends, prepend=0)
        at = 0
        for i in odd.tolist():
            value = round(float(values[i]), 6)
            rounded[i] = value
            pieces += [text[at : ends[i - 1] if i else 0], json.dumps(value).encode(), b","]
            lengths[i] = len(pieces[-2]) + 1
            at = int(ends[i])
        pieces.append(text[at:])
        text, ends = b"".join(pieces), np.cumsum(lengths)
    return text, ends, rounded


def round_to_us(seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(`round(t, 6)` in integer microseconds, whether the array path prints the value)."""
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = seconds * _US_PER_S
        us = np.rint(scaled)
        # The product is rounded: a value whose exact scaled fraction may sit on .5 is rounded
        # by Python itself (exact halves, round half to even), as the reference does.
        near_half = np.abs(np.abs(scaled - us) - 0.5) <= 2 * np.spacing(np.abs(scaled))
        plain = np.isfinite(scaled) & ~np.signbit(seconds)
    for i in np.flatnonzero(near_half & plain):
        us[i] = np.rint(round(float(seconds[i]), 6) * _US_PER_S)
    plain &= (us == 0) | ((us >= _MIN_US) & (us < _MAX_US))
    return np.where(plain, us, 0).astype(np.int64), plain


def _words(tail: str, strip: str = "") -> np.ndarray:
    """Each number 0..999 as three digits and `tail`, packed into one little-endian uint32 (4
    characters); `strip` "leading" or "trailing" turns those zeros into NUL (a zero keeps
    one "0"). NUL characters are dropped when the text is packed."""
    words = np.zeros((1000, 4), dtype=np.uint8)
    for n in range(1000):
        text = f"{n:03d}"
        if strip == "leading":
            text = text.lstrip("0") or "0"
        elif strip == "trailing":
            text = text.rstrip("0") or "0"
        chars = [ord(c) for c in text + tail]
        words[n, : len(chars)] = chars
    return words.view("<u4").ravel()


_GROUP, _GROUP_LEADING = _words(""), _words("", "leading")  # 3 digits of the whole part
_UNITS, _UNITS_LEADING = _words("."), _words(".", "leading")  # its last 3 digits and "."
_MILLI, _MILLI_LAST = _words(""), _words(",", "trailing")  # first 3 decimals
_MICRO_LAST = _words(",", "trailing")  # last 3 decimals, when not all zero
_MICRO_LAST[0] = 0


def format_us_bytes(us: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Every value as `repr(us / 1e6)` followed by a comma, concatenated (ASCII bytes), and
    the index of each value's comma in the text."""
    n = us.size
    if n == 0:
        return b"", np.empty(0, dtype=np.int64)
    whole = us // _US_PER_S
    frac = us - whole * _US_PER_S
    groups = max(1, -(-len(str(int(whole.max()))) // 3))  # 3-digit groups of the whole part
    # A row of 4-character words per value; NUL characters are dropped at the end.
    rows = np.zeros((n, groups + 2), dtype="<u4")
    for g in range(groups - 1):  # the whole part's groups above its last 3 digits
        power = 1000 ** (groups - 1 - g)
        part = (whole // power) % 1000
        rows[:, g] = np.where(whole >= power * 1000, _GROUP[part],
                              np.where(whole >= power, _GROUP_LEADING[part], 0))
    units = whole % 1000
    rows[:, groups - 1] = np.where(whole >= 1000, _UNITS[units], _UNITS_LEADING[units])
    milli = frac // 1000
    micro = frac - milli * 1000
    rows[:, groups] = np.where(micro == 0, _MILLI_LAST[milli], _MILLI[milli])
    rows[:, groups + 1] = _MICRO_LAST[micro]
    chars = rows.view(np.uint8).reshape(-1)
    packed = chars[chars != 0]
    return packed.tobytes(), np.flatnonzero(packed == ord(","))


class TokenSource(Protocol):
    """Where a `TokenTimes` made in memory gets its per-token arrays, and their compact forms
    (`kvbench.results.token_file`)."""

    def times_s(self) -> np.ndarray: ...

    def time_counts(self) -> WeightedValues: ...

    def gaps_s(self) -> WeightedValues: ...


class TokenTimes:
    """A `tokens.jsonl` read into arrays: sample i's times are
    `times_s[starts[i]:starts[i + 1]]`, belonging to `request_ids[i]`, sample `samples[i]`.

    `times_s` is given, or made by `source` when first read: a run hands its report these
    arrays from memory (`kvbench.results.token_file`), and a million-request run's times are
    GBs (8 bytes a token). `time_counts` and `gaps_s` give what a chart of all the tokens
    needs as values with counts, which such a source makes per step (a few million values
    where the tokens are hundreds of millions) without the per-token array."""

    __slots__ = ("request_ids", "samples", "starts", "_times_s", "_source")

    def __init__(self, request_ids: np.ndarray, samples: np.ndarray, starts: np.ndarray,
                 times_s: np.ndarray | None = None, *, source: TokenSource | None = None,
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


_LINE = re.compile(rb'\{"request_id":(-?\d+),"sample":(\d+),"token_times_s":\[([0-9.,]*)\]\}')


def read_token_arrays(folder: Path) -> TokenTimes | None:
    """The folder's `tokens.jsonl` as arrays; None when the folder has no file (written by an
    older kvbench). A file that is not valid raises KvbenchInputError naming the line."""
    path = Path(folder) / TOKENS_FILE
    if not path.is_file():
        return None
    try:  # bytes: the numbers go to numpy as they are, without decoding 40 MB and back
        lines = path.read_bytes().splitlines()
    except OSError as err:
        raise KvbenchInputError(f"cannot read {path}: {err}") from None
    ids: list[int] = []
    samples: list[int] = []
    bodies: list[bytes] = []
    numbers: list[int] = []  # each body's line in the file, for errors
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        match = _LINE.fullmatch(line)
        if match is not None:  # the layout kvbench writes: its numbers are parsed below
            ids.append(int(match[1]))
            samples.append(int(match[2]))
            bodies.append(match[3])
            numbers.append(number)
            continue
        try:  # any other valid JSON line (spaces, other key order, exponents)
            row = json.loads(line)
            times = [float(t) for t in row["token_times_s"]]
            ids.append(int(row["request_id"]))
            samples.append(int(row.get("sample", 0)))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise KvbenchInputError(f"cannot read {path} line {number}: {err}") from None
        bodies.append(json.dumps(times, separators=(",", ":"))[1:-1].encode("ascii"))
        numbers.append(number)
    counts = np.array([body.count(b",") + 1 if body else 0 for body in bodies], dtype=np.int64)
    parts: list[np.ndarray] = []
    first = 0
    while first < len(bodies):  # in batches of lines, as they are written
        last, size = first, 0
        while last < len(bodies) and size < _CHUNK_VALUES:
            size += int(counts[last])
            last += 1
        parts.append(_parse_bodies(path, bodies[first:last], numbers[first:last], size))
        first = last
    times_s = np.concatenate(parts) if parts else np.empty(0)
    starts = np.concatenate([[0], np.cumsum(counts)])
    return TokenTimes(np.array(ids, dtype=np.int64), np.array(samples, dtype=np.int64),
                      starts, times_s)


def _parse_bodies(path: Path, bodies: list[bytes], numbers: list[int],
                  count: int) -> np.ndarray:
    """The numbers of several lines' `token_times_s`, in order."""
    parsed = _parse_decimals(b",".join(body for body in bodies if body), count)
    if parsed is not None:
        return parsed
    arrays = [np.empty(0)]  # a number outside the plain form: json parses, naming a bad line
    for body, number in zip(bodies, numbers, strict=True):
        try:
            arrays.append(np.asarray(json.loads(b"[" + body + b"]"), dtype=float))
        except (ValueError, TypeError) as err:
            raise KvbenchInputError(f"cannot read {path} line {number}: {err}") from None
    return np.concatenate(arrays)


def _parse_decimals(text: bytes, count: int) -> np.ndarray | None:
    """Comma-separated `123.456` numbers (at most 6 decimals, as kvbench writes them) as
    float64, each exactly what `float()` gives; None when any number has another form."""
    if count == 0:
        return np.empty(0)
    raw = np.frombuffer(text, dtype=np.uint8)
    digits = raw - ord("0")  # wraps around for ',' and '.'
    commas = np.flatnonzero(raw == ord(","))
    dots = np.flatnonzero(raw == ord("."))
    if commas.size + 1 != count or dots.size != count:
        return None
    if np.count_nonzero(digits < 10) + commas.size + dots.size != raw.size:
        return None
    starts = np.concatenate([[0], commas + 1])
    ends = np.concatenate([commas, [raw.size]])
    whole_len, frac_len = dots - starts, ends - dots - 1
    # One dot in each number (dots are sorted, so each lies in its own number), 1-9 digits
    # before it, no leading zero (JSON has none), 1-6 after it.
    if (whole_len.min() < 1 or whole_len.max() > 9 or frac_len.min() < 1
            or frac_len.max() > 6 or np.any((whole_len > 1) & (digits[starts] == 0))):
        return None
    us = np.zeros(count, dtype=np.int64)
    for j in range(1, int(whole_len.max()) + 1):  # the whole part, units digit first
        has = whole_len >= j
        us += np.where(has, digits[np.maximum(dots - j, 0)], 0).astype(np.int64) \
            * (_US_PER_S * 10 ** (j - 1))
    for j in range(1, int(frac_len.max()) + 1):
        has = frac_len >= j
        us += np.where(has, digits[np.minimum(dots + j, raw.size - 1)], 0).astype(np.int64) \
            * 10 ** (6 - j)
    # An integer below 2**53 divided by 1e6 is the double nearest the decimal: float()'s value.
    return us / _US_PER_S


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


__all__ = ["TOKENS_FILE", "TokenSource", "TokenTimes", "pooled_gaps_s", "token_time_series",
           "read_token_arrays", "read_token_times", "token_gaps_s", "token_time_lines",
           "token_times_file", "format_us_bytes", "round_to_us", "value_text"]
