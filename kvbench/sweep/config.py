"""`SweepSpec`: what a sweep runs, from a TOML file (`tomllib`), flags, or a `sweep.json`.

The TOML file's tables (`[base]`, `[axes]`, `[slo]`, `[search]`, `[report]`, `[executor]`) and
keys are those of docs/sweep.md, "Sweep files". Option names take dashes or underscores.
Everything but `[executor]`, `name` and `out` is the sweep's identity: `--resume` refuses a
folder whose `sweep.json` holds another grid.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.strategies import STRATEGIES
from kvbench.sweep.options import (
    canonical_name,
    check_kind,
    convert,
    display_name,
    workload_param_items,
)
from kvbench.sweep.slo import parse_slo_targets

SEARCHABLE = ("request_rate", "max_concurrency")
# Wide on purpose: grid points at values of the axis narrow the bracket before any probe.
DEFAULT_RANGES = {"request_rate": (0.05, 100.0), "max_concurrency": (1, 1024)}
DEFAULT_TOLERANCE = 0.05
DEFAULT_PARETO = ("output_tok_s", "tpot.p99")
DEFAULT_HEATMAP_METRICS = ("output_tok_s", "tpot.p99")


@dataclass
class SearchSpec:
    """Bisection of `axis` for the highest value meeting the SLO."""

    axis: str = "request_rate"
    lo: float | None = None  # None: from the grid or DEFAULT_RANGES
    hi: float | None = None
    tolerance: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        self.axis = canonical_name(self.axis)
        if self.axis not in SEARCHABLE:
            raise KvbenchInputError(
                f"--search {self.axis!r}: only {', '.join(SEARCHABLE)} can be searched"
            )
        if not 0 < self.tolerance < 1:
            raise KvbenchInputError(f"--tolerance must be in (0, 1), got {self.tolerance}")
        if self.lo is not None and self.hi is not None and not 0 < self.lo < self.hi:
            raise KvbenchInputError(
                f"--search-range must be 0 < LO < HI, got {self.lo:g},{self.hi:g}"
            )


@dataclass
class ReportSpec:
    pareto: tuple[str, str] = DEFAULT_PARETO
    heatmap: tuple[str, str] | None = None  # two axis names; None: the first two axes
    heatmap_metrics: tuple[str, ...] = DEFAULT_HEATMAP_METRICS

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> ReportSpec:
        """From `sweep.json` or a sweep file's `[report]` (`where` names it in errors)."""
        heatmap = data.get("heatmap")
        return cls(_pair(data.get("pareto", DEFAULT_PARETO), f"{where}pareto"),
                   _pair(heatmap, f"{where}heatmap") if heatmap else None,
                   tuple(data.get("heatmap_metrics", DEFAULT_HEATMAP_METRICS)))


@dataclass
class ExecutorSpec:
    kind: str = "local"  # local | ray
    address: str | None = None
    jobs: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("local", "ray"):
            raise KvbenchInputError(f"unknown --executor {self.kind!r} (choose local or ray)")
        if self.jobs is not None and self.jobs < 1:
            raise KvbenchInputError(f"--jobs must be at least 1, got {self.jobs}")


@dataclass
class SweepSpec:
    kind: str = "run"  # run | simulate
    base: dict[str, Any] = field(default_factory=dict)  # option -> one value
    axes: dict[str, list[Any]] = field(default_factory=dict)  # option -> values, in order
    slo: dict[str, float] = field(default_factory=dict)  # "ttft.p99" -> ms
    search: SearchSpec | None = None
    report: ReportSpec = field(default_factory=ReportSpec)
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    name: str | None = None
    out: str = "results"

    def normalize(self) -> SweepSpec:
        """Canonical option names, typed values, `strategy = "all"` expanded; checked."""
        base: dict[str, Any] = {}
        for key, value in self.base.items():
            name = canonical_name(key)
            if name == "workload_params":
                base[name] = list(workload_param_items(value))
            else:
                base[name] = convert(name, value)
        axes: dict[str, list[Any]] = {}
        for key, values in self.axes.items():
            name = canonical_name(key)
            if name == "workload_params":
                raise KvbenchInputError(
                    "sweep a workload parameter as workload_param.NAME = [values]"
                )
            values = [values] if isinstance(values, str) else list(values)
            if name == "strategy" and values == ["all"]:
                values = STRATEGIES.names()
            if not values:
                raise KvbenchInputError(f"sweep axis {key!r} has no values")
            typed = [convert(name, v) for v in values]
            if len({repr(v) for v in typed}) != len(typed):
                raise KvbenchInputError(f"sweep axis {key!r} lists a value twice")
            if name in axes:
                raise KvbenchInputError(f"sweep axis {key!r} is given twice")
            axes[name] = typed
            base.pop(name, None)
        if base.get("strategy") == "all":
            axes = {"strategy": STRATEGIES.names(), **axes}
            del base["strategy"]
        check_kind(self.kind, [*base, *axes])
        self.base, self.axes = base, axes
        self.slo = parse_slo_targets(self.slo)
        return self

    def check(self) -> SweepSpec:
        """What a sweep needs on top of well-formed options."""
        if self.search is not None and not self.slo:
            raise KvbenchInputError("--search needs an --slo to meet (e.g. ttft.p99=500ms)")
        from kvbench.sweep.table import POINT_METRICS, metric_column  # (table loads pandas)

        axes = [display_name(a) for a in self.axis_names()]
        columns = {*axes, *(metric_column(name) for name in POINT_METRICS)}
        for flag, names in (("--pareto", self.report.pareto),
                            ("--heatmap-metrics", self.report.heatmap_metrics)):
            for name in names:
                if metric_column(name) not in columns:
                    raise KvbenchInputError(f"{flag}: unknown metric {name!r} (valid: "
                                            f"{', '.join([*POINT_METRICS, *axes])})")
        for name in self.report.heatmap or ():
            if display_name(name.strip().replace("-", "_")) not in axes:
                raise KvbenchInputError(f"--heatmap: {name!r} is not an axis of this sweep "
                                        f"(axes: {', '.join(axes) or 'none'})")
        return self

    def axis_names(self) -> list[str]:
        """The grid's axes, then the searched option when it is not one of them."""
        searched = [self.search.axis] if self.search and self.search.axis not in self.axes else []
        return [*self.axes, *searched]

    def identity(self) -> dict[str, Any]:
        """What makes two sweeps the same sweep (resume compares this)."""
        data = self.to_dict()
        for key in ("executor", "name", "out", "report"):
            data.pop(key, None)
        return data

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSpec:
        data = dict(data)
        search = data.pop("search", None)
        spec = cls(**{k: v for k, v in data.items() if k not in ("report", "executor")})
        spec.search = SearchSpec(**search) if search else None
        spec.report = ReportSpec.from_dict(data.get("report") or {})
        spec.executor = ExecutorSpec(**(data.get("executor") or {}))
        return spec


_TOP_KEYS = {"kind", "name", "out", "base", "axes", "slo", "search", "report", "executor"}


def _pair(value: Any, what: str) -> tuple[str, str]:
    items = ([v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str)
             else list(value))
    if len(items) != 2:
        raise KvbenchInputError(f"{what} takes two names, got {value!r}")
    return str(items[0]), str(items[1])


def _table(data: dict[str, Any], key: str, path: Path, known: tuple[str, ...]) -> dict[str, Any]:
    """The TOML table `[key]` (dashes in its keys as underscores), refused with unknown keys."""
    table = {k.replace("-", "_"): v for k, v in dict(data.get(key) or {}).items()}
    unknown = [k for k in table if k not in known]
    if unknown:
        raise KvbenchInputError(f"{path}: unknown [{key}] key(s) {', '.join(unknown)} "
                                f"(known: {', '.join(known)})")
    return table


def load_sweep_config(path: str | Path) -> SweepSpec:
    """Read a sweep file; `name` defaults to the file's stem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise KvbenchInputError(f"cannot read sweep file {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise KvbenchInputError(f"{path}: not a TOML sweep file (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as err:
        raise KvbenchInputError(f"{path}: not valid TOML: {err}") from None
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise KvbenchInputError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(_TOP_KEYS))})"
        )
    spec = SweepSpec(
        kind=str(data.get("kind", "run")), base=dict(data.get("base", {})),
        axes=dict(data.get("axes", {})), slo=dict(data.get("slo", {})),
        name=data.get("name") or path.stem, out=str(data.get("out", "results")),
        report=ReportSpec.from_dict(
            _table(data, "report", path, ("pareto", "heatmap", "heatmap_metrics")), "[report] "),
        executor=ExecutorSpec(**_table(data, "executor", path, ("kind", "address", "jobs"))),
    )
    if "search" in data:
        search = _table(data, "search", path, ("axis", "range", "tolerance"))
        lo, hi = search.pop("range", (None, None))
        spec.search = SearchSpec(str(search.get("axis", "request_rate")), lo, hi,
                                 float(search.get("tolerance", DEFAULT_TOLERANCE)))
    return spec
