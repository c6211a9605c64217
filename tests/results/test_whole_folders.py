"""report, compare and export check one completeness: every results file of a run present
and whole (requests.csv, steps.csv, the token file), refused in one line with exit 2 unless
--allow-incomplete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kvbench.cli import main

SIM = ["simulate", "--model", "llama-2-7b", "--workload", "uniform",
       "--workload-param", "prompt_len=64", "--workload-param", "output_len=16",
       "--warmup", "0", "--num-requests", "6", "--strategy", "paged", "--quiet"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole")
    assert main([*SIM, "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    return folder


def _missing_steps(folder: Path) -> str:
    (folder / "steps.csv").unlink()
    return "has no steps.csv"


def _truncated_parquet(folder: Path) -> str:
    path = folder / "tokens.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "unreadable tokens.parquet"


def _parquet_missing_rows(folder: Path) -> str:
    path = folder / "tokens.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 1), path)
    return "rows in tokens.parquet"


def _truncated_jsonl(folder: Path) -> str:
    # A folder written before tokens.parquet holds tokens.jsonl; cut inside its last line.
    path = folder / "tokens.parquet"
    rows = pq.read_table(path).to_pylist()
    path.unlink()
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (folder / "tokens.jsonl").write_text(text[:-10])
    return "truncated tokens.jsonl"


def _jsonl_missing_lines(folder: Path) -> str:
    path = folder / "tokens.parquet"
    rows = pq.read_table(path).to_pylist()
    path.unlink()
    (folder / "tokens.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:-2]))
    return "rows in tokens.jsonl"


def _truncated_steps(folder: Path) -> str:
    path = folder / "steps.csv"
    path.write_bytes(path.read_bytes()[:-3])
    return "truncated steps.csv"


def _truncated_requests(folder: Path) -> str:
    path = folder / "requests.csv"
    path.write_bytes(path.read_bytes()[:-3])
    return "requests.csv"


DAMAGES = [_missing_steps, _truncated_parquet, _parquet_missing_rows, _truncated_jsonl,
           _jsonl_missing_lines, _truncated_steps, _truncated_requests]


def _commands(folder: Path, whole: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", str(folder), "-o", str(tmp_path / "r.html")],
        "compare": ["compare", str(whole), str(folder)],
        "export": ["export", str(folder), "--format", "vllm-bench",
                   "-o", str(tmp_path / "e.json")],
    }


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.__name__.strip("_"))
@pytest.mark.parametrize("command", ["report", "compare", "export"])
def test_a_folder_not_whole_is_refused_in_one_line(whole, tmp_path, capsys, damage, command):
    folder = tmp_path / "run"
    shutil.copytree(whole, folder)
    what = damage(folder)
    assert main(_commands(folder, whole, tmp_path)[command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvbench: error:")
    assert f"{folder} is not whole" in err and what in err and "--allow-incomplete" in err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "e.json").exists()


@pytest.mark.parametrize("command", ["report", "compare", "export"])
def test_allow_incomplete_goes_on_with_a_warning(whole, tmp_path, capsys, command):
    folder = tmp_path / "run"
    shutil.copytree(whole, folder)
    _missing_steps(folder)
    assert main([*_commands(folder, whole, tmp_path)[command], "--allow-incomplete"]) == 0
    assert "has no steps.csv" in capsys.readouterr().err


def test_a_whole_folder_and_one_kept_to_its_summary_pass(whole, tmp_path, capsys):
    for command in _commands(whole, whole, tmp_path).values():
        assert main(command) == 0, capsys.readouterr().err
    summary_only = tmp_path / "baseline"
    summary_only.mkdir()
    for name in ("kvbench_summary.json", "config.json"):
        shutil.copy(whole / name, summary_only / name)
    assert main(["compare", str(summary_only), str(whole)]) == 0
