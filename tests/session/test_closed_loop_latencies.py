"""The issue's examples, as a user runs them: a closed loop's TTFT does not grow with the
queue position, and a rate with a concurrency limit gives no negative latency."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kvbench.cli import main


def _requests(tmp_path: Path, capsys, args: list[str]) -> pd.DataFrame:
    assert main([*args, "--quiet", "--out", str(tmp_path)]) == 0
    folder = Path(capsys.readouterr().out.strip())
    return pd.read_csv(folder / "requests.csv")


def test_closed_loop_ttft_is_one_prefill_whatever_the_queue_position(tmp_path, capsys):
    rows = _requests(tmp_path, capsys, [
        "run", "--workload", "uniform", "--max-concurrency", "1", "--num-requests", "6",
        "--warmup", "0", "--workload-param", "prompt_len=32",
        "--workload-param", "output_len=16"])
    assert (rows["arrival_s"] == 0).all()
    # one at a time: each is sent when the one before it finishes, and waits for it outside
    # its latencies
    assert rows["sent_s"].iloc[1:].tolist() == rows["finish_s"].iloc[:-1].tolist()
    assert (rows["client_wait_ms"].diff().iloc[1:] > 0).all()
    assert (rows["queue_ms"] >= 0).all()
    # TTFT is one prefill (a sixteenth of a 16-token request's E2E), the sixth request's as
    # the first's, where the wait counted in would make the sixth's five E2Es long
    assert rows["ttft_ms"].max() < 0.5 * rows["e2e_ms"].min()
    assert (rows["e2e_ms"] < rows["finish_s"] * 1e3 + 1e-6).all()


def test_rate_and_concurrency_together_give_no_negative_latency(tmp_path, capsys):
    rows = _requests(tmp_path, capsys, [
        "simulate", "--workload", "uniform", "--num-requests", "40", "--request-rate", "2",
        "--max-concurrency", "2"])
    for column in ("client_wait_ms", "queue_ms", "prefill_ms", "ttft_ms", "tpot_ms", "e2e_ms"):
        assert (rows[column] >= 0).all(), column
    assert (rows["sent_s"] >= rows["arrival_s"]).all()  # never sent before it arrives
    # a request waits for its arrival and for a slot: some do wait here
    assert (rows["client_wait_ms"] > 0).any()
