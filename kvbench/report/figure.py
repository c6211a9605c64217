"""A plotly figure as plain data: traces and layout are dicts of plotly.js's JSON schema, built
directly rather than through `plotly.graph_objects` (whose validation and copying cost most of
a report's time; docs/reports.md); `tests/report/test_figure_json.py` checks every chart
against plotly's schema. `subplots` lays out axes as `plotly.subplots.make_subplots` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Trace = dict[str, Any]


def merge(target: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Merge `update` into `target` as plotly's `update_layout` does: nested dicts merged key
    by key, anything else replaced. Returns `target`."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value
    return target


@dataclass
class Figure:
    """Traces (`data`) and `layout`, as `Plotly.newPlot` takes them; `grid` is the subplot
    grid's (rows, cols) when the figure has one (`subplots`)."""

    data: list[Trace] = field(default_factory=list)
    layout: dict[str, Any] = field(default_factory=dict)
    grid: tuple[int, int] | None = None

    def add(self, trace: Trace, row: int | None = None, col: int | None = None) -> Trace:
        """Append `trace`; given a subplot cell, draw it on that cell's axes."""
        if row is not None and col is not None:
            x, y = self._axis_names(row, col)
            trace["xaxis"], trace["yaxis"] = x, y
        self.data.append(trace)
        return trace

    def update_layout(self, **props: Any) -> None:
        merge(self.layout, props)

    def update_axes(self, axis: str, props: dict[str, Any], row: int | None = None,
                    col: int | None = None) -> None:
        """Merge `props` into the `axis` ("x" or "y") axes of the cells matching `row` and
        `col` (None: every row, every column), as `update_xaxes`/`update_yaxes` do."""
        rows, cols = self.grid or (1, 1)
        for r in range(1, rows + 1):
            for c in range(1, cols + 1):
                if row in (None, r) and col in (None, c):
                    name = self._axis_names(r, c)[0 if axis == "x" else 1]
                    key = f"{axis}axis{name[1:]}"
                    merge(self.layout.setdefault(key, {}), props)

    def _axis_names(self, row: int, col: int) -> tuple[str, str]:
        """("x3", "y3") for the third cell in row-major order; ("x", "y") for the first."""
        _, cols = self.grid or (1, 1)
        index = (row - 1) * cols + col
        suffix = "" if index == 1 else str(index)
        return f"x{suffix}", f"y{suffix}"


def _spans(count: int, spacing: float) -> list[tuple[float, float]]:
    """`count` equal spans of [0, 1] with `spacing` between neighbours, first to last."""
    width = (1 - spacing * (count - 1)) / count
    return [(i * (width + spacing), i * (width + spacing) + width) for i in range(count)]


def subplots(rows: int, cols: int, titles: Sequence[str] = (),
             horizontal_spacing: float | None = None, vertical_spacing: float | None = None,
             shared_xaxes: bool = False, shared_yaxes: bool = False) -> Figure:
    """An empty figure with a rows x cols grid of axes, numbered row by row from the top left,
    each cell's title above it: the layout `make_subplots` makes with the same arguments
    (its default spacings, wider between rows with titles; shared axes match the bottom
    row's x, the first column's y, and hide the others' tick labels)."""
    h_space = 0.2 / cols if horizontal_spacing is None else horizontal_spacing
    if vertical_spacing is None:
        v_space = (0.5 if titles else 0.3) / rows
    else:
        v_space = vertical_spacing
    x_spans = _spans(cols, h_space)
    y_spans = _spans(rows, v_space)[::-1]  # row 1 at the top
    fig = Figure(grid=(rows, cols))
    annotations = []
    for r in range(1, rows + 1):
        for c in range(1, cols + 1):
            x, y = fig._axis_names(r, c)
            xaxis: dict[str, Any] = {"anchor": y, "domain": list(x_spans[c - 1])}
            yaxis: dict[str, Any] = {"anchor": x, "domain": list(y_spans[r - 1])}
            if shared_xaxes and r < rows:
                xaxis.update(matches=fig._axis_names(rows, c)[0], showticklabels=False)
            if shared_yaxes and c > 1:
                yaxis.update(matches=fig._axis_names(r, 1)[1], showticklabels=False)
            fig.layout[f"xaxis{x[1:]}"] = xaxis
            fig.layout[f"yaxis{y[1:]}"] = yaxis
            index = (r - 1) * cols + c - 1
            if index < len(titles) and titles[index]:
                annotations.append({
                    "font": {"size": 16}, "showarrow": False, "text": titles[index],
                    "x": sum(x_spans[c - 1]) / 2, "xanchor": "center", "xref": "paper",
                    "y": y_spans[r - 1][1], "yanchor": "bottom", "yref": "paper"})
    if annotations:
        fig.layout["annotations"] = annotations
    return fig
