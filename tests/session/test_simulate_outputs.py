"""`kvbench simulate`'s files: steps.csv streamed (every Nth row with `--steps-every`, the
summary over all steps), and trace.json on the simulated clock like kvbench_summary.json."""

from __future__ import annotations

import csv
import io
import json
import random

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.core.step_record import StepRecord
from kvbench.results.step_writer import COLUMNS, StepWriter
from tests.results.memory_reference import memory_summary
from tests.session.devtools_trace_rules import slices, trace_problems

SIM = ["simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--workload", "chat",
       "--num-requests", "24", "--request-rate", "8", "--warmup", "0", "--quiet"]


def _run(out, *extra) -> tuple:
    assert main([*SIM, "--out", str(out), *extra]) == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run, json.loads((run / "kvbench_summary.json").read_text())


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("every1"), "--trace")


def test_steps_every_thins_the_csv_but_not_the_summary(full, tmp_path):
    run_all, summary_all = full
    run_thin, summary_thin = _run(tmp_path, "--steps-every", "5")
    rows_all = pd.read_csv(run_all / "steps.csv")
    rows_thin = pd.read_csv(run_thin / "steps.csv")
    assert len(rows_all) == summary_all["scheduler"]["steps"] > 10
    assert list(rows_thin["step"]) == list(rows_all["step"][::5])
    pd.testing.assert_frame_equal(rows_thin, rows_all.iloc[::5].reset_index(drop=True),
                                  check_dtype=False)
    assert summary_thin["scheduler"] == summary_all["scheduler"]
    # (the traced run steps one at a time, the other fast-forwards: sums in another order)
    assert summary_thin["memory"] == _approx(summary_all["memory"])


def _approx(value):
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    return pytest.approx(value, rel=1e-9) if isinstance(value, float) else value


def test_summary_memory_matches_the_rows(full):
    run, summary = full
    expected = memory_summary(pd.read_csv(run / "steps.csv"))
    got = summary["memory"]
    assert got["utilization_mean"] == pytest.approx(expected["utilization_mean"], rel=1e-12)
    for part, value in expected["breakdown_mean"].items():
        assert got["breakdown_mean"][part] == pytest.approx(value, rel=1e-12, abs=1e-15)


def test_simulated_trace_is_on_the_simulated_clock(full):
    run, summary = full
    data = json.loads((run / "trace.json").read_text())
    assert trace_problems(data) == []
    spans = slices(data)
    steps = pd.read_csv(run / "steps.csv")
    step_spans = sorted((s for s in spans if s["name"] == "step"), key=lambda s: s["start"])
    assert len(step_spans) == len(steps)
    # Each step range lasts its modelled time and starts at its simulated start (whole µs).
    for span, (_, row) in zip(step_spans, steps.iterrows(), strict=True):
        assert span["start"] == pytest.approx(row["t_s"] * 1e6, abs=0.5)
        assert span["end"] - span["start"] == pytest.approx(row["step_ms"] * 1e3, abs=1)
    requests = pd.read_csv(run / "requests.csv").set_index("request_id")
    decodes = [s for s in spans if s["name"] == "decode" and "request_id" in s["args"]]
    assert len(decodes) == summary["completed"]
    for span in decodes:
        finish_s = requests.loc[span["args"]["request_id"], "finish_s"]
        assert span["end"] == pytest.approx(finish_s * 1e6, abs=0.5)


def _record(step: int, t_s: float, step_ms: float, token: int, free: int, waiting: int,
            **extra) -> StepRecord:
    return StepRecord(step=step, t_s=t_s, step_ms=step_ms, overhead_ms=0.0,
                      num_prefill_seqs=0, num_decode_seqs=1, num_batched_tokens=1,
                      num_prefill_tokens=0, num_running=1, num_waiting=waiting,
                      kv_token_bytes=token, kv_reserved_bytes=10, kv_internal_bytes=0,
                      kv_external_bytes=0, kv_free_bytes=free, kv_cached_bytes=0,
                      preemptions=step % 2, kv_utilization=None, **extra)


def test_writer_totals_equal_the_dataframe_metrics(tmp_path):
    # Gaps between steps (idle time) weigh the state that lasted through them.
    records = [_record(0, 0.0, 10.0, 30, 60, 0, kv_prompt_blocks=3),
               _record(1, 0.5, 10.0, 50, 40, 2, kv_prompt_blocks=7),
               _record(2, 0.51, 20.0, 0, 100, 1),
               _record(3, 0.6, 5.0, 90, 0, 4, kv_prompt_blocks=5)]
    writer = StepWriter(tmp_path / "steps.csv", every=3)
    for record in records:
        writer.write(record)
    totals = writer.close()
    frame = pd.DataFrame([r.to_dict() for r in records])
    expected = memory_summary(frame)
    got = totals.memory()
    assert got["utilization_mean"] == pytest.approx(expected["utilization_mean"])
    assert got["utilization_saturated"] == pytest.approx(expected["utilization_saturated"])
    assert got["breakdown_mean"] == pytest.approx(expected["breakdown_mean"])
    assert (totals.steps, totals.preemptions, totals.maxima["kv_prompt_blocks"]) == (4, 2, 7)
    assert totals.maxima["gpu_used_bytes"] is None
    assert list(pd.read_csv(tmp_path / "steps.csv")["step"]) == [0, 3]


def test_writer_batches_rows_across_chunks_as_written_one_by_one(tmp_path):
    """Many more rows than one batch, every 7th kept: the file holds exactly those rows and
    the totals are the pandas reference over all of them."""
    rng = random.Random(3)
    records, t_s = [], 0.0
    for step in range(10_000):
        step_ms = rng.uniform(1.0, 40.0)
        token = rng.randrange(0, 500)
        records.append(_record(step, t_s, step_ms, token, rng.randrange(0, 500),
                               rng.choice([0, 0, 3]),
                               kv_prompt_blocks=rng.choice([None, rng.randrange(0, 99)])))
        t_s += step_ms / 1e3 + rng.choice([0.0, 0.0, 0.25])  # idle gaps now and then
    writer = StepWriter(tmp_path / "steps.csv", every=7)
    for record in records:
        writer.write(record)
    totals = writer.close()
    reference = io.StringIO()  # what the csv module writes for those rows, one by one
    rows = csv.writer(reference, lineterminator="\n")
    rows.writerow(COLUMNS)
    for record in records[::7]:
        rows.writerow([getattr(record, column) for column in COLUMNS])
    assert (tmp_path / "steps.csv").read_text() == reference.getvalue()
    written = pd.read_csv(tmp_path / "steps.csv")
    frame = pd.DataFrame([r.to_dict() for r in records])
    expected = memory_summary(frame)
    got = totals.memory()
    assert got["utilization_mean"] == pytest.approx(expected["utilization_mean"], rel=1e-12)
    assert got["utilization_saturated"] == pytest.approx(expected["utilization_saturated"],
                                                         rel=1e-12)
    assert got["breakdown_mean"] == pytest.approx(expected["breakdown_mean"], rel=1e-12)
    assert totals.steps == 10_000 and writer.rows_written == len(written)
    assert totals.preemptions == sum(r.preemptions for r in records)
    assert totals.step_ms == pytest.approx(sum(r.step_ms for r in records), rel=1e-12)
    assert totals.maxima["kv_prompt_blocks"] == max(
        r.kv_prompt_blocks for r in records if r.kv_prompt_blocks is not None)


@pytest.mark.parametrize("interrupted", ["StepTotals.add_rows", "StepColumns.add"])
def test_an_interrupt_while_a_batch_is_handled_keeps_the_file_and_totals_together(
        tmp_path, monkeypatch, interrupted):
    """Ctrl-C lands while a batch is handled: between writing its rows and folding them into
    the totals, or while its columns are kept for the report (before it is on disk). Closing
    the writer (as the runner does on an interrupt) finishes the batch, so steps.csv and the
    summary still cover the same steps, each row once."""
    from kvbench.results import step_writer

    monkeypatch.setattr(step_writer, "_CHUNK_ROWS", 5)
    records = [_record(i, i * 0.01, 10.0, 30 + i, 60, i % 2) for i in range(12)]
    writer = StepWriter(tmp_path / "steps.csv", keep=step_writer.StepColumns({"t_s"}))
    owner, method = interrupted.split(".")
    handle = getattr(getattr(step_writer, owner), method)
    calls = []

    def interrupted_once(self, rows, *args):
        calls.append(len(rows))
        if len(calls) == 2:
            raise KeyboardInterrupt
        handle(self, rows, *args)

    monkeypatch.setattr(getattr(step_writer, owner), method, interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        for record in records:
            writer.write(record)
    totals = writer.close()
    assert list(pd.read_csv(tmp_path / "steps.csv")["step"]) == list(range(totals.steps))
    assert totals.steps == 10  # two batches of 5; the rows after the interrupt never came
