"""Latencies as vLLM defines them, over any load: measured from when a request is sent, never
negative, and adding up (queue + prefill = TTFT, TTFT + Σ ITL = E2E) for every sample.

The property runs on the simulator (fast) over arrival processes, concurrency limits, samples
per request, memory small enough to preempt and chunked prefill; a small real-model case
checks the same on the model executor, whose clock is the wall clock.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.config import EngineConfig
from kvbench.core.engine_kind import EngineKind
from kvbench.session.run_config import ExecutorConfig, ReplayConfig, RunConfig, WorkloadConfig
from kvbench.session.runner import RunOutcome, run_one

# Token times in the token file are the run's doubles, as requests.csv's: TTFT + ITLs = E2E
# but for the float error of the sums.
TOKEN_SUM_MS = 1e-6


def _run(kind: EngineKind, *, request_rate: float, burstiness: float,
         max_concurrency: int | None, n: int, kv_memory: str, chunked: bool,
         num_requests: int = 8) -> RunOutcome:
    run = RunConfig(
        engine=EngineConfig(model="tiny", kv_memory=kv_memory, block_size=4,
                            chunked_prefill=chunked,
                            max_num_batched_tokens=32 if chunked else None),
        workload=WorkloadConfig(name="parallel", num_requests=num_requests,
                                params={"n": n, "prompt_len": (4, 40), "output_len": (1, 12)}),
        replay=ReplayConfig(request_rate=request_rate, burstiness=burstiness,
                            max_concurrency=max_concurrency, warmup=0),
        executor=ExecutorConfig(kind=kind, gpu="a100-40gb" if kind is EngineKind.SIMULATED
                                else None),
    )
    with tempfile.TemporaryDirectory() as folder:
        return run_one(run, Path(folder) / "run", show_progress=False, keep_for_report=True)


def check_latencies(outcome: RunOutcome, max_concurrency: int | None) -> None:
    rows = outcome.requests.frame()
    assert outcome.summary.status == "complete" and rows["completed"].all()
    n = rows["n"]
    assert len(rows) == int(rows.groupby("request_id")["n"].first().sum())  # a row per sample
    assert (rows.groupby("request_id")["sample"].apply(sorted)
            .apply(lambda s: s == list(range(len(s)))).all())
    for column in ("client_wait_ms", "queue_ms", "prefill_ms", "ttft_ms", "e2e_ms"):
        assert (rows[column] >= 0).all(), column
    assert (rows["tpot_ms"].dropna() >= 0).all()
    assert np.allclose(rows["queue_ms"] + rows["prefill_ms"], rows["ttft_ms"], atol=1e-9)
    assert np.allclose((rows["sent_s"] - rows["arrival_s"]) * 1e3, rows["client_wait_ms"])
    assert np.allclose((rows["first_token_s"] - rows["sent_s"]) * 1e3, rows["ttft_ms"])
    # TPOT excludes the first token: (E2E − TTFT) / (tokens − 1), undefined for one token
    many = rows["output_tokens"] > 1
    assert np.allclose(rows.loc[many, "tpot_ms"], (rows["e2e_ms"] - rows["ttft_ms"])[many]
                       / (rows.loc[many, "output_tokens"] - 1))
    assert rows.loc[~many, "tpot_ms"].isna().all()
    assert (rows["output_tokens"] == rows["output_len"]).all()  # per sample, not summed
    assert (n >= 1).all()

    times = outcome.token_times
    assert times is not None
    by_sample = {(int(r), int(s)): t for r, s, t in zip(times.request_ids, times.samples,
                                                        times.sample_times(), strict=True)}
    for row in rows.itertuples():
        token_times_s = by_sample[(row.request_id, row.sample)]
        assert len(token_times_s) == row.output_tokens
        itls_ms = np.diff(token_times_s) * 1e3
        assert (itls_ms >= 0).all()
        assert math.isclose(row.ttft_ms + itls_ms.sum(), row.e2e_ms, abs_tol=TOKEN_SUM_MS)

    sends = rows[rows["sample"] == 0]
    if max_concurrency is None:  # open loop: sent on arrival
        assert (sends["client_wait_ms"] == 0).all()
        return
    # closed loop: never more than C requests between their send and their last finish, and a
    # request that waited was sent the instant a slot freed: when another request finished
    finish_s = rows.groupby("request_id")["finish_s"].max()
    spans = pd.DataFrame({"sent": sends.set_index("request_id")["sent_s"],
                          "finish": finish_s})
    for sent in spans["sent"]:
        assert ((spans["sent"] <= sent) & (spans["finish"] > sent)).sum() <= max_concurrency
    waited = sends[sends["client_wait_ms"] > 0]
    assert waited["sent_s"].isin(set(finish_s)).all()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    request_rate=st.sampled_from([math.inf, 2.0, 20.0, 200.0]),
    burstiness=st.sampled_from([0.3, 1.0, 4.0]),
    max_concurrency=st.none() | st.integers(1, 4),
    n=st.integers(1, 3),
    kv_memory=st.sampled_from(["96KiB", "64MiB"]),  # 96KiB: 48 slots, preemptions
    chunked=st.booleans(),
)
def test_simulated_latencies_are_never_negative_and_add_up(request_rate, burstiness,
                                                           max_concurrency, n, kv_memory,
                                                           chunked):
    outcome = _run(EngineKind.SIMULATED, request_rate=request_rate, burstiness=burstiness,
                   max_concurrency=max_concurrency, n=n, kv_memory=kv_memory, chunked=chunked)
    check_latencies(outcome, max_concurrency)


def test_the_small_arena_of_the_property_preempts():
    outcome = _run(EngineKind.SIMULATED, request_rate=20.0, burstiness=1.0, max_concurrency=3,
                   n=3, kv_memory="96KiB", chunked=True)
    assert outcome.summary.scheduler.preemptions > 0
    assert outcome.requests["preemptions"].sum() > 0
    check_latencies(outcome, 3)


def test_real_model_latencies_are_never_negative_and_add_up():
    outcome = _run(EngineKind.MODEL, request_rate=50.0, burstiness=1.0, max_concurrency=2,
                   n=2, kv_memory="96KiB", chunked=True, num_requests=5)
    check_latencies(outcome, 2)
