"""The scheduling registries: a batching policy or a queue order is one file that registers
itself here.

A policy module decorates its `BatchingPolicy` subclass with `register_policy(name, summary)`;
`engine_overrides` are `EngineConfig` values the policy implies (`vllm-v1` always chunks
prefills). A queue order module decorates its `QueueOrder` subclass with
`register_queue_order(name, summary)`. `POLICIES` and `QUEUE_ORDERS` import every module of
`kvbench.scheduling` on the first lookup, so `kvbench list`, `--batching`, `--queue-order` and
the property tests see a new one without other edits. Every policy runs with every queue
order: `make_policy(name, cache, limits, queue_order)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kvbench.registry import Registry
from kvbench.scheduling.limits import SchedulerLimits

if TYPE_CHECKING:
    from kvbench.scheduling.base import BatchingPolicy
    from kvbench.scheduling.queue_order import QueueOrder
    from kvbench.strategies.base import CacheStrategy

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class PolicyEntry:
    """One name of `--batching`: `cls(cache, limits, queue_order)` builds it.

    `engine_overrides` are `EngineConfig` values the policy implies, applied over the user's.
    """

    name: str
    summary: str
    cls: type[BatchingPolicy]
    engine_overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueOrderEntry:
    """One name of `--queue-order`: `cls()` ranks the waiting queue's arrivals."""

    name: str
    summary: str
    cls: type[QueueOrder]


def _default_first(default: str) -> Callable[[PolicyEntry | QueueOrderEntry], object]:
    return lambda entry: (entry.name != default, entry.name)


QUEUE_ORDERS: Registry[QueueOrderEntry] = Registry(
    "--queue-order", "kvbench.scheduling", identity=lambda entry: entry.cls,
    order=_default_first("fcfs"),
)


def _queue_order_hint(name: str) -> str | None:
    if name in QUEUE_ORDERS:
        return f"{name} is a queue order, use --queue-order {name} (with any --batching)"
    return None


POLICIES: Registry[PolicyEntry] = Registry(
    "--batching", "kvbench.scheduling", identity=lambda entry: entry.cls,
    order=_default_first("continuous"), hint=_queue_order_hint,
)


def register_policy(
    name: str, summary: str, engine_overrides: Mapping[str, Any] | None = None,
) -> Callable[[T], T]:
    """Class decorator: `--batching name` runs the class, built as
    `cls(cache, limits, queue_order)`, over an engine config with `engine_overrides`."""

    def decorate(cls: T) -> T:
        POLICIES.add(PolicyEntry(name, summary, cls, dict(engine_overrides or {})))
        cls.name = name
        return cls

    return decorate


def register_queue_order(name: str, summary: str) -> Callable[[T], T]:
    """Class decorator: `--queue-order name` orders the waiting queue with `cls()`."""

    def decorate(cls: T) -> T:
        QUEUE_ORDERS.add(QueueOrderEntry(name, summary, cls))
        cls.name = name
        return cls

    return decorate


def make_policy(
    name: str, cache: CacheStrategy, limits: SchedulerLimits, queue_order: str = "fcfs"
) -> BatchingPolicy:
    """Policy `name` over `cache`, its waiting queue in the order `queue_order` names."""
    return POLICIES.get(name).cls(cache, limits, QUEUE_ORDERS.get(queue_order).cls())
