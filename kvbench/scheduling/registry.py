"""The batching-policy registry: a policy is one file that registers itself here.

A policy module decorates its `BatchingPolicy` subclass with `register_policy(name, summary)`;
its options dataclass is `SchedulerLimits` unless it declares its own (built from the same
engine options). Every module of `kvbench.scheduling` is imported on the first lookup, so
`kvbench list`, `--batching` and the property tests see a new policy without other edits.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, TypeVar

from kvbench.errors import KvbenchInputError
from kvbench.scheduling.limits import SchedulerLimits

if TYPE_CHECKING:
    from kvbench.scheduling.base import BatchingPolicy
    from kvbench.strategies.base import CacheStrategy

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    summary: str
    cls: type[BatchingPolicy]
    options: type = SchedulerLimits


_ENTRIES: dict[str, PolicyEntry] = {}
_discovered = False


def register_policy(
    name: str, summary: str, options: type = SchedulerLimits
) -> Callable[[T], T]:
    """Class decorator: `--batching name` runs the class, built as `cls(cache, options)`."""

    def decorate(cls: T) -> T:
        known = _ENTRIES.get(name)
        if known is not None and known.cls is not cls:
            raise ValueError(f"batching policy {name!r} registered twice")
        cls.name = name
        _ENTRIES[name] = PolicyEntry(name, summary, cls, options)
        return cls

    return decorate


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module("kvbench.scheduling")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def policy_entries() -> dict[str, PolicyEntry]:
    """Every registered policy, `continuous` (the default) first, then by name."""
    _discover()
    ordered = sorted(_ENTRIES.values(), key=lambda e: (e.name != "continuous", e.name))
    return {e.name: e for e in ordered}


def policy_names() -> list[str]:
    return list(policy_entries())


def describe_policies() -> list[tuple[str, str]]:
    """(name, one-line summary) of every policy, as `kvbench list` shows them."""
    return [(e.name, e.summary) for e in policy_entries().values()]


def policy_entry(name: str) -> PolicyEntry:
    entries = policy_entries()
    try:
        return entries[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown --batching {name!r} (choose from {', '.join(entries)})"
        ) from None


def make_policy(name: str, cache: CacheStrategy, limits: SchedulerLimits) -> BatchingPolicy:
    entry = policy_entry(name)
    if entry.options is not SchedulerLimits:  # a policy's own options extend the limits
        limits = entry.options(**asdict(limits))
    return entry.cls(cache, limits)
