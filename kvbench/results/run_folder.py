"""A results folder's life: written as `<name>.partial/`, renamed `<name>/` once whole, and
the one check every reader of results makes before it trusts them (results/README.md,
Unfinished folders). Each problem is one phrase named by its run (`contiguous-max`,
`paged/rep-2`), so that a command can refuse or warn in one line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

from kvbench.errors import KvbenchInputError
from kvbench.results.files import claim_folder
from kvbench.results.summary import SUMMARY_FILE, Summary, summary_file

if TYPE_CHECKING:
    import pandas as pd

PARTIAL = ".partial"
# Columns every kvbench version has written; a file without them is not a requests.csv.
REQUEST_COLUMNS = ("request_id", "arrival_s", "prompt_len", "output_len", "completed")
STEP_COLUMNS = ("step", "t_s", "step_ms")


def working(folder: Path) -> Path:
    """Where the run that will be `folder` writes until it is whole."""
    folder = Path(folder)
    return folder.with_name(folder.name + PARTIAL)


def is_working(folder: Path) -> bool:
    return Path(folder).name.endswith(PARTIAL)


def run_name(folder: Path) -> str:
    """The folder's name as its run is known: without `.partial`."""
    return Path(folder).name.removesuffix(PARTIAL)


def claim_working_folder(root: Path, name: str) -> Path:
    """`claim_folder` of the working folder `root/<name>.partial`."""
    return claim_folder(root, name, PARTIAL)


def finish(folder: Path) -> Path:
    """Rename the working folder `folder` to its final name, which it returns: the folder
    is whole from now on."""
    folder = Path(folder)
    final = folder.with_name(run_name(folder))
    os.rename(folder, final)
    return final


def is_whole(folder: Path) -> bool:
    """Whether `folder` is a whole run or session folder, as every reader checks it."""
    return Path(folder).is_dir() and not folder_problems(Path(folder))


@dataclass(frozen=True)
class RunProblem:
    """What is wrong with one run (or with the folder holding several)."""

    name: str  # the run as its folder names it: `paged`, `paged/rep-2`, or the folder
    path: Path
    what: str

    def __str__(self) -> str:
        return f"{self.name} {self.what}"


def read_partial_requests(folder: Path) -> pd.DataFrame:
    """The rows a run that stopped before its summary streamed to its `requests.csv`: every
    request it had finished (a last line cut short by a kill is dropped); empty when there
    are none."""
    import pandas as pd  # (only to read a folder back)

    try:
        text = (Path(folder) / "requests.csv").read_text(encoding="utf-8")
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


def _cut_short(path: Path) -> bool:
    """Whether a text file's last line is cut short (lacks its newline)."""
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def _requests_problem(folder: Path, summary: Summary) -> tuple[str | None, int | None]:
    """What is wrong with the folder's requests.csv (None when nothing), and its rows."""
    import pandas as pd  # (only to read a folder back)

    path = Path(folder) / "requests.csv"
    try:
        frame = pd.read_csv(path)
        if _cut_short(path):
            return "has a truncated requests.csv", None
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        return f"has an unreadable requests.csv ({str(err).splitlines()[0][:80]})", None
    missing = [c for c in REQUEST_COLUMNS if c not in frame.columns]
    if missing:
        return f"has an unreadable requests.csv (no {', '.join(missing)} column)", None
    expected = summary.num_requests
    requests = frame["request_id"].nunique()  # a row per sample: n rows for n samples
    if summary.status == "complete" and expected is not None and requests != expected:
        return f"has {requests} requests in requests.csv for {expected}", None
    return None, len(frame)


def _steps_problem(folder: Path) -> str | None:
    path = Path(folder) / "steps.csv"
    try:
        with path.open(encoding="utf-8") as handle:
            header = handle.readline().strip().split(",")
        if _cut_short(path):
            return "has a truncated steps.csv"
    except (OSError, ValueError):
        return "has an unreadable steps.csv"
    if not all(c in header for c in STEP_COLUMNS):
        return "has an unreadable steps.csv (not its columns)"
    return None


def _tokens_problem(path: Path, rows: int | None) -> str | None:
    """What is wrong with the token file: unreadable, cut short, or not a row for each of
    `rows` rows of requests.csv (every sample of a whole run ran)."""
    import pyarrow as pa  # (only to read a folder back)

    from kvbench.results.token_times import JSONL_TOKENS_FILE  # (as tokens_path)

    try:
        if path.name == JSONL_TOKENS_FILE:
            if _cut_short(path):
                return f"has a truncated {path.name}"
            with path.open("rb") as handle:
                count = sum(1 for line in handle if line.strip())
        else:
            import pyarrow.parquet as pq  # (only to read a folder back)

            count = pq.ParquetFile(path).metadata.num_rows
    except (OSError, pa.ArrowException) as err:
        return f"has an unreadable {path.name} ({str(err).splitlines()[0][:80]})"
    if rows is not None and count != rows:
        return f"has {count} rows in {path.name} for {rows} in requests.csv (truncated)"
    return None


def _files_problems(folder: Path, summary: Summary) -> list[str]:
    """What is wrong with a finished run's files: each missing, unreadable or cut short. A
    folder kept to its summary (a CI's baseline: no results file beside it) misreads
    nothing; one written before the token file existed has none."""
    from kvbench.results.token_times import tokens_path  # pyarrow: a folder with files only

    tokens = tokens_path(folder)
    present = [name for name in ("requests.csv", "steps.csv") if (folder / name).is_file()]
    if not present and tokens is None:
        return []
    problems = [f"has no {name}" for name in ("requests.csv", "steps.csv")
                if name not in present]
    rows = None
    if "requests.csv" in present:
        problem, rows = _requests_problem(folder, summary)
        problems.append(problem)
    if "steps.csv" in present:
        problems.append(_steps_problem(folder))
    if tokens is not None:
        problems.append(_tokens_problem(tokens, rows if summary.status == "complete" else None))
    return [p for p in problems if p]


def _stopped_parts(folder: Path) -> list[str]:
    """What a run that stopped before its summary left: its streamed files."""
    parts = ["running or killed (or failed before its summary)"]
    kept = len(read_partial_requests(folder))
    parts.append(f"{kept} finished request{'s' if kept != 1 else ''} kept in requests.csv"
                 if kept else "no finished request in requests.csv")
    steps = folder / "steps.csv"
    if steps.exists():
        # Steps are written in batches: a killed run's file may hold none of them yet.
        parts.append("an empty steps.csv" if steps.stat().st_size == 0
                     else "steps so far in steps.csv")
    return parts


def run_problem(folder: Path, name: str | None = None) -> RunProblem | None:
    """What is wrong with one run folder (None when it is whole)."""
    folder = Path(folder)
    name = name or run_name(folder)
    if not folder.is_dir():
        return RunProblem(name, folder, "never started (no folder)")
    if is_working(folder) and not any(folder.iterdir()):
        return RunProblem(name, folder, "never started")
    summary_path = summary_file(folder)
    if summary_path is None:
        parts = _stopped_parts(folder) if is_working(folder) else [f"no {SUMMARY_FILE}"]
        return RunProblem(name, folder, f"({'; '.join(parts)})")
    try:
        summary = Summary.from_json(summary_path)
    except KvbenchInputError:
        return RunProblem(name, folder, f"(unreadable {summary_path.name})")
    parts = []
    if summary.status not in (None, "complete"):
        parts.append(str(summary.status))
    elif is_working(folder):
        parts.append("running or killed after its run")
    parts.extend(_files_problems(folder, summary))
    return RunProblem(name, folder, f"({'; '.join(parts)})") if parts else None


def _is_run(folder: Path) -> bool:
    return summary_file(folder) is not None or (folder / "config.json").is_file()


def planned_runs(folder: Path) -> list[tuple[str, Path]] | None:
    """(name, folder) of every run a folder of several runs holds: its `comparison.json`'s,
    else its subfolders that are runs, finished or not (`paged`, `paged/rep-2`, an empty
    `prefix.partial` that never started); None for a folder that is one run."""
    folder = Path(folder)
    if _is_run(folder):
        return None
    listing = folder / "comparison.json"
    if listing.is_file():
        try:
            runs = json.loads(listing.read_text(encoding="utf-8")).get("runs") or []
        except (OSError, ValueError, AttributeError):
            raise KvbenchInputError(f"cannot read {listing}: not a kvbench comparison.json") \
                from None
        return [(str(r["folder"]), folder / str(r["folder"])) for r in runs
                if isinstance(r, dict) and r.get("folder")]
    runs = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        reps = sorted(p for p in sub.iterdir() if p.is_dir() and p.name.startswith("rep-"))
        if reps and not _is_run(sub):  # a strategy's repeats
            runs += [(f"{run_name(sub)}/{run_name(rep)}", rep) for rep in reps]
        elif _is_run(sub) or is_working(sub):
            runs.append((run_name(sub), sub))
    return runs or None


def _label(folder: Path) -> str:
    """A single run's strategy label (config.json's), else its folder's name."""
    try:
        label = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("label")
    except (OSError, ValueError, AttributeError):
        label = None
    return str(label) if label else run_name(folder)


def folder_problems(folder: Path) -> list[RunProblem]:
    """Every unfinished, failed or unreadable part of a user-given results folder: each run
    of it that is not whole, and the folder itself when every run is but it is unfinished."""
    folder = Path(folder)
    if not folder.is_dir():
        return []  # not a results folder at all: its reader says so
    planned = planned_runs(folder)
    if planned is None:
        if not _is_run(folder) and not is_working(folder):
            return []
        problem = run_problem(folder, _label(folder))
        return [problem] if problem else []
    problems = [p for name, path in planned if (p := run_problem(path, name))]
    if not problems and is_working(folder):
        problems.append(RunProblem(run_name(folder), folder,
                                   "(running or killed: its comparison files were not written)"))
    return problems


def check_finished(folders: list[Path], *, allow_incomplete: bool, refusal: str) -> str | None:
    """Refuse (KvbenchInputError, one line naming every unfinished, failed or unreadable
    run) unless `allow_incomplete`; then return the one-line warning (None when whole).
    `refusal` ends the error: what the caller does instead, and the way out."""
    distinct = list({Path(f).resolve(): Path(f) for f in folders}.values())
    found = [(f, problems) for f in distinct if (problems := folder_problems(f))]
    if not found:
        return None
    # One line: `results/x is not whole: contiguous-max (running or killed; ...), ...`.
    text = "; ".join(f"{folder} is not whole: {', '.join(map(str, problems))}"
                     for folder, problems in found)
    if not allow_incomplete:
        raise KvbenchInputError(f"{text}; {refusal}")
    return text
