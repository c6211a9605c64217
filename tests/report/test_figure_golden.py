"""Every chart of a report, for a fixed results folder, is the figure pinned in
`figure_golden.json` (tests/report/figure_golden.py says how it was made)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.report.figure_golden import CASES, case_figures, figure_json, read_golden


def assert_same(got: Any, want: Any, where: str = "") -> None:
    """Equal, floats to 1e-9 relative (the golden file keeps 12 digits); NaN (a gap in a
    typed array) equals NaN."""
    if isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, int | float) and isinstance(want, int | float), where
        assert math.isnan(got) == math.isnan(want), (where, got, want)
        assert math.isnan(want) or math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), (where, got, want)
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


@pytest.mark.parametrize("case", CASES)
def test_every_chart_is_the_pinned_figure(case, tmp_path):
    golden = read_golden()[case]
    got = case_figures(case, figure_json, tmp_path)
    assert sorted(got) == sorted(golden)
    for name, want in golden.items():
        if want is None:
            assert got[name] is None, name
        else:
            assert_same(got[name], want, f"{case}/{name}")
