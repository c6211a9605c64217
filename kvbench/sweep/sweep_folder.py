"""A sweep folder's own files (beside one results folder per point) and reading its grid back.

```
<sweep>/sweep.json              the grid, the command(s), the point ids
<sweep>/points.csv              one row per point
<sweep>/capacity.csv, .json     the SLO capacity per group (with --search)
<sweep>/report.html             the sweep's report
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.results.summary import read_json_object
from kvbench.sweep.config import SweepSpec

SWEEP_JSON = "sweep.json"
POINTS_CSV = "points.csv"
CAPACITY_CSV = "capacity.csv"
CAPACITY_JSON = "capacity.json"
REPORT_HTML = "report.html"


def is_sweep_folder(folder: Path) -> bool:
    """Whether `folder` is a sweep's folder (it holds `sweep.json`), not a run's."""
    return (Path(folder) / SWEEP_JSON).is_file()


def load_sweep_folder(folder: Path) -> tuple[SweepSpec, dict[str, Any]]:
    """The sweep's spec (its out and name: the folder's) and the whole `sweep.json`."""
    data = read_json_object(Path(folder) / SWEEP_JSON)
    spec = SweepSpec.from_dict(data["spec"]).normalize()
    spec.out, spec.name = str(Path(folder).parent), Path(folder).name
    return spec, data


def read_points(folder: Path, columns: list[str] | None = None):
    """`points.csv` (given `columns`, only those) as a DataFrame."""
    import pandas as pd  # heavy: only what reads a sweep's table loads it

    path = Path(folder) / POINTS_CSV
    try:
        return pd.read_csv(path, usecols=columns)
    except (OSError, ValueError) as err:
        raise KvbenchInputError(f"cannot read {path}: {err}") from None


def unfinished_points(folder: Path) -> list[str]:
    """The points of a sweep folder that are not whole: interrupted, killed while running, or
    never run (a failed point is a result: it is in the table with its error)."""
    _, data = load_sweep_folder(folder)
    status: dict[str, str] = {}
    if (Path(folder) / POINTS_CSV).is_file():
        table = read_points(folder, ["point_id", "status"])
        status = dict(zip(table["point_id"], table["status"], strict=True))
    ids = [p["point_id"] for p in data.get("points", [])]
    ids += [i for i in status if i not in ids]  # search probes
    return [i for i in ids if status.get(i) not in ("complete", "failed")]
