"""The summary's request metrics over `Columns` (numpy, what a run hands over) give what pandas'
group reductions give over the same `requests.csv` frame: the reference below is the pandas
code the metrics used before runs stopped importing pandas."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.results.columns import Columns
from kvbench.results.metrics import goodput, per_request, throughput
from kvbench.results.request_table import REQUEST_COLUMNS


def _reference_per_request(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty or frame["n"].max() <= 1:
        return frame
    grouped = frame.groupby("request_id", sort=False)
    first = frame[frame["sample"] == 0].set_index("request_id")
    first = first.assign(completed=grouped["completed"].all(),
                         output_tokens=grouped["output_tokens"].sum(),
                         ttft_ms=grouped["ttft_ms"].min(), e2e_ms=grouped["e2e_ms"].max())
    return first.reset_index()


def _reference_goodput(frame: pd.DataFrame, slo_ms: dict[str, float]) -> tuple[int, int]:
    ok = frame["completed"].astype(bool).copy()
    for metric, limit in slo_ms.items():
        values = frame[f"{metric}_ms"].astype(float)
        ok &= values.isna() | (values <= limit) if metric == "tpot" else values <= limit
    ok = ok.groupby(frame["request_id"], sort=False).all()
    return int(ok.sum()), len(ok)


_maybe_ms = st.one_of(st.none(), st.floats(0, 5_000, allow_nan=False))


@st.composite
def _frames(draw) -> pd.DataFrame:
    """`requests.csv` frames: requests of 1-3 samples in a shuffled id order, some samples
    unfinished (no times, not completed), one-token samples without a TPOT."""
    count = draw(st.integers(1, 12))
    ids = draw(st.permutations(range(100, 100 + count)))
    rows = []
    for request_id in ids:
        n = draw(st.integers(1, 3))
        arrival = draw(st.floats(0, 100, allow_nan=False))
        prompt = draw(st.integers(1, 500))
        for sample in range(n):
            done = draw(st.booleans())
            tokens = draw(st.integers(1, 50)) if done else 0
            ttft = draw(_maybe_ms) if done else None
            finish = arrival + draw(st.floats(0.001, 50, allow_nan=False)) if done else None
            rows.append({
                "request_id": request_id, "sample": sample, "arrival_s": arrival,
                "sent_s": arrival, "client_wait_ms": 0.0, "prompt_len": prompt,
                "output_len": 50, "n": n, "admitted_s": arrival if done else None,
                "first_token_s": finish, "finish_s": finish, "queue_ms": 0.0,
                "prefill_ms": ttft, "ttft_ms": ttft,
                "tpot_ms": draw(_maybe_ms) if done and tokens > 1 else None,
                "e2e_ms": draw(_maybe_ms) if done else None, "preemptions": 0,
                "cached_prompt_tokens": 0, "output_tokens": tokens, "completed": done,
            })
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)


def _same(ours: np.ndarray, theirs: np.ndarray) -> bool:
    ours, theirs = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    return ours.shape == theirs.shape and bool(np.all((ours == theirs)
                                                      | (np.isnan(ours) & np.isnan(theirs))))


@settings(max_examples=150, deadline=None)
@given(_frames())
def test_per_request_rows_match_pandas_group_reductions(frame):
    expected = _reference_per_request(frame)
    ours = per_request(Columns.from_frame(frame))
    assert isinstance(ours, Columns) and ours.names == list(expected.columns)
    for name in expected.columns:
        theirs = expected[name].to_numpy()
        if theirs.dtype != object:  # (a column of None only: objects there, NaN here)
            assert ours[name].dtype == theirs.dtype, name
        assert _same(ours[name], expected[name].to_numpy(dtype=float)), name
    # A frame given, a frame back (`kvbench export` reads it with pandas): the same frame.
    back = per_request(frame)
    assert isinstance(back, pd.DataFrame)
    pd.testing.assert_frame_equal(back, expected.reset_index(drop=True), check_dtype=False)


@settings(max_examples=150, deadline=None)
@given(_frames(), st.floats(1, 5_000), st.floats(1, 5_000))
def test_goodput_and_throughput_match_pandas(frame, ttft_limit, tpot_limit):
    slo = {"ttft": ttft_limit, "tpot": tpot_limit, "e2e": 2_500.0}
    met, total = _reference_goodput(frame, slo)
    ours = goodput(Columns.from_frame(frame), slo, makespan_s=10.0)
    assert (ours["requests_meeting_slo"], ours["fraction_meeting_slo"]) == (met, met / total)

    figures, makespan = throughput(Columns.from_frame(frame))
    by_request = _reference_per_request(frame)
    done = by_request[by_request["completed"]]
    if done.empty:
        assert figures["output_tok_s"] is None and makespan == 0.0
        return
    expected_span = float(frame.loc[frame["completed"], "finish_s"].max()
                          - frame["arrival_s"].min())
    assert makespan == expected_span
    assert math.isclose(figures["output_tok_s"], done["output_tokens"].sum() / expected_span)
    assert math.isclose(figures["requests_s"], len(done) / expected_span)
