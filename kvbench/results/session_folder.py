"""`SessionFolder`: the results folder of a `kvbench run` or `simulate` session.

Claimed as `<root>.partial/` when the session starts, holding one working folder per run
from the start (a run never started is an empty one), each renamed whole when its run ends;
once every run is, the comparison files (`comparison.json`, `comparison.csv`, each
`repeat.json`) are written and the folder is renamed `<root>/` (docs/design.md, Results
contract).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.results.files import write_csv, write_json
from kvbench.results.metric_catalogue import METRICS
from kvbench.results.repeat import repeat_summary
from kvbench.results.run_folder import claim_working_folder, finish, working
from kvbench.results.run_writer import RunOutcome

# The headline figures of `comparison.csv`, after each run's label.
COMPARISON_METRICS = ("output_tok_s", "ttft.p50", "ttft.p99", "tpot.p50", "tpot.p99",
                      "utilization_mean", "preemptions", "prefix_hit_rate")


class SessionFolder:
    """`labels`: the session's runs, each run `repeat` times."""

    def __init__(self, out: Path, name: str, labels: list[str], repeat: int) -> None:
        self.work = self.root = claim_working_folder(out, name)
        self.labels, self.repeat = labels, repeat
        self.runs = [self._claim(label) for label in labels]
        self.done: list[RunOutcome] = []  # the runs whose folders are whole, in order

    def _claim(self, label: str) -> list[Path]:
        base = self.work if len(self.labels) == 1 else self.work / label
        if self.repeat == 1:
            return [base if base == self.work else _mkdir(working(base))]
        base.mkdir(exist_ok=True)
        return [_mkdir(working(base / f"rep-{k}")) for k in range(1, self.repeat + 1)]

    def run_folder(self, index: int, k: int) -> Path:
        """The working folder of repeat `k` (from 0) of run `index`."""
        return self.runs[index][k]

    def run_done(self, outcome: RunOutcome) -> None:
        """A run's folder renamed whole (a single run's is the session's: renamed last)."""
        if outcome.folder != self.work:
            outcome.folder = finish(outcome.folder)
        self.done.append(outcome)

    def finished_labels(self) -> list[str]:
        """The strategies whose runs all finished, in order; one with only some of its
        repeats done is named with the count (`paged (2/3 repeats)`)."""
        labels = [o.label for o in self.done]
        names = []
        for label in self.labels:
            count = labels.count(label)
            if count == self.repeat:
                names.append(label)
            elif count:
                names.append(f"{label} ({count}/{self.repeat} repeats)")
        return names

    def finish(self) -> tuple[list[RunOutcome], list[dict[str, Any]]]:
        """Write the comparison's files and rename the folder whole: each run's first
        outcome (its folder as renamed) and, with repeats, each run's statistics."""
        per_label = [self.done[i::len(self.labels)] for i in range(len(self.labels))]
        outcomes = [runs[0] for runs in per_label]
        repeats = []
        if self.repeat > 1:
            for runs in per_label:
                stats = repeat_summary([o.summary for o in runs])
                write_json(runs[0].folder.parent / "repeat.json", stats)
                repeats.append(stats)
        if len(self.labels) > 1:
            write_comparison(self.work, outcomes)
        self.root = finish(self.work)
        for outcome in outcomes:
            outcome.folder = self.root / outcome.folder.relative_to(self.work)
        return outcomes, repeats


def _mkdir(folder: Path) -> Path:
    folder.mkdir()
    return folder


def write_comparison(root: Path, outcomes: list[RunOutcome]) -> None:
    """`comparison.json` (every summary) and `comparison.csv` (headline figures)."""
    # Folders relative to `root`: with --repeat they are `<label>/rep-1`, not just a name.
    write_json(root / "comparison.json", {
        "runs": [{"label": o.label, "folder": o.folder.relative_to(root).as_posix()}
                 for o in outcomes],
        "summaries": [o.summary.to_dict() for o in outcomes],
    })
    rows = [{"label": o.label, **{METRICS[name].column: o.summary.lookup(METRICS[name].path)
                                  for name in COMPARISON_METRICS}} for o in outcomes]
    import pandas as pd  # (only a comparison writes a table of runs)

    write_csv(root / "comparison.csv", pd.DataFrame(rows))
