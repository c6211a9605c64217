"""A run of decode steps is kept as a description and expanded later, many runs at once with
numpy (`DecodeRunLog.take`, what `steps.csv` and the group sums are written from): its rows
must be those of `DecodeRunRows.rows`, the one-at-a-time reference, to the bit and the type,
with single rows in their places among them; the file (as pandas reads it) and the totals
must be those the same rows give when written as tuples."""

from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.decode_run_rows import DecodeRunRows
from kvbench.engine.group_memory import GroupMemory, GroupShape
from kvbench.results.step_writer import COLUMNS, StepRows, StepTotals, StepWriter


@st.composite
def runs(draw, first_step: int = 0) -> list[DecodeRunRows | tuple]:
    """Runs of decode steps and single rows between them, numbered in order."""
    items: list[DecodeRunRows | tuple] = []
    step, clock = first_step, draw(st.floats(0, 100))
    for _ in range(draw(st.integers(1, 12))):
        has_prompt_blocks = draw(st.booleans())  # (one strategy reports them, or not)
        if draw(st.integers(0, 3)) == 0:  # a single row, as `StepRecorder.record` makes one
            end = clock + draw(st.floats(1e-4, 2))
            row = {c: draw(st.integers(0, 10**6)) for c in COLUMNS}
            row.update(step=step, t_s=clock, step_ms=(end - clock) * 1e3,
                       overhead_ms=draw(st.floats(0, 1)),
                       kv_utilization=draw(st.none() | st.floats(0, 1)),
                       kv_prompt_blocks=draw(st.none() | st.integers(0, 50)),
                       gpu_used_bytes=None, torch_allocated_bytes=None,
                       torch_reserved_bytes=None)
            items.append(tuple(row[c] for c in COLUMNS))
            step, clock = step + 1, end
            continue
        num_steps = draw(st.integers(1, 9))
        ends = []
        for _ in range(num_steps):
            clock += draw(st.floats(1e-5, 1.0))
            ends.append(clock)
        held, will = draw(st.integers(0, 500)), draw(st.integers(0, 500))
        before = (held, will, draw(st.integers(0, 40)))
        books = []
        for k in sorted(draw(st.lists(st.integers(0, num_steps - 1), max_size=5))):
            books.append((k, draw(st.integers(0, 900)), draw(st.integers(0, 900)),
                          draw(st.integers(0, 40))))
        num_seqs = draw(st.integers(1, 64))
        items.append(DecodeRunRows(
            step, ends[0] - draw(st.floats(1e-5, 1.0)), ends, num_seqs,
            draw(st.integers(0, 30)), draw(st.integers(0, 5000)), books, before,
            draw(st.integers(0, 3)), draw(st.integers(0, 50)), has_prompt_blocks,
            draw(st.integers(1000, 5000)), draw(st.sampled_from([1, 4096, 819200])),
            draw(st.integers(0, 3)), draw(st.integers(0, num_seqs))))
        step += num_steps
    return items


def _reference_rows(items: list) -> list[tuple]:
    rows: list[tuple] = []
    for item in items:
        rows.extend([item] if type(item) is tuple else item.rows())
    return rows


def _typed(rows: list[tuple]) -> list[tuple]:
    return [tuple((type(v).__name__, repr(v)) for v in row) for row in rows]


def _write(path, items: list, every: int) -> tuple[str, dict]:
    writer = StepWriter(path, every=every)
    for item in items:
        if type(item) is tuple:
            writer.write_rows([item])
        else:
            writer.write_run(item)
    totals = writer.close()
    return path.read_text(), _totals(totals)


def _totals(totals: StepTotals) -> tuple:
    return totals, totals.memory()


def _reference(rows: list[tuple], every: int, chunk_rows: int) -> tuple[str, dict]:
    """The file and the totals the same rows give without the writer: every Nth row as
    `csv.writer` writes it, and the totals folded `chunk_rows` rows at a time."""
    out = io.StringIO()
    out.write(",".join(COLUMNS) + "\n")
    csv.writer(out, lineterminator="\n").writerows(rows[::every])
    totals = StepTotals()
    for start in range(0, len(rows), chunk_rows):
        totals.add_rows(rows[start : start + chunk_rows])
    totals.finish()
    return out.getvalue(), _totals(totals)


@settings(max_examples=60, deadline=None)
@given(runs(), st.sampled_from([1, 3]), st.integers(1, 40))
def test_runs_written_as_descriptions_are_their_rows_in_fixed_batches(tmp_path_factory, items,
                                                                       every, chunk_rows):
    """The writer's file and totals against the reference rows folded in batches of
    `chunk_rows` (here small: batches end inside runs and between them)."""
    import kvbench.results.step_writer as step_writer

    folder = tmp_path_factory.mktemp("steps")
    old = step_writer._CHUNK_ROWS
    step_writer._CHUNK_ROWS = chunk_rows
    try:
        got = _write(folder / "steps.csv", items, every)
    finally:
        step_writer._CHUNK_ROWS = old
    expected_text, expected_totals = _reference(_reference_rows(items), every, chunk_rows)
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(got[0])),
                                  pd.read_csv(io.StringIO(expected_text)), check_exact=True)
    assert got[1] == expected_totals


@settings(max_examples=60, deadline=None)
@given(runs())
def test_expanded_rows_are_the_reference_rows(items):
    from array import array

    from kvbench.core.decode_run_rows import DecodeRunLog
    from kvbench.results.step_writer import batch_rows

    log, single, single_at, n = DecodeRunLog(), [], array("q"), 0
    for item in items:
        if type(item) is tuple:
            single.append(item)
            single_at.append(n)
            n += 1
        else:
            log.add(n, item)
            n += len(item.ends_s)
    got = batch_rows(single, single_at, log.expand() if log else None, n)
    reference = _reference_rows(items)
    # Each column as pandas reads the reference rows' (int64; float64, NaN for None).
    expected = StepRows.of_tuples(reference)
    for index, name in enumerate(COLUMNS):
        assert got.array(index).dtype == expected.array(index).dtype, name
        assert np.array_equal(got.array(index), expected.array(index), equal_nan=True), name
    assert _typed([got.last_row()]) == _typed([expected.last_row()])
    last = [item for item in items if type(item) is not tuple]
    assert all(run.last_row() == run.rows()[-1] for run in last)


def _parts(row: tuple, bytes_per_slot: int) -> list[int]:
    return [row[COLUMNS.index(f"kv_{part}_bytes")] // bytes_per_slot
            for part in ("token", "reserved", "internal", "external", "free")]


@settings(max_examples=40, deadline=None)
@given(runs())
def test_group_sums_of_runs_are_their_steps_added_one_at_a_time(items):
    shape = (GroupShape((0,), None, 64),)
    described, reference = (GroupMemory(shape, bytes_per_slot=64, per_group_splits=False)
                            for _ in range(2))
    for item in items:
        if type(item) is tuple:  # (its byte columns taken as 64 B slots)
            described.add_parts(item[2] / 1e3, *_parts(item, 64))
            reference.add_parts(item[2] / 1e3, *_parts(item, 64))
            continue
        described.add_decode_run(item)
        starts = [item.t_start_s, *item.ends_s[:-1]]
        for row, start, end in zip(item.rows(), starts, item.ends_s, strict=True):
            reference.add_parts(end - start, *_parts(row, item.bytes_per_slot))
    assert described.summary() == reference.summary()


@settings(max_examples=30, deadline=None)
@given(runs(), st.integers(1, 40))
def test_group_sums_from_the_writers_expanded_runs_are_the_steps_one_at_a_time(
        tmp_path_factory, items, chunk_rows):
    """A streaming run (`StepRecorder.stream_to`): the group sums take each run's rows from
    the steps' writer, expanded once for both, in the writer's batches; the sums are the
    steps' to rounding."""
    import pytest

    import kvbench.results.step_writer as step_writer
    from kvbench.engine.step_recorder import StepRecorder

    shape = (GroupShape((0,), None, 64),)
    streamed, reference = (GroupMemory(shape, bytes_per_slot=64, per_group_splits=False)
                           for _ in range(2))
    recorder = StepRecorder([], bytes_per_slot=64, group_memory=streamed)
    writer = StepWriter(tmp_path_factory.mktemp("steps") / "steps.csv")
    recorder.stream_to(writer)
    old = step_writer._CHUNK_ROWS
    step_writer._CHUNK_ROWS = chunk_rows
    try:
        for item in items:
            if type(item) is tuple:
                streamed.add_parts(item[2] / 1e3, *_parts(item, 64))
                reference.add_parts(item[2] / 1e3, *_parts(item, 64))
                continue
            recorder.keep_run(item)  # (what `record_decode_run` hands on when streaming)
            starts = [item.t_start_s, *item.ends_s[:-1]]
            for row, start, end in zip(item.rows(), starts, item.ends_s, strict=True):
                reference.add_parts(end - start, *_parts(row, item.bytes_per_slot))
        writer.close()
    finally:
        step_writer._CHUNK_ROWS = old
    got, expected = streamed.summary(), reference.summary()
    per_token = expected["kv_held_bytes_per_token"]
    assert got["kv_held_bytes_per_token"] == (
        None if per_token is None else pytest.approx(per_token, rel=1e-12, abs=1e-9))
    (group,), (expected_group,) = got["kv_groups"], expected["kv_groups"]
    numbers = [k for k, v in expected_group.items() if isinstance(v, float)]
    assert [group[k] for k in numbers] == pytest.approx(
        [expected_group[k] for k in numbers], rel=1e-12, abs=1e-6)
    assert {k: v for k, v in group.items() if k not in numbers} == {
        k: v for k, v in expected_group.items() if k not in numbers}


def test_a_streamed_run_is_summed_once():
    from kvbench.engine.step_recorder import StepRecorder

    sums = GroupMemory((GroupShape((0,), None, 64),), bytes_per_slot=64, per_group_splits=False)
    recorder = StepRecorder([], bytes_per_slot=64, group_memory=sums)

    class Writer:
        run_arrays_sink = None
        runs: list = []

        def write(self, record):
            raise AssertionError("a run came as a record")

        def write_rows(self, rows):
            raise AssertionError("a run came as rows")

        def write_run(self, run):
            self.runs.append(run)

    writer = Writer()
    recorder.stream_to(writer)
    recorder.record_decode_run(1.0, [1.5, 2.0], 4, 0, 100, [], (10, 10, 0), (0, 0, False), 50)
    assert len(writer.runs) == 1 and writer.run_arrays_sink == sums.add_run_arrays
    assert sums.summary()["kv_groups"][0]["token_bytes_mean"] is None  # not summed yet
    recorder.stream_to(None)
    recorder.record_decode_run(2.0, [2.5], 4, 0, 108, [], (10, 10, 0), (0, 0, False), 50)
    assert sums.summary()["kv_groups"][0]["token_bytes_mean"] == (112 * 64)
