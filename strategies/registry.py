"""The strategy registry: a cache strategy is one file that registers itself here.

A strategy module decorates its class with `register_strategy(name, summary, options)`;
`options` is a dataclass whose fields are the `EngineConfig` options the strategy reads
(`block_size`, `reserve`, ...), plus `namespace` for strategies that hash tokens. A variant
(`register_variant`) is an existing strategy run with some engine options forced: `fp8` is
`paged` whose executor keeps an fp8 KV cache, so its bookkeeping is paged's.

`STRATEGIES` imports every module of `kvbench.strategies` on the first lookup, so adding a
strategy needs no edit anywhere else: `kvbench list`, `--strategy`, sweeps and the property
tests all iterate it: the strategies of `LISTING_ORDER`, then any other in name order, then
variants (by name), whatever order their modules happened to be imported in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from types import MappingProxyType
from typing import Any, TypeVar

from kvbench.registry import Registry
from kvbench.strategies.base import CacheStrategy

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class NoOptions:
    """Options of a strategy that reads none."""


@dataclass(frozen=True)
class StrategyEntry:
    """One name of `--strategy`. `factory(num_slots, max_model_len, **options)` builds it.

    `engine_overrides` are `EngineConfig` values the name implies (applied where the user left
    the option at its default); `base` names the strategy a variant runs.
    """

    name: str
    summary: str
    factory: Callable[..., Any]
    options: type = NoOptions
    engine_overrides: Mapping[str, Any] = field(default_factory=dict)
    base: str | None = None

    @property
    def kv_cache_dtype(self) -> str | None:
        """The KV-cache dtype the name forces (None: the run's `--kv-cache-dtype`)."""
        return self.engine_overrides.get("kv_cache_dtype")


# Simplest first; importing a module registers its strategy (and those it imports), so the
# import order is no listing order.
LISTING_ORDER = ("contiguous", "paged", "hybrid", "hybrid-prefix", "prefix")


def _listing_key(entry: StrategyEntry) -> tuple[bool, int, str]:
    rank = LISTING_ORDER.index(entry.name) if entry.name in LISTING_ORDER else len(LISTING_ORDER)
    return entry.base is not None, rank, entry.name


STRATEGIES: Registry[StrategyEntry] = Registry(
    "strategy", "kvbench.strategies", identity=lambda entry: entry.factory,
    order=_listing_key, choices_label="strategies: ",
)


def register_strategy(name: str, summary: str, options: type = NoOptions) -> Callable[[T], T]:
    """Class decorator: `name` builds the class with the fields of `options` from the config."""

    def decorate(cls: T) -> T:
        STRATEGIES.add(StrategyEntry(name, summary, cls, options))
        return cls

    return decorate


def register_variant(name: str, summary: str, base: str, **engine_overrides: Any) -> None:
    """`name` runs strategy `base` with `engine_overrides` applied to the engine's config."""
    STRATEGIES.add(StrategyEntry(name, summary, partial(make_strategy, base), NoOptions,
                                 MappingProxyType(dict(engine_overrides)), base))


def reads_option(strategy: str, option: str) -> bool:
    """Whether strategy `strategy` (a variant: its base) reads engine option `option`, by its
    registered options dataclass: `reserve` marks a strategy that reserves whole ranges,
    `block_size` one that allocates blocks."""
    entry = STRATEGIES.get(strategy)
    options = STRATEGIES.get(entry.base).options if entry.base else entry.options
    return option in {f.name for f in fields(options)}


def swaps(strategy: str) -> bool:
    """Whether strategy `strategy` (a variant: its base) swaps preempted sequences into a
    host tier (`CacheStrategy.swap_out`, `--preemption-mode swap`)."""
    entry = STRATEGIES.get(strategy)
    cls = STRATEGIES.get(entry.base).factory if entry.base else entry.factory
    return getattr(cls, "swap_out", CacheStrategy.swap_out) is not CacheStrategy.swap_out


def make_strategy(name: str, num_slots: int, max_model_len: int, **values: Any) -> Any:
    """Build strategy `name` over `num_slots`; `values` may hold any engine option (the
    strategy takes those its options dataclass names). A variant passes them all on to its
    base."""
    entry = STRATEGIES.get(name)
    if entry.base is not None:
        return entry.factory(num_slots, max_model_len, **values)
    names = {f.name for f in fields(entry.options)}
    options = entry.options(**{k: v for k, v in values.items() if k in names})
    return entry.factory(num_slots, max_model_len, **asdict(options))
