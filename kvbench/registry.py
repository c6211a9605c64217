"""`Registry`: names → entries for every extension point (strategies, batching policies, queue
orders, executors, workloads).

An extension is one file that registers itself: its module calls `registry.add(entry)` (or a
decorator built on it) at import time. A registry knows the package its extensions live in and
imports every module of it on the first lookup, so `kvbench list`, the CLI's validation,
sweeps and the property tests see a new file without an edit anywhere else.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from kvbench.errors import KvbenchInputError


class Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...


E = TypeVar("E", bound=Named)


class Registry(Generic[E]):
    """Entries of one kind, by name, in registration order.

    `kind` names the choice in messages ("strategy", "--batching"); `package` is imported
    module by module before the first lookup; `identity` tells a module imported twice (the
    same extension: allowed) from a clash; `order` sorts the listing (stable). An unknown
    name's message lists the choices after `choices_label`, then `choices_note` (other
    spellings, say) and `hint(name)`'s pointer (a name of another registry, say).
    """

    def __init__(self, kind: str, package: str | None = None, *,
                 identity: Callable[[E], object] = lambda entry: entry,
                 order: Callable[[E], object] | None = None,
                 choices_label: str = "choose from ", choices_note: str = "",
                 hint: Callable[[str], str | None] = lambda name: None) -> None:
        self.kind = kind
        self.package = package
        self._identity = identity
        self._order = order
        self._choices_label = choices_label
        self._choices_note = choices_note
        self._hint = hint
        self._entries: dict[str, E] = {}
        self._discovered = package is None

    def add(self, entry: E) -> E:
        known = self._entries.get(entry.name)
        if known is not None and self._identity(known) is not self._identity(entry):
            raise ValueError(f"{self.kind} {entry.name!r} registered twice")
        self._entries[entry.name] = entry
        return entry

    def remove(self, name: str) -> None:
        """Forget `name`, so a test can register a temporary extension and take it back."""
        self._entries.pop(name, None)

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{self.package}.{module.name}")

    def get(self, name: str) -> E:
        """The entry called `name`; a `KvbenchInputError` naming the choices otherwise."""
        self._discover()
        entry = self._entries.get(name)
        if entry is None:
            hint = self._hint(name)
            raise KvbenchInputError(
                f"unknown {self.kind} {name!r} "
                f"({self._choices_label}{', '.join(self.names())}{self._choices_note})"
                + (f": {hint}" if hint else "")
            )
        return entry

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[E]:
        self._discover()
        entries = list(self._entries.values())
        if self._order is not None:
            entries.sort(key=self._order)
        return iter(entries)

    def names(self) -> list[str]:
        return [entry.name for entry in self]

    def describe(self) -> list[tuple[str, str]]:
        """(name, one-line summary) of every entry, for `kvbench list`."""
        return [(entry.name, entry.summary) for entry in self]


__all__ = ["Named", "Registry"]
