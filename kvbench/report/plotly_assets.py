"""What a report takes from the plotly package: the bundled plotly.js and a layout template,
read as files. Importing `plotly.graph_objects` (its validators) and loading `plotly.io`'s
templates cost most of a small run's report; the page needs neither (docs/reports.md)."""

from __future__ import annotations

import functools
import json
import pkgutil
from typing import Any

# plotly.py keeps these in its package data (plotly/package_data/); `plotly.offline.get_plotlyjs`
# reads the same file.
_PLOTLY_JS = "package_data/plotly.min.js"
_TEMPLATE = "package_data/templates/{name}.json"


@functools.cache
def plotly_js() -> bytes:
    """The minified plotly.js bundled with plotly.py (UTF-8), read once per process."""
    return pkgutil.get_data("plotly", _PLOTLY_JS)


@functools.cache
def _template_text(name: str) -> str:
    return pkgutil.get_data("plotly", _TEMPLATE.format(name=name)).decode("utf-8")


def template(name: str = "plotly_white") -> dict[str, Any]:
    """A plotly template (`layout.template`) as plotly.io's `templates[name]` holds it: the
    JSON file plotly ships, parsed (a fresh copy: callers may change it)."""
    return json.loads(_template_text(name))
