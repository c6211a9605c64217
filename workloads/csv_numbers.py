"""Field values of a whole column at once, for the plain CSV reader (`csv_plain.py`).

Each reader takes the fields' byte ranges (spaces around them already left out) and gives
the values the row-by-row readers give (`trace_rows.count`, `trace_rows.seconds`,
`azure._timestamp_s`), bit for bit, or None when any field is not in the simple form it
knows: then the row-by-row reader reads the file and says what, if anything, is wrong. So
these accept a subset of what Python's `float()` and `datetime.fromisoformat` accept, and
never a text they refuse.
"""

from __future__ import annotations

import numpy as np

from kvbench.workloads.bounds import MAX_TRACE_TOKENS

ZERO, DOT, COLON, MINUS, PLUS = 48, 46, 58, 45, 43
# Integers of at most this many digits are below 2**53: exact as float64.
_EXACT_DIGITS = 15
_COUNT_DIGITS = len(str(MAX_TRACE_TOKENS))


def _digit_run(buf: np.ndarray, start: np.ndarray, end: np.ndarray, max_digits: int
               ) -> np.ndarray | None:
    """The fields as integers when each is 1 to `max_digits` ASCII digits, else None."""
    if not len(start):
        return np.zeros(0, dtype=np.int64)
    width = end - start
    longest = int(width.max())
    if int(width.min()) < 1 or longest > max_digits:
        return None
    value = np.zeros(len(start), dtype=np.int64)
    top = len(buf) - 1
    for k in range(longest):
        inside = width > k
        digit = buf[np.minimum(start + k, top)].astype(np.int64) - ZERO
        if ((digit < 0) | (digit > 9))[inside].any():
            return None
        value = np.where(inside, value * 10 + digit, value)
    return value


def parse_counts(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Token counts (int64) as `trace_rows.count` reads them, for fields of plain digits up to
    `MAX_TRACE_TOKENS`; None otherwise."""
    value = _digit_run(buf, start, end, _COUNT_DIGITS)
    if value is None or (len(value) and int(value.max()) > MAX_TRACE_TOKENS):
        return None
    return value


def parse_seconds(text: bytes, buf: np.ndarray, start: np.ndarray, end: np.ndarray
                  ) -> np.ndarray | None:
    """Times in seconds (float64) as `trace_rows.seconds` reads them: plain digits exactly in
    numpy, decimals (`12.5`, `3.`, `.25`) by Python's `float` itself; None otherwise."""
    whole = _digit_run(buf, start, end, _EXACT_DIGITS)
    if whole is not None:
        return whole.astype(np.float64)
    if not len(start) or int((end - start).min()) < 1:
        return None
    # digits with one dot somewhere, at least one digit: a form `float` reads as written
    longest = int((end - start).max())
    top = len(buf) - 1
    dots = np.zeros(len(start), dtype=np.int64)
    for k in range(longest):
        inside = (end - start) > k
        char = buf[np.minimum(start + k, top)]
        is_dot = char == DOT
        if (~((char - ZERO < 10) | is_dot))[inside].any():
            return None
        dots += is_dot & inside
    if (dots > 1).any() or ((end - start) == dots).any():
        return None
    return np.array([float(text[s:e]) for s, e in zip(start.tolist(), end.tolist(),
                                                      strict=True)], dtype=np.float64)


def _fixed(buf: np.ndarray, at: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The `width`-digit numbers at `at`, and whether each is all digits."""
    value = np.zeros(len(at), dtype=np.int64)
    ok = np.ones(len(at), dtype=bool)
    for k in range(width):
        digit = buf[at + k].astype(np.int64) - ZERO
        ok &= (digit >= 0) & (digit <= 9)
        value = value * 10 + digit
    return value, ok


_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
# Years whose instants (any offset) are fewer than 2**53 µs from 1970: their µs count is an
# exact float64, so dividing it by 10**6 rounds as Python's int / int does.
_FIRST_YEAR, _LAST_YEAR = 1800, 2200
# Fraction digits read (`fromisoformat` keeps the first 6, later ones are cut off).
_MAX_FRACTION = 12


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def parse_iso_datetimes(buf: np.ndarray, start: np.ndarray, end: np.ndarray
                        ) -> np.ndarray | None:
    """POSIX timestamps (float64) as `datetime.fromisoformat(text).timestamp()` gives them,
    UTC when no zone is given, for `YYYY-MM-DD HH:MM:SS` (or `T` between) with an optional
    fraction of 1 to 12 digits and an optional `Z` or `±HH:MM`, years 1800 to 2200; None for
    anything else (other ISO forms, out-of-range fields)."""
    n = len(start)
    if not n:
        return np.zeros(0, dtype=np.float64)
    width = end - start
    if int(width.min()) < 19 or int(width.max()) > 19 + 1 + _MAX_FRACTION + 6:
        return None
    last = end - 1
    zulu = buf[last] == ord("Z")
    # ±HH:MM (a fraction never holds a sign or a colon, so this cannot misread one)
    sign_at = np.maximum(end - 6, start)
    signed = ((buf[sign_at] == PLUS) | (buf[sign_at] == MINUS)) & (width >= 25)
    signed &= buf[np.maximum(end - 3, start)] == COLON
    zone_len = np.where(zulu, 1, np.where(signed, 6, 0))
    body = width - zone_len  # date, time and fraction
    fields = {}
    ok = np.ones(n, dtype=bool)
    for name, offset, digits in (("year", 0, 4), ("month", 5, 2), ("day", 8, 2),
                                 ("hour", 11, 2), ("minute", 14, 2), ("second", 17, 2)):
        fields[name], good = _fixed(buf, start + offset, digits)
        ok &= good
    sep = buf[start + 10]
    ok &= (buf[start + 4] == MINUS) & (buf[start + 7] == MINUS)
    ok &= (sep == ord(" ")) | (sep == ord("T"))
    ok &= (buf[start + 13] == COLON) & (buf[start + 16] == COLON)
    # the fraction: "." and 1 to _MAX_FRACTION digits, or nothing
    has_fraction = body > 19
    fraction_len = np.where(has_fraction, body - 20, 0)
    ok &= ~has_fraction | ((buf[np.minimum(start + 19, last)] == DOT) & (fraction_len >= 1))
    micro = np.zeros(n, dtype=np.int64)  # the first 6 digits, right-padded with zeros
    for k in range(max(6, int(fraction_len.max()))):
        inside = fraction_len > k
        digit = buf[np.minimum(start + 20 + k, last)].astype(np.int64) - ZERO
        ok &= ~inside | ((digit >= 0) & (digit <= 9))
        if k < 6:
            micro = micro * 10 + np.where(inside, digit, 0)
    if not ok.all():
        return None
    offset_s = np.zeros(n, dtype=np.int64)
    if signed.any():
        zone_hour, good_hour = _fixed(buf, np.where(signed, end - 5, start), 2)
        zone_minute, good_minute = _fixed(buf, np.where(signed, end - 2, start), 2)
        good = good_hour & good_minute & (zone_hour <= 23) & (zone_minute <= 59)
        if not good[signed].all():
            return None
        sign = np.where(buf[sign_at] == MINUS, -1, 1)
        offset_s = np.where(signed, sign * (zone_hour * 3600 + zone_minute * 60), 0)
    year, month, day = fields["year"], fields["month"], fields["day"]
    if not (((year >= _FIRST_YEAR) & (year <= _LAST_YEAR)).all()
            and ((month >= 1) & (month <= 12)).all()):
        return None
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_days = _DAYS_IN_MONTH[month] + (leap & (month == 2))
    if not (((day >= 1) & (day <= month_days)).all() and (fields["hour"] <= 23).all()
            and (fields["minute"] <= 59).all() and (fields["second"] <= 59).all()):
        return None
    seconds = (_days_from_civil(year, month, day) * 86400 + fields["hour"] * 3600
               + fields["minute"] * 60 + fields["second"] - offset_s)
    # timestamp() is (moment - epoch).total_seconds(): its µs (an int) / 10**6
    return (seconds * 1_000_000 + micro).astype(np.float64) / 1e6


__all__ = ["parse_counts", "parse_iso_datetimes", "parse_seconds"]
