"""The report's figures without plotly.graph_objects: the JSON is what plotly.py writes (typed
arrays, null for NaN, HTML-safe), the grids are make_subplots', every chart is valid in
plotly's schema, the template and plotly.js are plotly's, and building a report imports
neither graph_objects nor plotly.io."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from _plotly_utils.utils import to_typed_array_spec
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from kvbench.report.figure import Figure, subplots
from kvbench.report.figure_json import figure_json, to_json, typed_array
from kvbench.report.plotly_assets import plotly_js, template
from tests.report.figure_golden import CASES, DATA, case_figures
from tests.report.test_figure_golden import assert_same


@pytest.mark.parametrize("values", [
    np.array([0.5, np.nan, 1e300, -2.25]), np.arange(5, dtype=np.int64),
    np.array([-200, 300], dtype=np.int64), np.array([1, 70_000], dtype=np.int64),
    np.array([2**40], dtype=np.int64), np.array([3, 4], dtype=np.uint64),
    np.array([1.5], dtype=np.float32), np.array([[1.0, 2.0], [3.0, 4.0]]),
    np.array([True, False]), np.array([], dtype=float), np.array(["a", "b"]),
], ids=lambda v: f"{v.dtype}{list(v.shape)}")
def test_arrays_are_written_as_plotly_py_writes_them(values):
    want = to_typed_array_spec(values)
    want = want.tolist() if isinstance(want, np.ndarray) else want
    assert typed_array(values) == want


def test_json_is_safe_in_a_script_element_and_has_no_nan():
    text = to_json({"text": "</script><b>≤", "y": [1.0, float("nan"), np.float64(2.5)],
                    "n": np.int64(3), "inf": float("inf")})
    assert "<" not in text and ">" not in text and "/" not in text
    assert json.loads(text) == {"text": "</script><b>≤", "y": [1.0, None, 2.5], "n": 3,
                                "inf": None}
    with pytest.raises(TypeError, match="give numpy arrays"):
        to_json({"x": {1, 2}})


def test_the_template_and_plotly_js_are_plotlys():
    assert template("plotly_white") == pio.templates["plotly_white"].to_plotly_json()
    assert plotly_js() == get_plotlyjs().encode("utf-8")


def _layout(figure: dict) -> dict:
    layout = dict(figure["layout"])
    layout.pop("template", None)
    return layout


@pytest.mark.parametrize("grid", [
    {"rows": 1, "cols": 3, "horizontal_spacing": 0.07, "titles": ["a", "b", "c"]},
    {"rows": 3, "cols": 1, "shared_xaxes": True, "vertical_spacing": 0.07,
     "titles": ["a", "b", "c"]},
    {"rows": 1, "cols": 2, "shared_yaxes": True, "horizontal_spacing": 0.04,
     "titles": ["a", "b"]},
    {"rows": 2, "cols": 1, "titles": ["only the first"]},
    {"rows": 1, "cols": 1, "shared_xaxes": True, "titles": ["one"]},
    {"rows": 2, "cols": 2},
])
def test_subplots_lay_out_the_grid_as_make_subplots(grid):
    ours = subplots(**grid)
    theirs = make_subplots(**{("subplot_titles" if k == "titles" else k): v
                              for k, v in grid.items()})
    theirs.update_layout(template=None)
    assert_same(json.loads(figure_json(ours))["layout"], _layout(theirs.to_plotly_json()))
    # Traces and axis updates land on the cell's axes.
    rows, cols = grid["rows"], grid["cols"]
    ours.add({"type": "scatter", "y": [1, 2]}, row=rows, col=cols)
    theirs.add_scatter(y=[1, 2], row=rows, col=cols)
    ours.update_axes("y", {"title": {"text": "t"}, "range": [0, 1]}, row=rows)
    theirs.update_yaxes(title_text="t", range=[0, 1], row=rows)
    ours.update_axes("x", {"type": "log"}, col=1)
    theirs.update_xaxes(type="log", col=1)
    got = json.loads(figure_json(ours))
    want = json.loads(theirs.to_json())
    assert_same(got["data"], want["data"])
    assert_same(_layout(got), _layout(want))


def test_update_layout_merges_as_plotly_does():
    fig = Figure(layout={"margin": {"l": 1, "b": 2}, "annotations": [{"text": "a"}]})
    fig.update_layout(margin={"b": 3}, annotations=[{"text": "b"}], height=5)
    assert fig.layout == {"margin": {"l": 1, "b": 3}, "annotations": [{"text": "b"}],
                          "height": 5}


@pytest.mark.parametrize("case", CASES)
def test_every_chart_is_valid_in_plotlys_schema(case, tmp_path):
    """go.Figure validates each property: a misspelt name or a bad value raises."""
    for figure in case_figures(case, lambda fig: json.loads(figure_json(fig)),
                               tmp_path).values():
        if figure is not None:
            go.Figure(figure)  # raises ValueError naming a property plotly.js does not know


def test_a_report_imports_neither_graph_objects_nor_plotly_io(tmp_path):
    code = (
        "import sys\n"
        "from kvbench.report.writer import write_report\n"
        f"write_report([{str(DATA)!r}], {str(tmp_path / 'r.html')!r})\n"
        "print(sorted(m for m in sys.modules if m.startswith(('plotly.', '_plotly_utils.'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    loaded = json.loads(result.stdout.replace("'", '"'))
    assert not [m for m in loaded if m.startswith(("plotly.graph_objs", "plotly.graph_objects",
                                                   "plotly.io", "plotly.validators",
                                                   "_plotly_utils.basevalidators"))], loaded
    assert (tmp_path / "r.html").stat().st_size > 4_000_000
