"""`csv_lines` writes rows through orjson: its bytes must be the %-format's (the reference
path, `step_writer._lines`), whatever the cells: floats orjson prints otherwise (below 1e-4,
from 1e16, NaN, infinity), None, bools, big ints, strings, numpy scalars."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.results.csv_rows import csv_lines
from kvbench.results.step_writer import COLUMNS, _lines

TRICKY_FLOATS = [0.0, -0.0, 1e-4, 9.99e-5, 1e-5, 1.5e-7, 5e-324, 1e16, 9.999e15, 1e22, 1e308,
                 280.00003558163075, 10.00001, -0.00001, -1e-4, 0.1 + 0.2, 1 / 3, 2.0**53,
                 math.nan, math.inf, -math.inf, 123456789012345.67]

_cell = (st.none() | st.integers(-2**70, 2**70) | st.booleans()
         | st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1e-3, 1e-3)
         | st.sampled_from(TRICKY_FLOATS))
_rows = st.lists(st.tuples(*[_cell] * len(COLUMNS)), max_size=12)


def _ref(rows: list[tuple]) -> bytes:
    return _lines(rows).encode()


@settings(max_examples=400, deadline=None)
@given(_rows)
def test_any_row_is_written_as_the_percent_format_writes_it(rows):
    assert csv_lines(rows, _lines) == _ref(rows)


@settings(max_examples=200, deadline=None)
@given(_rows, st.integers(0, 30))
def test_a_wrong_count_of_nones_is_only_slower(rows, nones):
    """A caller counts the Nones of some columns only: too few (or a made-up count) must
    never change the text."""
    assert csv_lines(rows, _lines, nones) == _ref(rows)


_bool_rows = st.lists(st.tuples(*[_cell] * (len(COLUMNS) - 1), st.booleans()), max_size=12)


@settings(max_examples=300, deadline=None)
@given(_bool_rows, st.booleans())
def test_rows_each_with_a_bool_say_so_and_the_text_is_the_same(rows, say):
    """requests.csv's rows end in `completed`: a bool each, which the caller may say."""
    nones = sum(row.count(None) for row in rows)
    assert csv_lines(rows, _lines, nones, 1 if say else 0) == _ref(rows)


def test_a_batch_with_one_odd_row_writes_the_others_through_orjson():
    row = (1, 280.00003558163075, 35.1, 0.0, 0, 32, 32, 0, 32, 0, 11602329600, 151552000,
           3276800, 0, 283443200, 0, 0, 0.9868311036789298, 288, None, None, None)
    rows = [row] * 5 + [(*row[:3], 1e-5, *row[4:])] + [row] * 3 + [(*row[:17], math.nan,
                                                                    *row[18:])]
    assert csv_lines(rows, _lines, 30) == _ref(rows)


_THREE = "%s,%s,%s\n"


def _three(rows: list[tuple]) -> str:
    return "".join(map(_THREE.__mod__, rows)).replace("None", "")


def test_strings_numpy_scalars_and_lists_go_the_slow_way():
    base = (1, 0.5, None)
    for odd in ("a", 'x"],["y', np.float64(0.25), np.int64(3), [1, 2], {"a": 1}, 2**64):
        rows = [base, (*base[:2], odd), base]
        assert csv_lines(rows, _three) == _three(rows).encode()


def test_no_rows_no_text():
    assert csv_lines([], _lines) == b""


def test_this_orjson_passes_the_import_check_and_without_it_rows_go_the_slow_way(monkeypatch):
    from kvbench.results import csv_rows

    assert csv_rows._FAST  # the wheel pyproject.toml asks for: else every row is slow
    rows = [(1, 0.5, None)] * 3
    monkeypatch.setattr(csv_rows, "_FAST", False)
    assert csv_lines(rows, _three) == b"1,0.5,\n" * 3
