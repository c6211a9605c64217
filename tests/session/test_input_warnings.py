"""Options a session accepts but that do not do what they seem to: each gives one warning
line (the CLI prints them through its warning path), and the defaults give none."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main
from kvbench.session.input_warnings import input_warnings
from kvbench.session.run_options import RunOptions
from kvbench.session.session import expand_runs, run_id
from kvbench.workloads import load_workload


def warnings_for(kind: str = "run", **values) -> list[str]:
    options = RunOptions.for_kind(kind, **values)
    runs = expand_runs(options)
    workload = load_workload(options.workload, options.num_requests or 4, 0, 1000,
                             time_scale=options.time_scale)
    return input_warnings(options, runs, [(None, workload)])


def test_the_defaults_warn_of_nothing():
    assert warnings_for(num_requests=4) == []
    assert warnings_for("simulate", model="llama-2-7b", num_requests=4) == []


@pytest.mark.parametrize(("values", "expected"), [
    ({"tokenizer": "/tmp/tok"}, "--tokenizer /tmp/tok is ignored"),
    ({"burstiness": 0.5}, "--burstiness 0.5 is ignored"),
    ({"warmup": 100_000}, "--warmup 100000 runs more warm-up requests than the 4 measured"),
    ({"time_scale": 1e9}, "--time-scale 1e+09 is ignored: every request of the workload "
                          "arrives at t = 0"),
])
def test_an_ignored_or_runaway_option_warns(values, expected):
    (line,) = warnings_for(num_requests=4, **values)
    assert line.startswith(expected)


def test_burstiness_with_a_rate_is_not_ignored():
    assert warnings_for(num_requests=4, burstiness=0.5, request_rate="4") == []


def test_more_threads_than_cores_warns(monkeypatch):
    monkeypatch.setattr("kvbench.session.input_warnings.usable_cores", lambda: 2)
    assert warnings_for(num_requests=4, cpu_threads=2) == []
    (line,) = warnings_for(num_requests=4, cpu_threads=1000)
    assert line.startswith("--cpu-threads 1000 is more than the 2 cores")


def test_a_replay_stretched_past_a_day_warns_with_its_span(tmp_path):
    trace = tmp_path / "timed.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": t, "prompt_len": 4, "output_len": 2})
                             + "\n" for t in (0.0, 1.5)))
    (line,) = warnings_for(workload=str(trace), time_scale=1e9)
    assert line.startswith("the last request arrives 47.5 years after the first")
    assert warnings_for(workload=str(trace), time_scale=2) == []
    # The simulator's clock does not wait: nothing to warn of.
    assert warnings_for("simulate", model="llama-2-7b", workload=str(trace),
                        time_scale=1e9) == []


def test_the_cli_prints_the_warning(tmp_path, capsys):
    code = main(["simulate", "--model", "llama-2-7b", "--num-requests", "1", "--warmup", "0",
                 "--burstiness", "0.5", "--out", str(tmp_path / "out")])
    assert code == 0
    err = capsys.readouterr().err
    assert "kvbench: warning: --burstiness 0.5 is ignored" in err


@pytest.mark.parametrize("workload", ["/data/burst.csv", "traces/day.jsonl", "sharegpt.json",
                                      "/abs/mooncake.jsonl"])
def test_a_trace_folder_is_named_by_the_file_stem(workload):
    """Never by its path: `results/<ts>-paged-/data/burst.csv/` nested folders."""
    name = run_id(["paged"], workload)
    stem = workload.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    assert name.endswith(f"-paged-{stem}") and "/" not in name
    assert run_id(["paged"], "chat").endswith("-paged-chat")
