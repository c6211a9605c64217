"""steps.csv's lines are %-formatted, not written by the csv module: they must be the bytes
`csv.writer` writes for the same rows (floats as repr, None as an empty cell)."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pandas as pd

from kvbench.results.step_writer import COLUMNS, StepColumns, StepRows, StepWriter, _lines


def _csv_lines(rows: list[tuple]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _row(step: int, **values) -> tuple:
    row = dict.fromkeys(COLUMNS, 0)
    row.update(step=step, t_s=step * 0.1 + 1e-17, step_ms=1 / 3, overhead_ms=0.0,
               kv_utilization=2 / 3, kv_prompt_blocks=None, gpu_used_bytes=None,
               torch_allocated_bytes=None, torch_reserved_bytes=None)
    row.update(values)
    return tuple(row[c] for c in COLUMNS)


ROWS = [
    _row(0),
    _row(1, kv_utilization=None, kv_prompt_blocks=7),  # a step with nothing held
    _row(2, t_s=1e-05, step_ms=1e16, overhead_ms=-0.0, kv_utilization=1.0),  # exponents
    _row(3, step_ms=math.inf, kv_utilization=math.nan, gpu_used_bytes=80 * 2**30,
         torch_allocated_bytes=123, torch_reserved_bytes=2**40),
    _row(4, overhead_ms=5, num_running=True),  # an int in a float column, a bool
]


def test_lines_are_what_the_csv_module_writes():
    assert _lines(ROWS) == _csv_lines(ROWS)


def test_written_file_is_header_and_csv_rows(tmp_path):
    path = tmp_path / "steps.csv"
    writer = StepWriter(path, every=2)
    writer.write_rows(ROWS)
    writer.close()
    assert path.read_text() == _csv_lines([COLUMNS]) + _csv_lines(ROWS[::2])


def test_kept_columns_are_what_pandas_reads_of_the_file(tmp_path):
    """`StepColumns` (the report's steps of a run) holds what pandas reads back of the file:
    int64 for an int column, float64 with NaN for one with an empty cell or a float NaN (a
    run without KV books), every Nth row under `--steps-every`."""
    rows = [_row(0), _row(1, kv_utilization=None, kv_prompt_blocks=7),
            _row(2, kv_token_bytes=math.nan, kv_free_bytes=math.nan),
            _row(3, num_waiting=4, preemptions=2)] * 5
    rows = [(i, *row[1:]) for i, row in enumerate(rows)]
    names = {"t_s", "step_ms", "num_waiting", "preemptions", "kv_utilization",
             "kv_token_bytes", "kv_free_bytes", "kv_prompt_blocks", "num_running"}
    for every in (1, 3):
        writer = StepWriter(tmp_path / f"steps-{every}.csv", every, StepColumns(names))
        writer.write_rows(rows[:7])
        for row in rows[7:]:
            writer.write_rows([row])
        writer.close()
        kept = writer.kept.columns()
        read = pd.read_csv(tmp_path / f"steps-{every}.csv", usecols=lambda c: c in names)
        assert kept.names == list(read.columns) and len(kept) == len(read)
        for name in read.columns:
            theirs = read[name].to_numpy()
            assert kept[name].dtype == theirs.dtype, name
            assert np.array_equal(kept[name], theirs, equal_nan=theirs.dtype.kind == "f"), name


def test_kept_columns_are_let_go_past_their_limit(tmp_path):
    writer = StepWriter(tmp_path / "steps.csv", 1, StepColumns({"t_s"}, max_rows=3))
    writer.write_rows([(i, *_row(i)[1:]) for i in range(5)])
    writer.close()
    assert writer.kept.dropped and writer.kept.columns() is None


def _exact_batch(t_s: list[float]) -> StepRows:
    """A batch as a writer makes one of runs' rows: every column numpy but the empty ones."""
    rows = [_row(i, t_s=t, kv_prompt_blocks=i, num_running=3, kv_token_bytes=2**40 + i)
            for i, t in enumerate(t_s)]
    batch = StepRows.of_tuples(rows)
    exact = {}
    for index, column in list(batch.lists.items()):
        if None not in column:
            exact[index] = np.array(column, dtype=np.float64 if isinstance(column[0], float)
                                    else np.int64)
            del batch.lists[index]
    return StepRows(len(rows), exact, batch.lists)


def test_lines_from_numpy_columns_are_the_tuples_lines():
    batch = _exact_batch([0.0, 1e-4, 0.1 + 0.2, 280.00003558163075, 9.999999999999998e15])
    assert batch.lines() == _lines(batch.tuples()).encode()
    assert batch.last_row() == batch.tuples()[-1]
    part = batch.part(1, 3)
    assert part.lines() == _lines(batch.tuples()[1:3]).encode()


def test_floats_numpy_writes_otherwise_go_the_tuples_way():
    for value in (9.99e-5, 1e-5, 1e16, 1e21, math.nan, math.inf, -1e-7):
        batch = _exact_batch([0.5, value])
        assert batch.lines() is None, value
    # and a column neither numpy nor empty throughout (a None in some rows)
    batch = _exact_batch([0.5, 0.25])
    batch.lists[COLUMNS.index("kv_utilization")] = [None, 0.5]
    del batch.exact[COLUMNS.index("kv_utilization")]
    assert batch.lines() is None


def test_a_simulation_writes_the_same_steps_csv_either_way(tmp_path, monkeypatch):
    """steps.csv of a run through numpy columns, byte for byte what the rows' tuples give."""
    from kvbench.config import EngineConfig
    from kvbench.core.engine_kind import EngineKind
    from kvbench.results import step_writer
    from kvbench.session.executor_config import ExecutorConfig
    from kvbench.session.replay_config import ReplayConfig
    from kvbench.session.run_config import RunConfig
    from kvbench.session.runner import run_one
    from kvbench.session.workload_config import WorkloadConfig

    run = RunConfig(
        engine=EngineConfig(model="tiny", kv_memory="160KiB", block_size=4),
        workload=WorkloadConfig(name="parallel", num_requests=60,
                                params={"n": 2, "prompt_len": (4, 40), "output_len": (1, 40)}),
        replay=ReplayConfig(request_rate=20.0, warmup=0),
        executor=ExecutorConfig(kind=EngineKind.SIMULATED, gpu="a100-40gb"))
    monkeypatch.setattr(step_writer, "_CHUNK_ROWS", 32)  # batches of runs' rows, not one
    made = []
    lines = step_writer.StepRows.lines
    monkeypatch.setattr(step_writer.StepRows, "lines",
                        lambda self: made.append(lines(self)) or made[-1])
    run_one(run, tmp_path / "numpy", show_progress=False)
    assert sum(text is not None for text in made) >= 3  # (batches of runs; not every one)
    monkeypatch.setattr(step_writer, "_NUMPY_AS_PYTHON", False)
    run_one(run, tmp_path / "tuples", show_progress=False)
    ours = (tmp_path / "numpy" / "steps.csv").read_bytes()
    assert ours == (tmp_path / "tuples" / "steps.csv").read_bytes()
    assert ours.count(b"\n") > 100
