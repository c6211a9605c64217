"""Faults a run meets unattended: Ctrl-C mid-comparison, a full disk, SIGKILL, two runs
started in the same second, and a sweep resumed after SIGKILL; and what every reader of the
folders left behind (report, compare, export, a resumed sweep) makes of them."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import kvbench.results.files
import kvbench.results.run_writer
import kvbench.session.runner
from kvbench.cli import main
from kvbench.report.runs import load_runs
from kvbench.results.run_folder import claim_working_folder, is_whole, working
from kvbench.session.run_options import RunOptions
from kvbench.session.session import plan_session, run_session
from kvbench.sweep.point import read_point

SIM = ["simulate", "--model", "llama-2-7b", "--workload", "uniform",
       "--workload-param", "prompt_len=64", "--workload-param", "output_len=16",
       "--warmup", "0", "--quiet", "--defaults", "classic"]


def _status(folder: Path) -> str:
    return json.loads((folder / "kvbench_summary.json").read_text())["status"]


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kvbench: error:")]


def test_ctrl_c_in_the_second_strategy_leaves_the_comparison_unfinished_naming_what_finished(
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
    assert root.name.endswith(".partial") and not is_whole(root)
    assert is_whole(root / "contiguous-max")
    assert _status(root / "paged.partial") == "interrupted" and not (root / "paged").exists()
    assert not (root / "prefix").exists()
    assert not any((root / "prefix.partial").iterdir())  # never started, named by its folder


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
    err = capsys.readouterr().err
    (root,) = tmp_path.iterdir()
    expected = []  # from the folders: whichever order the repeats ran in
    for label in ("contiguous-max", "paged"):
        done = sum(is_whole(root / label / f"rep-{k}") for k in (1, 2))
        if done:
            expected.append(label if done == 2 else f"{label} ({done}/2 repeats)")
    assert expected and f"finished: {', '.join(expected)};" in err


def test_a_full_disk_mid_run_keeps_what_was_written_and_exits_1(tmp_path, monkeypatch, capsys):
    real = kvbench.results.files.atomic_write_text

    def write(path, text):
        if Path(path).name == "tokens.parquet":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    real_streamed = kvbench.results.files.atomic_file

    def streamed(path):  # tokens.parquet is streamed to its file, not written at once
        if Path(path).name == "tokens.parquet":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_streamed(path)

    monkeypatch.setattr(kvbench.results.files, "atomic_write_text", write)
    monkeypatch.setattr(kvbench.results.run_writer, "atomic_file", streamed)
    code = main([*SIM, "--num-requests", "4", "--out", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("kvbench: error: disk full")
    (folder,) = tmp_path.iterdir()
    assert (folder / "config.json").is_file() and (folder / "requests.csv").is_file()
    assert folder.name.endswith(".partial") and not (folder / "kvbench_summary.json").exists()
    assert not list(folder.glob(".*"))  # no temporary file left behind


def test_a_full_disk_before_the_first_file_leaves_no_folder_that_looks_finished_and_one_line(
        tmp_path, monkeypatch, capsys):
    def write(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(kvbench.results.files, "atomic_write_bytes", write)
    assert main([*SIM, "--num-requests", "4", "--out", str(tmp_path)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1 and "No space left on device" in lines[0]
    (folder,) = tmp_path.iterdir()
    assert folder.name.endswith(".partial") and not any(folder.iterdir())
    assert not is_whole(folder)


def test_runs_started_in_the_same_second_never_share_a_folder(tmp_path):
    barrier = threading.Barrier(8)
    claimed: list[Path] = []

    def claim() -> None:
        barrier.wait()
        claimed.append(claim_working_folder(tmp_path, "20260101-000000-paged-chat"))

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
    assert all(is_whole(root) and not root.name.endswith(".partial") for root in roots)


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
    assert folder.name.endswith(".partial")  # from the start, until whole
    json.loads((folder / "config.json").read_text())  # whole, never truncated
    for command in (["report", str(folder)], ["compare", str(folder), str(folder)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("kvbench: error:") and f"{folder} is not whole" in err
        assert err.count("\n") == 1


def test_a_sweep_killed_with_sigkill_resumes_with_only_the_unfinished_points(
        tmp_path, monkeypatch):
    args = ["sweep", "--simulate", "--model", "llama-2-7b", "--workload", "uniform",
            "--workload-param", "prompt_len=64", "--workload-param", "output_len=16",
            "--warmup", "0", "--num-requests", "4,6,8", "--quiet",
            "--out", str(tmp_path), "--name", "s"]
    folder = tmp_path / "s"
    first, second = folder / "num_requests=4", folder / "num_requests=6"
    _kill_when(args, 2, lambda: (working(second) / "config.json").is_file())
    assert is_whole(first) and not is_whole(second) and working(second).is_dir()
    done_ns = (first / "kvbench_summary.json").stat().st_mtime_ns

    real = kvbench.session.runner._replay
    counted: list[int] = []

    def replay(engine, workload, *rest, **kwargs):
        counted.append(len(workload.requests))
        return real(engine, workload, *rest, **kwargs)

    monkeypatch.setattr(kvbench.session.runner, "_replay", replay)
    assert main([*args, "--resume"]) == 0
    assert (first / "kvbench_summary.json").stat().st_mtime_ns == done_ns  # not rerun
    assert sorted(counted) == [6, 8]  # the killed point and the one never started
    table = pd.read_csv(folder / "points.csv")
    assert set(table["status"]) == {"complete"}
    assert is_whole(second) and not os.path.exists(working(second))


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvbench: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_a_comparison_killed_in_its_second_strategy_is_refused_naming_it(tmp_path, capsys):
    _kill_when([*SIM, "--num-requests", "8", "--strategy", "paged,contiguous",
                "--out", str(tmp_path)], 2,
               lambda: any((p / "contiguous-max.partial" / "config.json").is_file()
                           for p in tmp_path.glob("*")))
    (root,) = tmp_path.iterdir()
    # Every run's folder there from the start; the finished one renamed whole.
    assert sorted(p.name for p in root.iterdir()) == ["contiguous-max.partial", "paged"]
    for command in (["report", str(root)], ["compare", str(root), str(root)],
                    ["export", str(root), "--format", "csv"]):
        assert main(command) == 2, command
        line = _one_error_line(capsys.readouterr().err)
        assert f"{root} is not whole: contiguous-max (running or killed" in line
        assert "steps.csv" in line  # a streamed file is never left unexplained
        assert "paged" not in line.split("is not whole:")[1]  # the finished one is whole
    html = tmp_path / "r.html"
    assert main(["report", str(root), "--allow-incomplete", "-o", str(html)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("kvbench: warning: ") and "contiguous-max" in err
    assert "Incomplete runs" in html.read_text()


def test_a_strategy_that_never_started_is_named(tmp_path, capsys):
    _kill_when([*SIM, "--num-requests", "4", "--strategy", "paged,contiguous,prefix",
                "--out", str(tmp_path)], 2,
               lambda: any((p / "contiguous-max.partial" / "config.json").is_file()
                           for p in tmp_path.glob("*")))
    (root,) = tmp_path.iterdir()
    assert main(["compare", str(root), str(root)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "contiguous-max (running or killed" in line and "prefix never started" in line


# A kvbench process that hangs once `sys.argv[1]` finished requests are on disk.
_HANGING_AFTER_REQUESTS = """
import sys, time
import kvbench.results.request_writer as request_writer
real = request_writer.RequestWriter.write
def write(self, *args, **kwargs):
    real(self, *args, **kwargs)
    if self.rows_written >= int(sys.argv[1]):
        time.sleep(600)
request_writer.RequestWriter.write = write
from kvbench.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_run_killed_with_sigkill_keeps_every_finished_request(tmp_path, capsys):
    args = [*SIM, "--num-requests", "400", "--max-num-seqs", "8"]
    killed_out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HANGING_AFTER_REQUESTS, "40", *args, "--out", str(killed_out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: any(len(p.read_text().splitlines()) > 40
                              for p in killed_out.glob("*.partial/requests.csv")))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (folder,) = killed_out.iterdir()
    assert folder.name.endswith(".partial") and not list(folder.glob(".*"))
    kept = pd.read_csv(folder / "requests.csv")  # the rows streamed as requests finished
    assert len(kept) >= 40 and kept["completed"].all()
    assert not (folder / "kvbench_summary.json").exists()
    # The same rows as the whole run writes for those requests.
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    capsys.readouterr()
    (whole,) = (tmp_path / "whole").iterdir()
    full = pd.read_csv(whole / "requests.csv").set_index("request_id")
    assert not list(whole.glob(".*"))  # no hidden file once the whole files are written
    same = full.loc[kept["request_id"]].reset_index()
    pd.testing.assert_frame_equal(kept[same.columns], same, check_dtype=False)

    assert main(["report", str(folder)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"{len(kept)} finished requests kept in requests.csv" in line
    html = tmp_path / "r.html"
    assert main(["report", str(folder), "--allow-incomplete", "-o", str(html)]) == 0
    assert capsys.readouterr().err.startswith("kvbench: warning: ")
    page = html.read_text()
    assert "Incomplete runs" in page and "running or killed" in page
    (run,) = load_runs([folder]).runs  # what the page shows: figures of the kept requests
    assert run.summary.completed == len(kept) and run.summary.status == "running"
    assert run.summary.latency_ms.ttft.p50 == pytest.approx(kept["ttft_ms"].median())


def test_a_disk_that_stays_full_leaves_every_unfinished_folder_named_so(tmp_path, monkeypatch,
                                                                       capsys):
    real = kvbench.results.files.atomic_write_bytes
    full = []

    def write(path, data):
        if Path(path).name == "tokens.parquet" and "prefix" in str(path):
            full.append(path)
        if full:  # from then on the disk takes no new file
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    real_streamed = kvbench.results.files.atomic_file

    def streamed(path):  # tokens.parquet is streamed to its file, not written at once
        if Path(path).name == "tokens.parquet" and "prefix" in str(path):
            full.append(path)
        if full:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_streamed(path)

    monkeypatch.setattr(kvbench.results.files, "atomic_write_bytes", write)
    monkeypatch.setattr(kvbench.results.run_writer, "atomic_file", streamed)
    code = main([*SIM, "--num-requests", "4", "--strategy", "paged,prefix",
                 "--out", str(tmp_path)])
    assert code == 1
    capsys.readouterr()
    (root,) = tmp_path.iterdir()
    assert root.name.endswith(".partial") and not is_whole(root)
    assert (root / "prefix.partial").is_dir() and not (root / "prefix").exists()
    assert not (root / "prefix.partial" / "kvbench_summary.json").exists()
    assert is_whole(root / "paged")
    assert main(["report", str(root), "-o", str(tmp_path / "r.html")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "prefix (running or killed (or failed before its summary)" in line
    assert "paged" not in line.split("is not whole:")[1]


def _tmpfs(folder: Path, size: str) -> None:
    folder.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(folder)], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")


@pytest.fixture
def small_disk(tmp_path):
    def mount(size: str) -> Path:
        folder = tmp_path / "disk"
        _tmpfs(folder, size)
        mounted.append(folder)
        return folder

    mounted: list[Path] = []
    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=10)


def _names_agree_with_summaries(root: Path) -> None:
    """A folder named whole holds a summary that says so; one that does not is `.partial`."""
    for summary in root.rglob("kvbench_summary.json"):
        if not summary.parent.name.endswith(".partial"):
            assert json.loads(summary.read_text())["status"] == "complete", summary


def test_a_full_disk_with_two_strategies_is_named_and_every_folder_says_so(
        small_disk, tmp_path, capsys):
    disk = small_disk("40k")
    assert main([*SIM, "--num-requests", "40", "--strategy", "paged,prefix",
                 "--out", str(disk)]) == 1
    _one_error_line(capsys.readouterr().err)
    (root,) = disk.iterdir()
    _names_agree_with_summaries(root)
    assert root.name.endswith(".partial")
    assert main(["report", str(root), "-o", str(tmp_path / "r.html")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "prefix" in line and "is not whole" in line


def test_a_full_disk_after_a_single_run_leaves_its_whole_results_unmarked(
        small_disk, tmp_path, capsys):
    disk = small_disk("1m")  # the run's files fit, its report (plotly inlined) does not
    assert main([*SIM, "--num-requests", "40", "--out", str(disk)]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "report.html" in line and "results are whole" in line
    (folder,) = disk.iterdir()
    _names_agree_with_summaries(folder)
    assert is_whole(folder) and not folder.name.endswith(".partial")
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html")]) == 0


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished")
    assert main([*SIM, "--num-requests", "4", "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    return folder


def test_random_bytes_in_requests_csv_are_refused_by_every_reader(finished_run, tmp_path,
                                                                 capsys):
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    (folder / "requests.csv").write_bytes(random.Random(0).randbytes(4096))
    for command in (["report", str(folder)], ["compare", str(folder), str(finished_run)],
                    ["export", str(folder), "--format", "csv"]):
        assert main(command) == 2, command
        line = _one_error_line(capsys.readouterr().err)
        assert "unreadable requests.csv" in line
    assert read_point(folder) is None  # a resumed sweep runs such a point again
    assert read_point(finished_run) is not None
    assert main(["report", str(folder), "--allow-incomplete", "-o",
                 str(tmp_path / "r.html")]) == 0
    assert "unreadable requests.csv" in capsys.readouterr().err


def test_export_of_an_incomplete_folder_is_refused_unless_allowed(finished_run, tmp_path,
                                                                  capsys):
    folder = tmp_path / "run.partial"  # as a run interrupted by Ctrl-C leaves it
    shutil.copytree(finished_run, folder)
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    (folder / "kvbench_summary.json").write_text(json.dumps({**summary,
                                                             "status": "interrupted"}))
    for fmt in ("csv", "vllm-bench"):
        assert main(["export", str(folder), "--format", fmt]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert f"{folder} is not whole: paged (interrupted)" in line
    assert main(["export", str(folder), "--format", "csv", "--allow-incomplete"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("kvbench: warning: ") and "interrupted" in captured.err
    assert captured.out.startswith("label,")


def test_ctrl_c_while_a_single_run_writes_its_report_leaves_its_whole_results_unmarked(
        tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("kvbench.report.writer.write_runs_report", interrupted)
    assert main([*SIM, "--num-requests", "4", "--out", str(tmp_path)]) == 130
    capsys.readouterr()
    (folder,) = tmp_path.iterdir()
    _names_agree_with_summaries(folder)
    assert is_whole(folder) and not folder.name.endswith(".partial")
    assert not (folder / "report.html").exists()
