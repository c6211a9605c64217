"""Faults a run meets unattended: Ctrl-C mid-comparison, a full disk, SIGKILL, two runs
started in the same second, and a sweep resumed after SIGKILL."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd

import kvbench.results.files
import kvbench.session.runner
from kvbench.cli import main
from kvbench.results.files import INCOMPLETE_MARKER, ResultsFolder
from kvbench.session.run_options import RunOptions
from kvbench.session.session import plan_session, run_session, unique_folder

SIM = ["simulate", "--model", "llama-2-7b", "--workload", "uniform",
       "--workload-param", "prompt_len=64", "--workload-param", "output_len=16",
       "--warmup", "0", "--quiet"]


def _marker(folder: Path) -> dict:
    return json.loads((folder / INCOMPLETE_MARKER).read_text())


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kvbench: error:")]


def test_ctrl_c_in_the_second_strategy_marks_the_comparison_and_names_what_finished(
        tmp_path, monkeypatch, capsys):
    real = kvbench.session.runner._replay
    calls: list[int] = []

    def replay(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(kvbench.session.runner, "_replay", replay)
    code = main([*SIM, "--num-requests", "8", "--strategy", "contiguous,paged,prefix",
                 "--out", str(tmp_path)])
    assert code == 130
    err = capsys.readouterr().err
    assert _error_lines(err) == [line for line in err.splitlines() if line]
    assert "finished: contiguous-max;" in err and "Traceback" not in err
    (root,) = tmp_path.iterdir()
    marker = _marker(root)
    assert marker["status"] == "interrupted" and marker["finished"] == ["contiguous-max"]
    assert ResultsFolder.is_complete(root / "contiguous-max")
    assert _marker(root / "paged")["status"] == "interrupted"
    assert not (root / "prefix").exists()


def test_ctrl_c_among_repeats_names_how_many_repeats_finished(tmp_path, monkeypatch, capsys):
    real = kvbench.session.runner._replay
    calls: list[int] = []

    def replay(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(kvbench.session.runner, "_replay", replay)
    assert main([*SIM, "--num-requests", "4", "--strategy", "contiguous,paged", "--repeat", "2",
                 "--out", str(tmp_path)]) == 130
    capsys.readouterr()
    (root,) = tmp_path.iterdir()
    expected = []  # from the folders: whichever order the repeats ran in
    for label in ("contiguous-max", "paged"):
        done = sum(ResultsFolder.is_complete(root / label / f"rep-{k}") for k in (1, 2))
        if done:
            expected.append(label if done == 2 else f"{label} ({done}/2 repeats)")
    assert _marker(root)["finished"] == expected and expected


def test_a_full_disk_mid_run_keeps_what_was_written_and_exits_1(tmp_path, monkeypatch, capsys):
    real = kvbench.results.files.atomic_write_text

    def write(path, text):
        if Path(path).name == "tokens.jsonl":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(kvbench.results.files, "atomic_write_text", write)
    monkeypatch.setattr(kvbench.session.runner, "atomic_write_text", write)
    code = main([*SIM, "--num-requests", "4", "--out", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("kvbench: error: disk full")
    (folder,) = tmp_path.iterdir()
    assert (folder / "config.json").is_file() and (folder / "requests.csv").is_file()
    assert (folder / INCOMPLETE_MARKER).is_file() and not (folder / "summary.json").exists()
    assert not list(folder.glob(".*"))  # no temporary file left behind


def test_a_full_disk_before_the_first_file_leaves_no_folder_and_one_line(
        tmp_path, monkeypatch, capsys):
    def write(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(kvbench.results.files, "atomic_write_bytes", write)
    assert main([*SIM, "--num-requests", "4", "--out", str(tmp_path)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1 and "No space left on device" in lines[0]
    assert list(tmp_path.iterdir()) == []  # no unmarked folder that looks finished


def test_runs_started_in_the_same_second_never_share_a_folder(tmp_path):
    barrier = threading.Barrier(8)
    claimed: list[Path] = []

    def claim() -> None:
        barrier.wait()
        claimed.append(unique_folder(tmp_path, "20260101-000000-paged-chat"))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(claimed)) == 8 and all(p.is_dir() for p in claimed)

    # Two sessions planned in the same second (one folder name) write two folders.
    options = RunOptions.for_kind("simulate", model="llama-2-7b", num_requests=4, warmup=0,
                                  out=str(tmp_path / "s"))
    plans = [plan_session(options) for _ in range(2)]
    plans[1].root = plans[0].root
    roots = [run_session(plan).root for plan in plans]
    assert roots[0] != roots[1]
    assert all(ResultsFolder.is_complete(root) for root in roots)


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the subprocess")
        time.sleep(0.05)


# A kvbench process whose replay hangs in its `hang_at`-th run, where it is killed.
_HANGING_KVBENCH = """
import sys, time
import kvbench.session.runner as runner
real, calls = runner._replay, []
def replay(*args, **kwargs):
    calls.append(1)
    if len(calls) == int(sys.argv[1]):
        time.sleep(600)
    return real(*args, **kwargs)
runner._replay = replay
from kvbench.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _kill_when(args: list[str], hang_at: int, ready) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _HANGING_KVBENCH, str(hang_at), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(ready)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_run_killed_with_sigkill_is_recognised_as_incomplete(tmp_path, capsys):
    _kill_when([*SIM, "--num-requests", "4", "--out", str(tmp_path)], 1,
               lambda: any((p / "config.json").is_file() for p in tmp_path.glob("*")))
    (folder,) = tmp_path.iterdir()
    assert _marker(folder)["status"] == "running"  # there from the start
    json.loads((folder / "config.json").read_text())  # whole, never truncated
    for command in (["report", str(folder)], ["compare", str(folder), str(folder)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("kvbench: error:") and f"{folder} did not finish" in err
        assert err.count("\n") == 1


def test_a_sweep_killed_with_sigkill_resumes_with_only_the_unfinished_points(
        tmp_path, monkeypatch):
    args = ["sweep", "--simulate", "--model", "llama-2-7b", "--workload", "uniform",
            "--workload-param", "prompt_len=64", "--workload-param", "output_len=16",
            "--warmup", "0", "--num-requests", "4,6,8", "--quiet",
            "--out", str(tmp_path), "--name", "s"]
    folder = tmp_path / "s"
    first, second = folder / "num_requests=4", folder / "num_requests=6"
    _kill_when(args, 2, lambda: (second / "config.json").is_file())
    assert ResultsFolder.is_complete(first) and not ResultsFolder.is_complete(second)
    done_ns = (first / "summary.json").stat().st_mtime_ns

    real = kvbench.session.runner._replay
    counted: list[int] = []

    def replay(engine, workload, *rest, **kwargs):
        counted.append(len(workload.requests))
        return real(engine, workload, *rest, **kwargs)

    monkeypatch.setattr(kvbench.session.runner, "_replay", replay)
    assert main([*args, "--resume"]) == 0
    assert (first / "summary.json").stat().st_mtime_ns == done_ns  # not rerun
    assert sorted(counted) == [6, 8]  # the killed point and the one never started
    table = pd.read_csv(folder / "points.csv")
    assert set(table["status"]) == {"complete"}
    assert not os.path.exists(second / INCOMPLETE_MARKER)
