"""Running one sweep point into its folder as `kvbench run` runs each of its configurations
(`<point-id>.partial/`, renamed `<point-id>/` once whole).

A task is a plain dict, as it travels to Ray workers and spawned processes. A failure of the
point is in its record (`status` failed, `error`), never raised, so one bad point does not stop
a sweep; Ctrl-C is raised. `gather=True` (Ray) runs into a scratch folder on the worker and
returns its files in the record, which the driver writes (`write_gathered`): a cluster needs
no shared filesystem.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchInputError, KvbenchRunError, RunInterrupted
from kvbench.results.files import atomic_write_bytes
from kvbench.results.run_folder import finish, is_working, run_problem, working
from kvbench.results.summary import Summary
from kvbench.session.run_config import RunConfig
from kvbench.session.runner import as_planned, build, check_run, run_one

_MODEL_CACHE: dict = {}  # per process: points of one model share its weights


def make_task(point_id: str, folder: Path, run: RunConfig, command: str) -> dict[str, Any]:
    """What a worker needs to run one point."""
    return {"point_id": point_id, "folder": str(folder), "run": run.to_dict(),
            "command": command}


def execute_point(task: dict[str, Any], *, gather: bool = False) -> dict[str, Any]:
    """The point's record: point_id, status (complete or failed), summary, error, wall_s."""
    folder = Path(task["folder"])
    target = Path(tempfile.mkdtemp(prefix="kvbench-point-")) / "run" if gather else folder
    for stale in (target, working(target)):
        if stale.exists():
            shutil.rmtree(stale)  # an unfinished earlier attempt: start clean
    work = working(target)
    record: dict[str, Any] = {"point_id": task["point_id"], "status": "complete",
                              "summary": None, "error": None}
    start = time.perf_counter()
    try:
        run = RunConfig.from_dict(task["run"])
        plan, workload = check_run(run, _MODEL_CACHE)
        run = as_planned(run, plan)
        outcome = run_one(run, work, show_progress=False, command=task["command"],
                          prepared=(build(run, plan), workload))
        finish(work)
        record["summary"] = outcome.summary
    except RunInterrupted:
        raise
    except (KvbenchInputError, KvbenchRunError) as err:
        record.update(status="failed", error=str(err).splitlines()[0] if str(err) else "")
    except Exception as err:  # noqa: BLE001 - any failure of a point is its record's
        record.update(status="failed", error=f"{type(err).__name__}: {err}")
    record["wall_s"] = time.perf_counter() - start
    if gather:
        record["whole"] = target.is_dir()
        record["files"] = _read_files(target if target.is_dir() else work)
        shutil.rmtree(target.parent, ignore_errors=True)
    return record


def failed_record(task: dict[str, Any], error: str) -> dict[str, Any]:
    """The record of a point whose worker failed before it could return one."""
    return {"point_id": task["point_id"], "status": "failed", "summary": None,
            "error": error, "wall_s": None}


def _read_files(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def write_gathered(folder: Path, files: dict[str, bytes], whole: bool) -> None:
    """A worker's point folder, rewritten on the driver (`.partial` until whole)."""
    for stale in (folder, working(folder)):
        if stale.exists():
            shutil.rmtree(stale)
    work = working(folder)
    work.mkdir(parents=True)
    for name, data in files.items():
        atomic_write_bytes(work / name, data)
    if whole:
        finish(work)


def read_point(folder: Path) -> Summary | None:
    """The summary of a whole point folder (None when any part of it is unfinished, failed
    or unreadable: a resumed sweep runs it again)."""
    if is_working(folder) or run_problem(folder) is not None:
        return None
    try:
        return Summary.of_folder(folder)
    except KvbenchInputError:
        return None
