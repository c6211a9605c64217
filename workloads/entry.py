"""`WorkloadEntry` and `WORKLOADS`: the table of built-in workloads.

A workload is one module of this package that registers itself at import time,
`WORKLOADS.add(WorkloadEntry("uniform", uniform_requests, DEFAULTS, SUMMARY, list_order=70))`;
`WORKLOADS` imports every module of the package on its first lookup, so a new file needs no
edit anywhere else."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kvbench.core.request import Request
from kvbench.registry import Registry
from kvbench.workloads.params import check_known, parse_params

# Where a workload that names no `list_order` is listed: after the built-ins.
LIST_LAST = 1000


@dataclass(frozen=True)
class WorkloadEntry:
    """One name of `--workload`.

    `generator(num_requests, seed, vocab_size, **params)` returns the requests in generation
    order, with `arrival_s` an offset inside their conversation (0 for single requests); it
    gets every parameter, defaults filled in, and checks their values. `params` maps each
    parameter to its default, whose type is the parameter's type (`params.py`). `list_order`
    places the workload in `kvbench list` (ties keep registration order).
    """

    name: str
    generator: Callable[..., list[Request]]
    params: Mapping[str, Any]
    summary: str
    list_order: int = LIST_LAST

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    def parse_params(self, items: Iterable[str]) -> dict[str, Any]:
        """`["n=8", "prompt_len=32,64"]` -> typed keyword arguments for this workload."""
        return parse_params(self.name, items, self.params)

    def with_defaults(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` over the defaults; a parameter this workload lacks is an input error."""
        check_known(self.name, params, self.params)
        return {**self.params, **params}


WORKLOADS: Registry[WorkloadEntry] = Registry(
    "workload",
    "kvbench.workloads",
    identity=lambda entry: entry.generator,
    order=lambda entry: entry.list_order,
    choices_label="workloads: ",
    choices_note="; or a trace file",
)
