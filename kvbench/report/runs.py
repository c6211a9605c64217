"""The runs a report shows: read back from results folders, or handed over by the session
that has just run them and renamed their folder whole (`collect_runs`).

A folder given by the user is either one run (it holds `kvbench_summary.json`) or a multi-strategy
comparison (it holds `comparison.json` and one subfolder per strategy), which expands into
its runs. Runs that come from the same comparison folder form a *group*; a report over
several groups (two git revisions, two machines) names runs `label @ group` where labels
repeat, and pairs each later group's runs with the first group's runs of the same label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.results.columns import Columns
from kvbench.results.metrics import latency_stats, nan_to_none, throughput
from kvbench.results.run_folder import (
    REQUEST_COLUMNS,
    RunProblem,
    folder_problems,
    is_working,
    planned_runs,
    read_partial_requests,
    run_name,
)
from kvbench.results.step_writer import CHART_STEP_COLUMNS
from kvbench.results.summary import REQUEST_LATENCIES, Summary, read_json_object, summary_file
from kvbench.results.token_times import TokenTimes, read_token_arrays


@dataclass
class RunData:
    """One run of a report: its folder's figures (`config` as `config.json` holds it)."""

    path: Path
    group: Path
    label: str
    summary: Summary
    config: dict[str, Any]
    requests: Columns
    status: str = "complete"  # or how it ended (interrupted, failed), or `running`
    name: str = ""  # display name, unique within a report
    group_index: int = 0
    group_tag: str = ""
    # `repeat.json` of a `--repeat N` run (this folder is its `rep-1`): each headline
    # metric's mean ± 95% CI by column name; None for a single run.
    repeat: dict[str, Any] | None = None

    @property
    def versions(self) -> dict[str, Any]:
        return self.config.get("versions") or {}

    # `steps` and `token_times` are read when a chart first asks; the session that wrote the
    # files sets them to what it kept (an assignment takes the place of the cached value).
    @cached_property
    def steps(self) -> Columns:
        """`steps.csv`'s `CHART_STEP_COLUMNS`, read when a chart first asks (a long
        simulation's file is GBs); empty when there is none."""
        return _read_csv(self.path / "steps.csv", columns=CHART_STEP_COLUMNS)

    @cached_property
    def token_times(self) -> TokenTimes | None:
        """`tokens.parquet`, read once when a chart first asks; None when there is none."""
        return read_token_times(self.path)


def read_token_times(folder: Path) -> TokenTimes | None:
    """The folder's token times; None without a readable token file (a damaged file costs the
    charts that need it, not the whole report)."""
    try:
        return read_token_arrays(folder)
    except KvbenchInputError:
        return None


@dataclass
class RunSet:
    runs: list[RunData]
    groups: list[Path] = field(default_factory=list)
    # What is unfinished, failed or unreadable in the folders the runs came from.
    problems: list[RunProblem] = field(default_factory=list)

    @property
    def multi_group(self) -> bool:
        return len(self.groups) > 1

    def pairs(self) -> list[tuple[RunData, RunData]]:
        """(base, new) pairs: each later group's runs against the first group's, by label."""
        group = [[r for r in self.runs if r.group_index == i] for i in range(len(self.groups))]
        return [pair for new in group[1:] for pair in pair_runs(group[0], new)]


def pair_runs(base: list[RunData], new: list[RunData]) -> list[tuple[RunData, RunData]]:
    """(base, new) by strategy label; two single runs pair whatever their labels."""
    by_label = {r.label: r for r in base}
    pairs = [(by_label[r.label], r) for r in new if r.label in by_label]
    if not pairs and len(base) == 1 and len(new) == 1:
        pairs = [(base[0], new[0])]
    return pairs


def _read_csv(path: Path, columns: frozenset[str] | None = None) -> Columns:
    """The CSV file at `path` (given `columns`, only those of them it has); empty when it is
    missing or unreadable."""
    if not path.is_file():
        return Columns({})
    import pandas as pd  # (its C parser: a long run's steps.csv is millions of rows)

    try:
        return Columns.from_frame(pd.read_csv(
            path, usecols=None if columns is None else columns.__contains__))
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return Columns({})


def read_repeat(folder: Path) -> dict[str, Any] | None:
    """The `repeat.json` beside a `rep-K` folder of `--repeat N` (`repeats`, `figures`)."""
    path = folder.parent / "repeat.json"
    if not folder.name.startswith("rep-") or not path.is_file():
        return None
    data = read_json_object(path)
    return data if isinstance(data.get("figures"), dict) else None


def load_run(folder: Path, group: Path | None = None) -> RunData:
    """One run folder; a run killed before its kvbench_summary.json shows the requests it had
    finished (streamed to its `requests.csv`), with figures computed from them."""
    folder = Path(folder)
    config = read_json_object(folder / "config.json") if (folder / "config.json").is_file() else {}
    summary_path = summary_file(folder)
    if summary_path is not None:
        summary = Summary.from_dict(read_json_object(summary_path))
        status = str(summary.status or "complete")
        if status == "complete" and is_working(folder):
            status = "running"  # its run ended; the folder is not whole yet
        requests = _read_csv(folder / "requests.csv")
        if not all(c in requests for c in REQUEST_COLUMNS):
            requests = Columns({})  # not a requests.csv: named among the folder's problems
    else:
        status = "running"  # or killed: nothing says which
        requests = Columns.from_frame(read_partial_requests(folder))
        summary = _partial_summary(config, requests, status)
    label = str(summary.label or config.get("label") or run_name(folder))
    if group is None:
        group = folder
        # A comparison's run, or the `rep-1` of a strategy in a repeated comparison.
        for parent in (folder.parent, folder.parent.parent):
            if _is_comparison(parent):
                group = parent
                break
    return RunData(
        path=folder, group=group, label=label, summary=summary, config=config,
        requests=requests, status=status, repeat=(read_repeat(folder) or {}).get("figures"),
    )


def _is_comparison(folder: Path) -> bool:
    """A folder of several strategies: its comparison.json, or (stopped before writing it)
    its run folders naming more than one."""
    if (folder / "comparison.json").is_file():
        return True
    if not is_working(folder) or not folder.is_dir():
        return False
    runs = planned_runs(folder) or []
    return len({name.split("/")[0] for name, _ in runs if not name.startswith("rep-")}) > 1


def _partial_summary(config: dict[str, Any], requests: Columns, status: str) -> Summary:
    """The figures of a run that stopped before writing its summary, from the requests it
    had finished: latencies over them, throughput over their makespan."""
    run = config.get("run") if isinstance(config.get("run"), dict) else {}
    engine = run.get("engine") if isinstance(run.get("engine"), dict) else {}
    tput, makespan = throughput(requests) if not requests.empty else ({}, 0.0)
    latencies = {name: latency_stats(requests[f"{name}_ms"])
                 for name in REQUEST_LATENCIES if f"{name}_ms" in requests}
    return Summary.from_dict(nan_to_none({
        "label": config.get("label"), "status": status,
        **{key: engine.get(key) for key in ("strategy", "batching", "model", "dtype", "seed")},
        "workload": run.get("workload"), "device": config.get("device"),
        "executor": config.get("executor"), "num_requests": run.get("num_requests"),
        "completed": int(requests["completed"].sum()) if not requests.empty else 0,
        "duration_s": makespan, "throughput": tput, "latency_ms": latencies,
        "memory": {"kv_budget_bytes": config.get("kv_budget_bytes")},
    }))


def run_folders(folder: Path) -> list[Path]:
    """The run folders a report shows of one user-given folder: itself, or a comparison's
    runs (a repeated one's `rep-1`s), finished or not."""
    folder = Path(folder)
    if not folder.exists():
        raise KvbenchInputError(f"no such results folder: {folder}")
    if not folder.is_dir():
        raise KvbenchInputError(f"not a results folder (expected a directory): {folder}")
    planned = planned_runs(folder)
    if planned is not None:
        shown = [path for _, path in planned
                 if path.name == "rep-1" or not path.name.startswith("rep-")]
        shown = [p for p in shown if _has_results(p)]
        if shown:
            return shown
    elif _has_results(folder):
        return [folder]
    if is_working(folder):  # killed before its first request finished
        raise KvbenchInputError(
            f"{folder} is an unfinished run (running or killed; no kvbench_summary.json "
            "and no finished request): it stopped before any result was written"
        )
    raise KvbenchInputError(
        f"{folder} is not a kvbench results folder (no kvbench_summary.json or comparison.json)"
    )


def _has_results(folder: Path) -> bool:
    """A summary, or the finished requests of a run killed before it wrote one."""
    return summary_file(folder) is not None or (
        (folder / "config.json").is_file() and not read_partial_requests(folder).empty)


def load_runs(folders: list[Path] | list[str]) -> RunSet:
    """The runs of `folders`, each once."""
    if not folders:
        raise KvbenchInputError("no results folder given")
    found: dict[Path, Path] = {}  # resolved -> as first given
    problems: list[RunProblem] = []
    for given in folders:
        for folder in run_folders(Path(given)):
            found.setdefault(folder.resolve(), folder)
        problems += folder_problems(Path(given))
    runset = collect_runs([load_run(folder) for folder in found.values()])
    runset.problems = problems
    return runset


def collect_runs(runs: list[RunData]) -> RunSet:
    """The runs as one report's set: groups in order of first appearance; sets each run's
    `group_index`, `group_tag` and display `name` (a run shown again in another report gets
    that report's)."""
    first_of: dict[Path, Path] = {}  # resolved group -> as its first run gave it
    for run in runs:
        first_of.setdefault(run.group.resolve(), run.group)
    resolved, groups = list(first_of), list(first_of.values())
    for run in runs:
        run.group_index = resolved.index(run.group.resolve())
    _name_runs(runs, groups)
    return RunSet(runs, groups)


def _name_runs(runs: list[RunData], groups: list[Path]) -> None:
    tags = _group_tags(runs, groups)
    labels = [r.label for r in runs]
    unique = len(set(labels)) == len(labels)
    for run in runs:
        run.group_tag = tags[run.group_index]
        run.name = run.label if unique else f"{run.label} @ {run.group_tag}"


def _group_tags(runs: list[RunData], groups: list[Path]) -> list[str]:
    """Short names for groups: git revisions when they tell the groups apart, else folders."""
    revs = [next(r for r in runs if r.group_index == i).versions.get("git")
            for i in range(len(groups))]
    if len(groups) > 1 and all(revs) and len(set(revs)) == len(revs):
        return [str(r) for r in revs]
    tags = _drop_common_suffix([g.name for g in groups])
    if len(set(tags)) != len(tags):
        tags = [f"{t}#{i + 1}" for i, t in enumerate(tags)]
    return tags


def _drop_common_suffix(names: list[str]) -> list[str]:
    """`20261129-085302-compare-chat`, `20261129-090038-compare-chat` -> the timestamps."""
    if len(names) < 2:
        return names
    parts = [n.split("-") for n in names]
    while all(len(p) > 1 for p in parts) and len({p[-1] for p in parts}) == 1:
        parts = [p[:-1] for p in parts]
    return ["-".join(p) for p in parts]
