"""Colours and line styles shared by a report's charts and tables.

A strategy label keeps its colour across groups (two revisions of `paged` are both blue);
the group sets the line dash and bar pattern.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.report.plotly_assets import template
from kvbench.report.runs import RunSet

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
)
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
PATTERNS = ("", "/", ".", "x", "-")

# The memory split (docs/design.md, Memory accounting), in stacking order.
PART_COLORS = {
    "token": "#2ca02c",
    "reserved": "#f2c14e",
    "internal": "#ff7f0e",
    "external": "#d62728",
    "cached": "#9ecae1",
    "free": "#e3e3e3",
}
PART_TITLES = {
    "token": "token states",
    "reserved": "reserved (future tokens)",
    "internal": "internal fragmentation",
    "external": "external fragmentation",
    "cached": "prefix cache (evictable)",
    "free": "free",
}


@dataclass(frozen=True)
class RunStyle:
    color: str
    dash: str
    pattern: str


def run_styles(runset: RunSet) -> dict[str, RunStyle]:
    labels = list(dict.fromkeys(run.label for run in runset.runs))
    return {
        run.name: RunStyle(
            PALETTE[labels.index(run.label) % len(PALETTE)],
            DASHES[run.group_index % len(DASHES)],
            PATTERNS[run.group_index % len(PATTERNS)],
        )
        for run in runset.runs
    }


# Below the plot area: room for the x tick labels and axis title, then the legend, which is
# anchored to the figure's bottom edge (not to the plot area), so a short chart cannot push
# it onto its own axis labels.
LEGEND_MARGIN_PX = 110


def base_layout(title: str, height: int, **extra: Any) -> dict[str, Any]:
    """The layout every chart starts from (plotly's `plotly_white` template, the title, the
    legend below the plot); `height` is the plot's own, the legend's room below it is added.
    `extra` is merged in as given (plotly.js names: an axis title is `{"text": ...}`)."""
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "template": template("plotly_white"),
        "height": height + LEGEND_MARGIN_PX - 48,
        "margin": {"l": 64, "r": 24, "t": 56, "b": LEGEND_MARGIN_PX},
        "font": {"size": 12},
        "legend": {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0.01,
                   "x": 0},
        "hovermode": "closest",
    }
    layout.update(extra)
    return layout
