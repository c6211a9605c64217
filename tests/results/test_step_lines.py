"""steps.csv's lines are %-formatted, not written by the csv module: they must be the bytes
`csv.writer` writes for the same rows (floats as repr, None as an empty cell)."""

from __future__ import annotations

import csv
import io
import math

from kvbench.results.step_writer import COLUMNS, StepWriter, _lines


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
