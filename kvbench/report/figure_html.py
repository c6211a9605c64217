"""A figure on the page: a `<div>` and the `Plotly.newPlot` call that draws it, laid out as
plotly.py's `to_html(full_html=False)` lays it out, without building a `go.Figure`; and the
`<script>` that inlines plotly.js once per page."""

from __future__ import annotations

from typing import Any

from kvbench.report.figure import Figure
from kvbench.report.figure_json import to_json
from kvbench.report.plotly_assets import plotly_js

# plotly.py writes this before plotly.js: MathJax (never used here) configured locally, so
# nothing is fetched for it.
_PLOTLY_CONFIG_SCRIPT = "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"


def plotly_js_script() -> bytes:
    """plotly.js inlined (UTF-8): the page's one copy, before any figure is drawn."""
    return b"".join((_PLOTLY_CONFIG_SCRIPT.encode("ascii"), b"\n<script>", plotly_js(),
                     b"</script>"))


def figure_div(fig: Figure, div_id: str, config: dict[str, Any]) -> str:
    """`fig` drawn into a div `div_id` sized by its layout's height (full width), with the
    plotly.js `config`."""
    height = f"{fig.layout['height']}px" if fig.layout.get("height") else "100%"
    call = (f'Plotly.newPlot("{div_id}", {to_json(fig.data)}, {to_json(fig.layout)}, '
            f"{to_json(config)})")
    return (f'<div style="height:{height}; width:100%;">'
            f'<div id="{div_id}" class="plotly-graph-div" style="height:100%; width:100%;">'
            f'</div><script>if (document.getElementById("{div_id}")) {{{call}}};</script>'
            "</div>")
