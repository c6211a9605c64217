"""Interrupting a sweep (Ctrl-C inside a point's run) and finishing it with `--resume`."""

from __future__ import annotations

import json

import pandas as pd

import kvbench.session.runner
from kvbench.cli import main
from kvbench.results.run_folder import is_whole

ARGS = [
    "sweep", "--simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb",
    "--workload", "uniform", "--workload-param", "prompt_len=64",
    "--workload-param", "output_len=16", "--num-requests", "12", "--warmup", "0",
    "--strategy", "contiguous,paged", "--request-rate", "2,8,inf", "--quiet",
]
IDS = [f"strategy={s},request_rate={r}" for s in ("contiguous", "paged") for r in ("2", "8", "inf")]


def _count_replays(monkeypatch, interrupt_at: int | None = None) -> list[int]:
    """Count `_replay` calls (one per point run); Ctrl-C inside call `interrupt_at`."""
    real = kvbench.session.runner._replay
    calls: list[int] = []

    def replay(*args, **kwargs):
        calls.append(1)
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(kvbench.session.runner, "_replay", replay)
    return calls


def test_interrupted_sweep_resumes_without_redoing_complete_points(tmp_path, monkeypatch):
    args = [*ARGS, "--out", str(tmp_path), "--name", "s"]
    folder = tmp_path / "s"

    calls = _count_replays(monkeypatch, interrupt_at=4)
    assert main(args) == 130
    assert len(calls) == 4
    table = pd.read_csv(folder / "points.csv").set_index("point_id")
    assert list(table.loc[IDS, "status"]) == ["complete"] * 3 + ["interrupted"] + ["pending"] * 2
    interrupted = folder / f"{IDS[3]}.partial"  # kept, never renamed whole
    assert json.loads((interrupted / "kvbench_summary.json").read_text())["status"] == \
        "interrupted"
    assert not (folder / IDS[3]).exists()
    done = {i: (folder / i / "kvbench_summary.json").stat().st_mtime_ns for i in IDS[:3]}

    assert main(args) == 2  # the same name without --resume is refused

    calls = _count_replays(monkeypatch)
    assert main([*args, "--resume"]) == 0
    assert len(calls) == 3  # the interrupted point and the two never started
    for point_id, mtime in done.items():
        assert (folder / point_id / "kvbench_summary.json").stat().st_mtime_ns == mtime
    assert all(is_whole(folder / i) for i in IDS)
    assert not list(folder.glob("*.partial"))  # the interrupted point's, run again
    table = pd.read_csv(folder / "points.csv")
    assert list(table["point_id"]) == IDS and set(table["status"]) == {"complete"}
    assert (folder / "report.html").is_file()
    commands = json.loads((folder / "sweep.json").read_text())["commands"]
    assert len(commands) == 2 and "--resume" in commands[1].split()


def test_resume_from_the_sweep_folder_and_refuse_another_grid(tmp_path, monkeypatch):
    args = [*ARGS, "--out", str(tmp_path), "--name", "s"]
    folder = tmp_path / "s"
    calls = _count_replays(monkeypatch, interrupt_at=6)
    assert main(args) == 130
    calls = _count_replays(monkeypatch)
    assert main(["sweep", str(folder), "--quiet"]) == 0  # the folder alone: resume it
    assert len(calls) == 1

    other = [a if a != "2,8,inf" else "2,4" for a in args]
    assert main([*other, "--resume"]) == 2  # another grid in the same folder
    calls = _count_replays(monkeypatch)
    assert main([*args, "--resume"]) == 0 and calls == []  # nothing left to do


def test_report_on_an_interrupted_or_killed_sweep_names_the_points_not_whole(tmp_path,
                                                                              monkeypatch,
                                                                              capsys):
    folder = tmp_path / "s"
    _count_replays(monkeypatch, interrupt_at=4)
    assert main([*ARGS, "--out", str(tmp_path), "--name", "s"]) == 130
    capsys.readouterr()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "3 point(s) not whole" in err
    assert all(i in err for i in IDS[3:]) and not any(f"{i}," in err for i in IDS[:3])
    assert not (folder / "report.html").exists()  # nothing written

    assert main(["report", str(folder), "--allow-incomplete"]) == 0
    assert "3 point(s) not whole" in capsys.readouterr().err
    assert (folder / "report.html").is_file()

    # killed before its first point finished: no points.csv, every point named
    (folder / "points.csv").unlink()
    (folder / "report.html").unlink()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "6 point(s) not whole" in err
    assert not (folder / "report.html").exists()
