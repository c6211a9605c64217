"""`run_sweep`: run a grid (and an SLO capacity search) into a sweep folder (its files:
`kvbench.sweep.sweep_folder`; one ordinary results folder per point).

A point whose folder is complete is never run again under `--resume`: its summary is read
back. Points that failed or were interrupted run again. Ctrl-C stops the sweep, writes what
finished to `points.csv` and raises `SweepInterrupted` (the CLI exits 130).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

import kvbench.report.writer
from kvbench.errors import KvbenchInputError, RunInterrupted
from kvbench.results.files import check_output_folder, claim_folder, write_csv, write_json
from kvbench.session.run_options import option_value
from kvbench.session.runner import strategy_label
from kvbench.sweep.capacity import Bisection, numeric
from kvbench.sweep.config import DEFAULT_RANGES, SweepSpec
from kvbench.sweep.executor import Executor, make_executor
from kvbench.sweep.grid import Point, expand_grid, group_values, make_point, run_key
from kvbench.sweep.options import display_name, value_text
from kvbench.sweep.point import make_task, read_point
from kvbench.sweep.report import write_sweep_report
from kvbench.sweep.slo import format_slo, meets_slo, slo_violations
from kvbench.sweep.sweep_folder import (
    CAPACITY_CSV,
    CAPACITY_JSON,
    POINTS_CSV,
    REPORT_HTML,
    SWEEP_JSON,
    load_sweep_folder,
    read_points,
)
from kvbench.sweep.table import points_frame, summary_row


class SweepInterrupted(RunInterrupted):
    """Ctrl-C during a sweep: finished points are kept; `--resume` completes the rest."""

    def __init__(self, folder: Path) -> None:
        Exception.__init__(
            self, f"interrupted; finished points are in {folder}; "
                  f"rerun with --resume to complete the sweep"
        )
        self.folder = folder


@dataclass
class SweepResult:
    folder: Path
    points: pd.DataFrame
    capacity: pd.DataFrame | None = None
    report: Path | None = None
    ran: list[str] = field(default_factory=list)  # point ids run now
    reused: list[str] = field(default_factory=list)  # complete already (--resume)
    failed: list[str] = field(default_factory=list)


def default_name(spec: SweepSpec) -> str:
    workload = str(spec.base.get("workload", "chat"))
    stem = Path(workload).stem if workload.endswith(".jsonl") else workload
    return f"{time.strftime('%Y%m%d-%H%M%S')}-sweep-{stem}"


def resolve_folder(spec: SweepSpec, resume: bool) -> Path:
    """`out/name`: a named sweep is reused only with --resume; an unnamed one gets a fresh
    timestamped folder."""
    root = Path(spec.out)
    if spec.name:
        # one folder under `out`, never a path out of it (`../../escape`, `/tmp/x`)
        if "/" in spec.name or "\\" in spec.name or ".." in spec.name or spec.name == ".":
            raise KvbenchInputError(
                f"--name {spec.name!r} must be a folder name, without a path separator or "
                f"'..': the sweep is written under --out {spec.out}")
        return root / spec.name  # one holding a sweep: refused without --resume (run_sweep)
    if resume:
        raise KvbenchInputError("--resume needs the sweep's --name (or its folder as CONFIG)")
    folder = root / default_name(spec)
    k = 2
    while folder.exists():
        folder = root / f"{default_name(spec)}-{k}"
        k += 1
    return folder


class _Sweep:
    def __init__(self, spec: SweepSpec, folder: Path, executor: Executor, resume: bool,
                 command: str, echo: Callable[[str], None]) -> None:
        self.spec, self.folder, self.executor = spec, folder, executor
        self.resume, self.command, self.echo = resume, command, echo
        self.rows: dict[str, dict[str, Any]] = {}
        self.points: dict[str, Point] = {}
        self.by_key: dict[str, str] = {}  # run_key -> point id: one folder per distinct run
        self.in_flight: dict[str, Point] = {}
        self.result = SweepResult(folder, pd.DataFrame())
        self.old_wall: dict[str, float] = {}
        self.planned = 0
        self.finished = 0

    # -- bookkeeping ---------------------------------------------------------------------

    def add(self, point: Point) -> dict[str, Any]:
        row = self.rows.get(point.point_id)
        if row is None:
            row = {"point_id": point.point_id, "values": point.values, "source": point.source,
                   "label": strategy_label(point.run), "status": "pending", "summary": None,
                   "error": None, "wall_s": None}
            self.rows[point.point_id] = row
            self.points[point.point_id] = point
            self.by_key.setdefault(run_key(point.run), point.point_id)
        return row

    def reuse(self, point: Point) -> bool:
        """A complete folder from an earlier attempt (--resume): read it back."""
        if not self.resume:
            return False
        summary = read_point(self.folder / point.point_id)
        if summary is None:
            return False
        row = self.add(point)
        row.update(status="complete", summary=summary, error=None,
                   wall_s=self.old_wall.get(point.point_id))
        self._judge(row)
        self.result.reused.append(point.point_id)
        return True

    def _judge(self, row: dict[str, Any]) -> None:
        if self.spec.slo and row["status"] in ("complete", "failed"):
            row["meets_slo"] = meets_slo(row["summary"], self.spec.slo)

    def submit(self, point: Point) -> None:
        self.add(point)
        self.in_flight[point.point_id] = point
        task = make_task(point.point_id, self.folder / point.point_id, point.run, self.command)
        self.executor.submit(task)

    def wait(self) -> dict[str, Any]:
        record = self.executor.wait_one()
        point_id = record["point_id"]
        self.in_flight.pop(point_id, None)
        row = self.rows[point_id]
        row.update(status=record["status"], summary=record.get("summary"),
                   error=record.get("error"), wall_s=record.get("wall_s"))
        self._judge(row)
        self.result.ran.append(point_id)
        if row["status"] != "complete":
            self.result.failed.append(point_id)
        self.finished += 1
        self._report_progress(row)
        self.write_table()
        return row

    def _report_progress(self, row: dict[str, Any]) -> None:
        total = f"/{self.planned}" if self.planned else ""
        head = f"[{self.finished}{total}] {row['point_id']}"
        wall = f" in {row['wall_s']:.1f} s" if row.get("wall_s") is not None else ""
        if row["status"] != "complete":
            self.echo(f"{head}: {row['status']}{wall}: {row.get('error')}")
            return
        m = summary_row(row["summary"])
        text = (f"{head}: {_num(m.get('output_tok_s'))} out tok/s, TTFT p99 "
                f"{_num(m.get('ttft_p99_ms'))} ms, TPOT p99 {_num(m.get('tpot_p99_ms'))} ms")
        if "meets_slo" in row:
            text += ", meets SLO" if row["meets_slo"] else ", misses SLO"
        self.echo(text + wall)

    def frame(self) -> pd.DataFrame:
        """Rows in grid order, search probes among them by the value of the searched axis."""
        rows = sorted(self.rows.values(), key=self._order)
        searched = self.spec.search.axis if self.spec.search else None
        if searched is not None and searched not in self.spec.axes:
            # grid points run at the base value of the searched option: show it
            rows = [row if searched in row["values"] else
                    {**row, "values": {**row["values"], searched: option_value(
                        self.points[row["point_id"]].run, searched)}} for row in rows]
        return points_frame(rows, self.spec.axis_names())

    def _order(self, row: dict[str, Any]) -> list[tuple[int, float]]:
        """Grid order: each axis by its values' place in the axis, the searched one by value;
        values from elsewhere last."""
        key = []
        searched = self.spec.search.axis if self.spec.search else None
        for axis in self.spec.axis_names():
            value, listed = row["values"].get(axis), self.spec.axes.get(axis, [])
            if axis == searched:
                try:
                    key.append((0, float(value)))
                except (TypeError, ValueError):
                    key.append((1, 0.0))
            else:
                key.append((0, float(listed.index(value))) if value in listed else (1, 0.0))
        return key

    def write_table(self) -> pd.DataFrame:
        frame = self.frame()
        write_csv(self.folder / POINTS_CSV, frame)
        return frame

    # -- phases --------------------------------------------------------------------------

    def run_grid(self, grid: list[Point]) -> None:
        todo = [p for p in grid if not self.reuse(p)]
        for point in todo:
            self.add(point)
        self.planned = len(todo)
        if self.result.reused:
            self.echo(f"--resume: {len(self.result.reused)} complete point(s) kept, "
                      f"{len(todo)} to run")
        queue = list(todo)
        while queue or self.in_flight:
            while queue and len(self.in_flight) < self.executor.capacity:
                self.submit(queue.pop(0))
            self.wait()

    def run_search(self) -> list[dict[str, Any]]:
        search = self.spec.search
        assert search is not None
        axis = search.axis
        lo, hi = (given if given is not None else default
                  for given, default in zip((search.lo, search.hi), DEFAULT_RANGES[axis], strict=True))
        if not lo < hi:
            raise KvbenchInputError(f"--search-range needs LO < HI, got {lo:g},{hi:g}")
        by_group: dict[str, dict[str, Any]] = {}
        for values in group_values(self.spec, axis):  # groups whose runs are the same are one
            by_group.setdefault(_group_key(self._probe(values, axis, lo).run, axis), {
                "values": values, "busy": None,  # busy: (point id, value) of its probe running
                "bisection": Bisection(float(lo), float(hi), search.tolerance,
                                       axis == "max_concurrency")})
        for row in self.rows.values():  # points already run seed the brackets
            value = numeric(row["values"].get(axis))
            if value is None or row["status"] not in ("complete", "failed"):
                continue
            found = by_group.get(_group_key(self.points[row["point_id"]].run, axis))
            if found is not None:
                found["bisection"].record(value, bool(row.get("meets_slo")))
        searches = list(by_group.values())
        self.planned = 0
        self.echo(f"SLO capacity search over {display_name(axis)} "
                  f"({format_slo(self.spec.slo)}), {len(searches)} group(s), "
                  f"range {lo:g}..{hi:g}, tolerance {search.tolerance:.0%}")
        while True:
            for s in searches:
                while s["busy"] is None and len(self.in_flight) < self.executor.capacity:
                    value = s["bisection"].next_value()
                    if value is None:
                        break
                    point = self._probe(s["values"], axis, value)
                    row = self.rows.get(point.point_id)
                    if (row is not None and row["status"] == "complete") or self.reuse(point):
                        s["bisection"].record(value, bool(self.rows[point.point_id]
                                                          .get("meets_slo")))
                    else:
                        s["busy"] = (point.point_id, value)
                        self.submit(point)
            if not self.in_flight:
                break
            row = self.wait()
            for s in searches:
                if s["busy"] and s["busy"][0] == row["point_id"]:
                    s["bisection"].record(s["busy"][1], bool(row.get("meets_slo")))
                    s["busy"] = None
        return [self._capacity_row(s["values"], s["bisection"], axis) for s in searches]

    def _probe(self, values: dict[str, Any], axis: str, value: float) -> Point:
        typed: Any = int(value) if axis == "max_concurrency" else value_text(value)
        ordered: dict[str, Any] = {}
        for name in self.spec.axes:
            ordered[name] = typed if name == axis else values[name]
        ordered.setdefault(axis, typed)
        point = make_point(self.spec, ordered, source="search")
        same = self.by_key.get(run_key(point.run), point.point_id)
        return self.points.get(same, point)

    def _capacity_row(self, values: dict[str, Any], bisection: Bisection,
                      axis: str) -> dict[str, Any]:
        outcome = bisection.outcome()
        at, miss = (self._probe(values, axis, outcome[end]).point_id
                    if outcome[end] is not None else None for end in ("lo", "hi"))
        metrics = summary_row(self.rows[at]["summary"] if at in self.rows else None)
        return {
            **{display_name(k): v for k, v in values.items()},
            "label": strategy_label(self._probe(values, axis, bisection.lo).run),
            "axis": display_name(axis), **outcome, "point_id": at,
            **{f"{key}_at_capacity": metrics.get(key)
               for key in ("output_tok_s", "ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")},
            "miss_above": "; ".join(slo_violations(self.rows[miss]["summary"], self.spec.slo))
            if miss in self.rows else None,
            "slo": format_slo(self.spec.slo),
        }


def _group_key(run, axis: str) -> str:
    """A run's identity without the searched axis (`request_rate` or `max_concurrency`)."""
    data = run.to_dict()
    data[axis] = None
    return json.dumps(data, sort_keys=True, default=str)


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def run_sweep(
    spec: SweepSpec,
    folder: str | Path | None = None,
    *,
    executor: Executor | None = None,
    resume: bool = False,
    command: str = "",
    echo: Callable[[str], None] | None = None,
    point_reports: bool = False,
    write_report: bool = True,
) -> SweepResult:
    """Run every point of `spec` (and its capacity search) into `folder`.

    `folder` None: `resolve_folder(spec, resume)`. `executor` None: the spec's (`local` by
    default). Failed points are in the result (`failed`), not raised.
    """
    spec.normalize().check()
    grid = expand_grid(spec)  # every point's options checked before anything runs
    check_output_folder(Path(folder).parent if folder is not None else spec.out)
    claim = folder is None and not spec.name  # a fresh timestamped folder
    folder = Path(folder) if folder is not None else resolve_folder(spec, resume)
    echo = echo or (lambda _message: None)
    old = _check_existing(folder, spec, resume)
    own = executor is None
    if executor is None:  # before the folder is written: a missing Ray leaves nothing behind
        executor = make_executor(spec.executor.kind, address=spec.executor.address,
                                 jobs=spec.executor.jobs, sweep_kind=spec.kind,
                                 device=str(spec.base.get("device", "auto")))
    try:
        if claim:  # two sweeps started in the same second never share a folder
            folder = claim_folder(folder.parent, folder.name)
        folder.mkdir(parents=True, exist_ok=True)
        commands = (old or {}).get("commands", []) + ([command] if command else [])
        write_json(folder / SWEEP_JSON, {
            "spec": spec.to_dict(),
            "command": commands[0] if commands else command,
            "commands": commands,
            "created": (old or {}).get("created") or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "points": [{"point_id": p.point_id, "values": p.values, "duplicates": p.duplicates}
                       for p in grid],
        })
    except BaseException:
        if own:
            executor.close()
        raise
    echo(f"sweep {folder} ({spec.kind}, executor {spec.executor.kind})")
    sweep = _Sweep(spec, folder, executor, resume, command, echo)
    if resume:
        sweep.old_wall = _old_wall_times(folder)
    for point in grid:
        for dup in point.duplicates:
            echo(f"note: {dup} is the same run as {point.point_id}; run once")
    capacity_rows: list[dict[str, Any]] | None = None
    try:
        sweep.run_grid(grid)
        if spec.search is not None:
            capacity_rows = sweep.run_search()
    except (KeyboardInterrupt, RunInterrupted):
        executor.close(cancel=True)
        for point_id in list(sweep.in_flight):
            sweep.rows[point_id]["status"] = "interrupted"
        sweep.write_table()
        raise SweepInterrupted(folder) from None
    finally:
        if own:
            executor.close()
    result = sweep.result
    result.points = sweep.write_table()
    if capacity_rows is not None:
        result.capacity = pd.DataFrame.from_records(capacity_rows)
        write_csv(folder / CAPACITY_CSV, result.capacity)
        write_json(folder / CAPACITY_JSON, {"slo_ms": spec.slo,
                                            "search": spec.to_dict()["search"],
                                            "groups": capacity_rows})
    if write_report:
        result.report = write_sweep_report(folder, spec, result.points, result.capacity,
                                           commands[-1] if commands else "")
    if point_reports:
        _point_reports(folder, result.ran)
    return result


def _check_existing(folder: Path, spec: SweepSpec, resume: bool) -> dict[str, Any] | None:
    path = folder / SWEEP_JSON
    if not path.exists():
        return None
    if not resume:
        raise KvbenchInputError(
            f"{folder} already holds a sweep: add --resume to finish it, or give another --name"
        )
    old_spec, data = load_sweep_folder(folder)
    before, now = old_spec.identity(), spec.identity()
    if json.dumps(before, sort_keys=True, default=str) != json.dumps(now, sort_keys=True,
                                                                      default=str):
        changed = sorted(k for k in now if before.get(k) != now.get(k))
        raise KvbenchInputError(
            f"--resume: {folder} holds another sweep (differs in {', '.join(changed)}); "
            "resume with the same grid, or give another --name"
        )
    return data


def _old_wall_times(folder: Path) -> dict[str, float]:
    try:
        frame = read_points(folder, ["point_id", "wall_s"]).dropna()
    except KvbenchInputError:  # none yet, or not ours
        return {}
    return dict(zip(frame["point_id"].astype(str), frame["wall_s"].astype(float), strict=True))


def _point_reports(folder: Path, point_ids: list[str]) -> None:
    for point_id in point_ids:
        path = folder / point_id
        if read_point(path) is not None:
            kvbench.report.writer.write_report([path], path / REPORT_HTML)
