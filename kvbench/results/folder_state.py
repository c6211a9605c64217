"""Whether a results folder is whole, as its files say: what every command that reads
results checks before it trusts them (docs/design.md, Results contract).

A run folder is whole when it has no INCOMPLETE marker and no partial file, its
`kvbench_summary.json` reads and says `complete`, and its `requests.csv` (a row per sample of each request) and
`steps.csv`, where present, read with their columns (a folder kept to its summary, as a CI
baseline may be, is whole). A folder of several runs (a comparison, `--repeat`) is whole when it has no marker
and every run folder its `plan.json` lists (or, for a folder written before plan files,
`comparison.json` or its subfolders) is whole; a run the plan names whose folder was never
made is named too. Each problem is one phrase, named by the run (`contiguous-max`,
`paged/rep-2`), so a command can refuse or warn in one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.errors import KvbenchInputError
from kvbench.results.files import INCOMPLETE_MARKER, PLAN_FILE
from kvbench.results.request_writer import REQUESTS_PARTIAL
from kvbench.results.summary import SUMMARY_FILE, Summary, summary_file

if TYPE_CHECKING:
    import pandas as pd

STEPS_PARTIAL = ".steps.csv.partial"
# Columns every kvbench version has written; a file without them is not a requests.csv.
REQUEST_COLUMNS = ("request_id", "arrival_s", "prompt_len", "output_len", "completed")
STEP_COLUMNS = ("step", "t_s", "step_ms")


@dataclass(frozen=True)
class RunProblem:
    """What is wrong with one run (or with the folder holding several)."""

    name: str  # the run as its folder names it: `paged`, `paged/rep-2`, or the folder
    path: Path
    what: str

    def __str__(self) -> str:
        return f"{self.name} {self.what}"


def marker_status(folder: Path) -> str | None:
    """What the folder's INCOMPLETE marker says (None without one; `unreadable` when it
    does not parse: its presence alone says the folder is not whole)."""
    marker = Path(folder) / INCOMPLETE_MARKER
    if not marker.exists():
        return None
    return str(_marker(folder).get("status") or "unreadable")


def _marker(folder: Path) -> dict:
    try:
        data = json.loads((Path(folder) / INCOMPLETE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe_marker(folder: Path) -> str:
    data = _marker(folder)
    status = str(data.get("status") or "unreadable")
    if status == "running":
        return "running or killed"
    message = str(data.get("message") or "")
    return f"{status} ({message})" if status == "failed" and message else status


def read_partial_requests(folder: Path) -> pd.DataFrame:
    """The rows of `.requests.csv.partial`: every request a killed run had finished (a last
    line cut short by the kill is dropped); empty when there are none."""
    import pandas as pd  # (only to read a folder back)

    path = Path(folder) / REQUESTS_PARTIAL
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return pd.DataFrame()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    if not text.strip():
        return pd.DataFrame()
    try:
        frame = pd.read_csv(StringIO(text))
    except (ValueError, pd.errors.EmptyDataError):
        return pd.DataFrame()
    return frame if all(c in frame.columns for c in REQUEST_COLUMNS) else pd.DataFrame()


def _requests_problem(folder: Path, summary: Summary | None) -> str | None:
    path = Path(folder) / "requests.csv"
    if not path.is_file():
        return None  # a folder kept to its summary (a CI's baseline): nothing misread
    import pandas as pd  # (only to read a folder back)

    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        return f"has an unreadable requests.csv ({str(err).splitlines()[0][:80]})"
    missing = [c for c in REQUEST_COLUMNS if c not in frame.columns]
    if missing:
        return f"has an unreadable requests.csv (no {', '.join(missing)} column)"
    expected = summary.num_requests if summary is not None else None
    requests = frame["request_id"].nunique()  # a row per sample: n rows for n samples
    if summary is not None and summary.status == "complete" and expected is not None \
            and requests != expected:
        return f"has {requests} requests in requests.csv for {expected}"
    return None


def _steps_problem(folder: Path) -> str | None:
    path = Path(folder) / "steps.csv"
    if not path.is_file():
        return None
    try:
        with path.open(encoding="utf-8") as handle:
            header = handle.readline().strip().split(",")
    except (OSError, ValueError):
        return "has an unreadable steps.csv"
    if not all(c in header for c in STEP_COLUMNS):
        return "has an unreadable steps.csv (not its columns)"
    return None


def run_problem(folder: Path, name: str | None = None) -> RunProblem | None:
    """What is wrong with one run folder (None when it is whole)."""
    folder = Path(folder)
    name = name or folder.name
    if not folder.is_dir():
        return RunProblem(name, folder, "never started (no folder)")
    parts: list[str] = []
    if (folder / INCOMPLETE_MARKER).exists():
        parts.append(_describe_marker(folder))
    summary = None
    summary_path = summary_file(folder)
    if summary_path is None:
        parts.append(f"no {SUMMARY_FILE}")
    else:
        try:
            summary = Summary.from_json(summary_path)
        except KvbenchInputError:
            parts.append(f"unreadable {summary_path.name}")
        else:
            if summary.status not in (None, "complete") and not parts:
                parts.append(f"{summary.status} ({summary_path.name})")
    if summary is not None:
        parts.extend(p for p in (_requests_problem(folder, summary), _steps_problem(folder))
                     if p)
    partial = folder / REQUESTS_PARTIAL
    if partial.exists():
        kept = len(read_partial_requests(folder))
        parts.append(f"{kept} finished request{'s' if kept != 1 else ''} kept in "
                     f"{REQUESTS_PARTIAL}" if kept else f"no finished request in {REQUESTS_PARTIAL}")
    steps = folder / STEPS_PARTIAL
    if steps.exists():
        # Steps are written in batches: a killed run's file may hold none of them yet.
        empty = steps.stat().st_size == 0
        parts.append(f"an empty {STEPS_PARTIAL}" if empty else f"steps so far in {STEPS_PARTIAL}")
    if not parts:
        return None
    return RunProblem(name, folder, f"({'; '.join(parts)})")


def planned_runs(folder: Path) -> list[tuple[str, Path]] | None:
    """(name, folder) of every run a folder of several runs holds or should hold: from its
    `plan.json`, else its `comparison.json`, else its subfolders that are runs; None for a
    folder that is one run."""
    folder = Path(folder)
    for listing in (PLAN_FILE, "comparison.json"):
        path = folder / listing
        if path.is_file():
            try:
                runs = json.loads(path.read_text(encoding="utf-8")).get("runs") or []
            except (OSError, ValueError, AttributeError):
                raise KvbenchInputError(f"cannot read {path}: not a kvbench {listing}") from None
            return [(str(r["folder"]), folder / str(r["folder"])) for r in runs
                    if isinstance(r, dict) and r.get("folder")]
    if summary_file(folder) is not None or (folder / "config.json").is_file():
        return None
    runs = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if _looks_like_run(sub):
            runs.append((sub.name, sub))  # a strategy, or one repeat of a single strategy
        runs += [(f"{sub.name}/{rep.name}", rep) for rep in sorted(sub.glob("rep-*"))
                 if rep.is_dir() and _looks_like_run(rep)]
    return runs or None


def _label(folder: Path) -> str:
    """A single run's strategy label (config.json's), else its folder's name."""
    try:
        label = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("label")
    except (OSError, ValueError, AttributeError):
        label = None
    return str(label) if label else folder.name


def _looks_like_run(folder: Path) -> bool:
    return summary_file(folder) is not None or any(
        (folder / name).exists() for name in ("config.json", INCOMPLETE_MARKER))


def folder_problems(folder: Path) -> list[RunProblem]:
    """Every unfinished, failed or unreadable part of a user-given results folder: each run
    of it that is not whole, and the folder's own INCOMPLETE marker when every run is."""
    folder = Path(folder)
    if not folder.is_dir():
        return []  # not a results folder at all: its reader says so
    planned = planned_runs(folder)
    if planned is None and not _looks_like_run(folder):
        return []
    if planned is None:
        problem = run_problem(folder, _label(folder))
        return [problem] if problem else []
    problems = [p for name, path in planned if (p := run_problem(path, name))]
    if not problems and (folder / INCOMPLETE_MARKER).exists():
        problems.append(RunProblem(folder.name, folder, f"({_describe_marker(folder)}: "
                                   "its comparison files were not written)"))
    return problems


def describe(problems: list[RunProblem]) -> str:
    """The problems as one line's worth: `contiguous-max (running or killed; ...), ...`."""
    return ", ".join(str(p) for p in problems)


def check_finished(folders: list[Path], *, allow_incomplete: bool, refusal: str) -> str | None:
    """Refuse (KvbenchInputError, one line naming every unfinished, failed or unreadable
    run) unless `allow_incomplete`; then return the one-line warning (None when whole).
    `refusal` ends the error: what the caller does instead, and the way out."""
    distinct = list({Path(f).resolve(): Path(f) for f in folders}.values())
    found = [(f, problems) for f in distinct if (problems := folder_problems(f))]
    if not found:
        return None
    text = "; ".join(f"{folder} is not whole: {describe(problems)}"
                     for folder, problems in found)
    if not allow_incomplete:
        raise KvbenchInputError(f"{text}; {refusal}")
    return text


__all__ = ["REQUEST_COLUMNS", "STEPS_PARTIAL", "RunProblem", "check_finished", "describe",
           "folder_problems",
           "marker_status", "planned_runs", "read_partial_requests", "run_problem"]
