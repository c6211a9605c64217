"""SIGTERM (`timeout`, a CI cancel, `docker stop`) stops a run as Ctrl-C does, exiting 143."""

from __future__ import annotations

import signal

from tests.session.interrupted_run import stop_once_started


def test_sigterm_keeps_a_resumable_interrupted_result_and_exits_143(tmp_path):
    code, summary = stop_once_started(
        ["simulate", "--model", "llama-2-13b", "--gpu", "a100-40gb", "--workload", "sharegpt",
         "--num-requests", "1000000", "--request-rate", "2", "--strategy", "paged", "--quiet"],
        tmp_path / "out", signal.SIGTERM)
    assert code == 143
    assert 0 < summary["completed"] < 1_000_000
