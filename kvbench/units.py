"""Parsing and printing of sizes, durations and rates with explicit units."""

from __future__ import annotations

import math
import re

from kvbench.errors import KvbenchInputError

_SIZE_UNITS = {
    "": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
    "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size_bytes(text: str | int) -> int:
    """Parse `64MiB`, `2GB`, `80GiB`, `1e9` or a plain byte count into bytes."""
    if isinstance(text, int):
        if text < 0:
            raise KvbenchInputError(f"size must not be negative: {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise KvbenchInputError(
            f"cannot read size {text!r}: use a number with a unit such as 64MiB, 2GB or 80GiB"
        )
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    return int(value)


def format_bytes(num_bytes: float | int | None) -> str:
    """Binary units for tables: 1536 -> '1.50 KiB'."""
    if num_bytes is None:
        return "n/a"
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024


def parse_rate(text: str | float) -> float:
    """Requests per second; accepts `inf`."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise KvbenchInputError(f"cannot read rate {text!r}: use a number or 'inf'") from None
    if math.isnan(value) or value <= 0:
        raise KvbenchInputError(f"rate must be positive or 'inf', got {text!r}")
    return value


_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us)?\s*$")


def parse_duration_s(text: str) -> float:
    """`500ms`, `0.5s`, `500` (milliseconds when no unit, as latency SLOs are written)."""
    match = _DURATION_RE.match(text)
    if not match:
        raise KvbenchInputError(f"cannot read duration {text!r}: use e.g. 500ms or 0.5s")
    value = float(match.group(1))
    unit = match.group(2) or "ms"
    return value * {"ms": 1e-3, "s": 1.0, "us": 1e-6}[unit]
