"""Rates that say what they count: `--request-rate` is requests per second on every workload
(conversations included), `--conversation-rate` conversations per second, and kvbench_summary.json
reports both, offered and achieved."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from kvbench.cli import main
from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError
from kvbench.session.run_config import ExecutorConfig, ReplayConfig, RunConfig, WorkloadConfig
from kvbench.session.runner import run_one
from kvbench.workloads import arrival_times, load_workload

TURNS = 4  # chat's default turns per conversation


def _starts(requests) -> np.ndarray:
    """Each conversation's first arrival, in conversation order."""
    first: dict[str, float] = {}
    for request in requests:
        first.setdefault(request.conversation_id, request.arrival_s)
    return np.array(sorted(first.values()))


def test_request_rate_on_chat_counts_requests_not_conversations():
    rate, num = 8.0, 4000
    requests = load_workload("chat", num, 0, 100, request_rate=rate).requests
    arrivals = np.array([r.arrival_s for r in requests])
    # 4,000 requests in 1,000 conversations of 4: the requests come at 8/s, not 32/s
    assert (num - 1) / (arrivals.max() - arrivals.min()) == pytest.approx(rate, rel=0.05)
    starts = _starts(requests)
    assert len(starts) == num // TURNS
    assert np.diff(starts).mean() == pytest.approx(TURNS / rate, rel=0.05)


def test_conversation_rate_starts_conversations_at_that_rate():
    rate, num = 2.0, 400
    requests = load_workload("chat", num, 3, 100, conversation_rate=rate).requests
    # the process is the one vLLM draws, over conversations instead of requests
    assert np.array_equal(_starts(requests), arrival_times(num // TURNS, rate, 1.0, seed=3))


def test_request_rate_on_a_workload_without_conversations_is_vllms_process():
    requests = load_workload("uniform", 50, 5, 100, request_rate=3.0).requests
    assert np.array_equal([r.arrival_s for r in requests], arrival_times(50, 3.0, 1.0, 5))
    alone = load_workload("uniform", 50, 5, 100, conversation_rate=3.0).requests
    assert [r.arrival_s for r in alone] == [r.arrival_s for r in requests]  # each alone


def test_both_rates_at_once_are_refused():
    with pytest.raises(KvbenchInputError, match="give one"):
        load_workload("chat", 8, 0, 100, request_rate=2.0, conversation_rate=1.0)


def test_cli_refuses_both_rates_in_one_line(tmp_path, capsys):
    code = main(["simulate", "--workload", "chat", "--num-requests", "8", "--request-rate",
                 "2", "--conversation-rate", "1", "--quiet", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def _load(**replay) -> dict:
    """kvbench_summary.json's `load` of a simulated chat run of 200 requests (50 conversations)."""
    run = RunConfig(workload=WorkloadConfig(name="chat", num_requests=200),
                    replay=ReplayConfig(warmup=0, **replay),
                    executor=ExecutorConfig(kind=EngineKind.SIMULATED, gpu="a100-40gb"))
    with tempfile.TemporaryDirectory() as folder:
        outcome = run_one(run, Path(folder) / "run", show_progress=False)
        return json.loads((outcome.folder / "kvbench_summary.json").read_text())["load"]


def test_summary_reports_offered_and_achieved_rates():
    load = _load(request_rate=8.0)
    assert load["request_rate"] == 8.0 and load["conversation_rate"] == 2.0
    assert load["conversations"] == 50 and load["max_concurrency"] is None
    assert load["achieved_request_rate"] == pytest.approx(8.0, rel=0.35)
    assert load["achieved_conversation_rate"] == pytest.approx(2.0, rel=0.35)

    load = _load()  # offline: every request at t=0
    assert load["request_rate"] is None and load["conversation_rate"] is None
    assert load["achieved_request_rate"] is None

    # offline, two slots: nothing offered a rate, the client's slots made one
    load = _load(max_concurrency=2)
    assert load["request_rate"] is None and load["achieved_request_rate"] > 0


def test_cli_conversation_rate_lands_in_config_and_summary(tmp_path, capsys):
    assert main(["simulate", "--workload", "chat", "--num-requests", "40", "--quiet",
                 "--conversation-rate", "1", "--max-concurrency", "2",
                 "--out", str(tmp_path)]) == 0
    folder = Path(capsys.readouterr().out.strip())
    config = json.loads((folder / "config.json").read_text())["run"]
    assert config["conversation_rate"] == 1.0 and config["request_rate"] == "inf"
    load = json.loads((folder / "kvbench_summary.json").read_text())["load"]
    assert load["conversation_rate"] == 1.0 and load["request_rate"] == 4.0
    assert load["max_concurrency"] == 2 and load["achieved_request_rate"] > 0
