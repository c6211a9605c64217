"""The runs a report shows: read back from results folders, or handed over by the session
that has just run them (`collect_runs`).

A folder given by the user is either one run (it holds `kvbench_summary.json`) or a multi-strategy
comparison (it holds `comparison.json` and one subfolder per strategy), which expands into
its runs. Runs that come from the same comparison folder form a *group*; a report over
several groups (two git revisions, two machines) names runs `label @ group` where labels
repeat, and pairs each later group's runs with the first group's runs of the same label.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from kvbench.errors import KvbenchInputError
from kvbench.report.token_times import token_times as read_token_times
from kvbench.results.summary import SUMMARY_FILE, Summary, summary_file
from kvbench.results.token_times import TokenTimes

INCOMPLETE_MARKER = "INCOMPLETE"


@dataclass
class RunData:
    """One run of a report: its folder's figures (`config` as `config.json` holds it)."""

    path: Path
    group: Path
    label: str
    summary: Summary
    config: dict[str, Any]
    requests: pd.DataFrame
    status: str = "complete"  # or what the INCOMPLETE marker says: running, failed, ...
    name: str = ""  # display name, unique within a report
    group_index: int = 0
    group_tag: str = ""
    # `repeat.json` of a `--repeat N` run (this folder is its `rep-1`): each headline
    # metric's mean ± 95% CI by column name; None for a single run.
    repeat: dict[str, Any] | None = None

    @property
    def versions(self) -> dict[str, Any]:
        return self.config.get("versions") or {}

    def use_token_times(self, times: TokenTimes) -> None:
        """Take the folder's `tokens.jsonl` as already read (the session that wrote it)."""
        self.__dict__["token_times"] = times  # fills the cached property below

    @cached_property
    def steps(self) -> pd.DataFrame:
        """`steps.csv`, read when a chart first asks: a run streams its steps to the file and
        keeps none (a long simulation's file is tens of MB); empty when there is none."""
        return _read_csv(self.path / "steps.csv")

    @cached_property
    def token_times(self) -> TokenTimes | None:
        """`tokens.jsonl`, read when a chart first asks (several do; a 10,000-request run's
        file holds millions of times); None when the folder has none readable."""
        return read_token_times(self.path)


@dataclass
class RunSet:
    runs: list[RunData]
    groups: list[Path] = field(default_factory=list)

    @property
    def multi_group(self) -> bool:
        return len(self.groups) > 1

    def pairs(self) -> list[tuple[RunData, RunData]]:
        """(base, new) pairs: each later group's runs against the first group's, by label."""
        if not self.multi_group:
            return []
        base = [r for r in self.runs if r.group_index == 0]
        by_label = {r.label: r for r in base}
        out = []
        for index in range(1, len(self.groups)):
            others = [r for r in self.runs if r.group_index == index]
            matched = [(by_label[r.label], r) for r in others if r.label in by_label]
            if not matched and len(base) == 1 and len(others) == 1:
                matched = [(base[0], others[0])]
            out.extend(matched)
        return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise KvbenchInputError(f"cannot read {path}: {err}") from None
    if not isinstance(data, dict):
        raise KvbenchInputError(f"cannot read {path}: not a JSON object")
    return data


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame()
    try:
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def _status(folder: Path) -> str:
    marker = folder / INCOMPLETE_MARKER
    if not marker.exists():
        return "complete"
    try:
        return str(json.loads(marker.read_text(encoding="utf-8")).get("status", "incomplete"))
    except (OSError, ValueError, AttributeError):
        return "incomplete"


def _repeat_stats(folder: Path) -> dict[str, Any] | None:
    """The repeat statistics of a `rep-K` folder (in its parent's `repeat.json`)."""
    if not folder.name.startswith("rep-"):
        return None
    path = folder.parent / "repeat.json"
    if not path.is_file():
        return None
    figures = _read_json(path).get("figures")
    return figures if isinstance(figures, dict) else None


def _summary_path(folder: Path) -> Path:
    """The run's summary file (an older folder's `summary.json` too); the name it should have
    when there is none, so that reading it says what is missing."""
    return summary_file(folder) or folder / SUMMARY_FILE


def load_run(folder: Path, group: Path | None = None) -> RunData:
    folder = Path(folder)
    summary = Summary.from_dict(_read_json(_summary_path(folder)))
    config = _read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    label = str(summary.label or config.get("label") or folder.name)
    if group is None:
        group = folder
        # A comparison's run, or the `rep-1` of a strategy in a repeated comparison.
        for parent in (folder.parent, folder.parent.parent):
            if (parent / "comparison.json").is_file():
                group = parent
                break
    return RunData(
        path=folder, group=group, label=label, summary=summary, config=config,
        requests=_read_csv(folder / "requests.csv"), status=_status(folder),
        repeat=_repeat_stats(folder),
    )


def run_folders(folder: Path) -> list[Path]:
    """The run folders inside one user-given folder (itself, or a comparison's subfolders)."""
    folder = Path(folder)
    if not folder.exists():
        raise KvbenchInputError(f"no such results folder: {folder}")
    if not folder.is_dir():
        raise KvbenchInputError(f"not a results folder (expected a directory): {folder}")
    if (folder / "comparison.json").is_file():
        listed = _read_json(folder / "comparison.json").get("runs") or []
        subs = [folder / str(r["folder"]) for r in listed
                if isinstance(r, dict) and r.get("folder")]
        subs = [s for s in subs if summary_file(s) is not None]
        if subs:
            return subs
    if summary_file(folder) is not None:
        return [folder]
    if (folder / "repeat.json").is_file() and summary_file(folder / "rep-1") is not None:
        return [folder / "rep-1"]  # one strategy run --repeat N times: it stands for them
    subs = sorted(p for p in folder.iterdir() if summary_file(p) is not None)
    if subs:  # an interrupted comparison: no comparison.json yet
        return subs
    if (folder / INCOMPLETE_MARKER).exists():  # killed before its first summary was written
        raise KvbenchInputError(
            f"{folder} is an unfinished run ({_status(folder)}; INCOMPLETE marker, no "
            "kvbench_summary.json): it stopped before any result was written"
        )
    raise KvbenchInputError(
        f"{folder} is not a kvbench results folder (no kvbench_summary.json or comparison.json)"
    )


def load_runs(folders: list[Path] | list[str]) -> RunSet:
    """The runs of `folders`, each once."""
    if not folders:
        raise KvbenchInputError("no results folder given")
    runs: list[RunData] = []
    seen: set[Path] = set()
    for given in folders:
        for folder in run_folders(Path(given)):
            key = folder.resolve()
            if key not in seen:
                seen.add(key)
                runs.append(load_run(folder))
    return collect_runs(runs)


def collect_runs(runs: list[RunData]) -> RunSet:
    """The runs as one report's set: groups in order of first appearance; sets each run's
    `group_index`, `group_tag` and display `name` (a run shown again in another report gets
    that report's)."""
    groups: list[Path] = []
    for run in runs:
        if run.group.resolve() not in [g.resolve() for g in groups]:
            groups.append(run.group)
    resolved = [g.resolve() for g in groups]
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
    revs = []
    for index in range(len(groups)):
        first = next(r for r in runs if r.group_index == index)
        revs.append(first.versions.get("git"))
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
