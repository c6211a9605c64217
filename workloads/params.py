"""Workload parameters: each default's type is its parameter's (`int`, `float`, or an
inclusive `(low, high)` integer range written `low,high`); bad values are input errors."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from kvbench.errors import KvbenchInputError


def check_int(name: str, value: Any, minimum: int = 1) -> int:
    """`value` as an int >= `minimum` (integral floats such as 12.0 are accepted)."""
    if (isinstance(value, bool) or not isinstance(value, int | float) or value < minimum
            or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer()))):
        raise KvbenchInputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_float(name: str, value: Any, minimum: float = 0.0, *, strict: bool = False) -> float:
    """`value` as a finite float >= `minimum` (> `minimum` when `strict`)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise KvbenchInputError(f"{name} must be a finite number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        relation = ">" if strict else ">="
        raise KvbenchInputError(f"{name} must be {relation} {minimum}, got {value!r}")
    return float(value)


def check_range(name: str, value: Any, minimum: int = 1) -> tuple[int, int]:
    """An inclusive integer range `(low, high)` with `minimum <= low <= high`.

    A single integer `k` means `(k, k)`.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        k = check_int(name, value, minimum)
        return (k, k)
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise KvbenchInputError(f"{name} must be an integer range (low, high), got {value!r}")
    low = check_int(f"{name} low", value[0], minimum)
    high = check_int(f"{name} high", value[1], minimum)
    if low > high:
        raise KvbenchInputError(f"{name} must have low <= high, got {value!r}")
    return (low, high)


def check_known(workload: str, params: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Reject parameters the workload does not have, naming the ones it does."""
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        known = ", ".join(defaults) or "none"
        raise KvbenchInputError(
            f"workload {workload!r} has no parameter {', '.join(unknown)} (parameters: {known})"
        )


def parse_value(name: str, text: str, default: Any) -> Any:
    """Parse the string `text` into the type of `default`."""
    text = text.strip()
    try:
        if isinstance(default, tuple):
            parts = [p for p in text.replace(":", ",").split(",") if p.strip()]
            if len(parts) == 1:
                return (int(parts[0]), int(parts[0]))
            if len(parts) != 2:
                raise ValueError
            return (int(parts[0]), int(parts[1]))
        if isinstance(default, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = "low,high" if isinstance(default, tuple) else type(default).__name__
        raise KvbenchInputError(f"cannot read {name}={text!r}: expected {kind}") from None
    return text


def parse_params(
    workload: str, items: Iterable[str], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """Turn `["turns_per_conversation=6", "user_len=8,32"]` into typed keyword arguments."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise KvbenchInputError(f"workload parameter {item!r} must look like name=value")
        check_known(workload, {key: None}, defaults)
        params[key] = parse_value(key, text, defaults[key])
    return params
