"""`kvbench simulate --frontend-latency-ms`: a request reaches the scheduler that long after
it is sent (vLLM's API server); its latencies still count from the send, and `kvbench run`,
which has no server, adds none."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.session.run_config import SERVER_FRONTEND_LATENCY_MS, ReplayConfig
from kvbench.session.run_options import RunOptions

CLOSED_LOOP = ["simulate", "--workload", "uniform", "--max-concurrency", "1",
               "--num-requests", "5", "--warmup", "0", "--workload-param", "prompt_len=32",
               "--workload-param", "output_len=16",
               # async scheduling would hide a prefill's host overhead behind the previous
               # request's last step where no delay parts them: the delay would not add exactly
               "--no-async-scheduling"]


def _requests(tmp_path: Path, capsys, args: list[str]) -> pd.DataFrame:
    assert main([*args, "--quiet", "--out", str(tmp_path)]) == 0
    folder = Path(capsys.readouterr().out.strip())
    return pd.read_csv(folder / "requests.csv")


@pytest.mark.parametrize("extra", [[], ["--request-rate", "5"]])
def test_a_request_reaches_the_scheduler_the_front_end_latency_after_it_is_sent(
        tmp_path, capsys, extra):
    none = _requests(tmp_path / "none", capsys, [*CLOSED_LOOP, *extra,
                                                 "--frontend-latency-ms", "0"])
    delayed = _requests(tmp_path / "delayed", capsys, [*CLOSED_LOOP, *extra,
                                                       "--frontend-latency-ms", "25"])
    # each request spends 25 ms more before admission, counted in its queue time, TTFT and
    # E2E; its decode is untouched
    for column in ("queue_ms", "ttft_ms", "e2e_ms"):
        assert delayed[column].to_numpy() == pytest.approx(none[column].to_numpy() + 25), column
    assert delayed["tpot_ms"].to_numpy() == pytest.approx(none["tpot_ms"].to_numpy())
    assert delayed["prefill_ms"].to_numpy() == pytest.approx(none["prefill_ms"].to_numpy())
    assert (delayed["admitted_s"] - delayed["sent_s"] >= 0.025 - 1e-9).all()
    # the closed loop still sends the next request when one finishes (not before it arrives)
    assert delayed["sent_s"].iloc[1:].tolist() == pytest.approx(
        [max(arrival, finish) for arrival, finish
         in zip(delayed["arrival_s"].iloc[1:], delayed["finish_s"].iloc[:-1], strict=True)])


def test_simulate_takes_the_fitted_server_latency_and_run_none():
    assert RunOptions.for_kind("simulate").frontend_latency_ms == SERVER_FRONTEND_LATENCY_MS > 0
    assert RunOptions.for_kind("run").frontend_latency_ms == 0


def test_run_has_no_front_end_latency_option(capsys):
    assert main(["run", "--frontend-latency-ms", "5", "--quiet"]) == 2
    assert "frontend-latency-ms" in capsys.readouterr().err


@pytest.mark.parametrize("value", [-1.0, float("inf"), float("nan")])
def test_a_negative_or_endless_front_end_latency_is_refused(value):
    with pytest.raises(KvbenchInputError, match="--frontend-latency-ms"):
        ReplayConfig(frontend_latency_ms=value)
