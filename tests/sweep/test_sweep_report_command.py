"""`kvbench report SWEEP_FOLDER` rebuilds the sweep's own report (its points in grid order,
its Pareto front), not the multi-run comparison of the point folders."""

from __future__ import annotations

import re

import pytest

from kvbench.cli import main
from kvbench.sweep import SweepSpec, run_sweep
from kvbench.sweep.local import LocalExecutor


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    spec = SweepSpec(
        kind="simulate",
        base={"model": "llama-2-7b", "gpu": "a100-40gb", "workload": "uniform",
              "num-requests": 8, "warmup": 0},
        axes={"request-rate": [2, 32, 8]},
        out=str(out),
    )
    run_sweep(spec, out / "s", executor=LocalExecutor(1))
    return out / "s"


def test_report_on_a_sweep_folder_gives_the_sweep_report(sweep_folder, tmp_path, capsys):
    written = sweep_folder / "report.html"
    built_by_the_sweep = written.read_text()
    written.unlink()
    assert main(["report", str(sweep_folder)]) == 0
    assert capsys.readouterr().out.strip() == str(written)
    page = written.read_text()
    assert "<h1>sweep " in page and "Pareto front" in page
    assert "<h1>kvbench report</h1>" not in page  # not the comparison of the point folders
    assert _without_div_ids(page) == _without_div_ids(built_by_the_sweep)
    other = tmp_path / "sweep.html"
    assert main(["report", str(sweep_folder), "-o", str(other)]) == 0
    assert _without_div_ids(other.read_text()) == _without_div_ids(page)


def _without_div_ids(page: str) -> str:
    """The page with plotly's random div ids blanked."""
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "id", page)


def test_a_sweep_folder_beside_other_folders_is_refused(sweep_folder, capsys):
    point = next(p for p in sweep_folder.iterdir() if p.is_dir())
    assert main(["report", str(sweep_folder), str(point)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sweep" in err


def test_an_empty_output_name_is_refused(sweep_folder, capsys):
    assert main(["report", str(sweep_folder), "-o", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-o is empty" in err
