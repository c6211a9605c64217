"""steps.csv as pandas reads it back: the header, every Nth row's values (to the bit, an
empty cell for None and NaN), ints as int64 and floats as float64 (a whole float too), and
the columns the session keeps for its report are what pandas reads of the file."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kvbench.results.step_writer import COLUMNS, StepColumns, StepWriter


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


def _expected(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame([[math.nan if v is None else v for v in row] for row in rows],
                         columns=list(COLUMNS))
    for name in ("t_s", "step_ms", "overhead_ms", "kv_utilization"):
        frame[name] = frame[name].astype(float)
    return frame


def test_written_file_reads_back_as_the_rows(tmp_path):
    for every in (1, 2):
        path = tmp_path / f"steps-{every}.csv"
        writer = StepWriter(path, every=every)
        writer.write_rows(ROWS)
        writer.close()
        assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
        back = pd.read_csv(path)
        expected = _expected(ROWS[::every])
        assert back["num_running"].dtype == np.int64  # (a bool is an int)
        pd.testing.assert_frame_equal(back, expected, check_exact=True, check_dtype=False)
        assert all(back[name].dtype == np.float64
                   for name in ("t_s", "step_ms", "overhead_ms", "kv_utilization"))
        assert writer.rows_written == len(expected)


def test_a_whole_float_column_reads_back_as_floats(tmp_path):
    path = tmp_path / "steps.csv"
    writer = StepWriter(path)
    writer.write_rows([_row(i, t_s=float(i), overhead_ms=0.0, kv_utilization=1.0)
                       for i in range(3)])
    writer.close()
    back = pd.read_csv(path)
    assert back["t_s"].dtype == back["overhead_ms"].dtype == np.float64
    assert back["t_s"].tolist() == [0.0, 1.0, 2.0]
    assert back["step"].dtype == np.int64


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


