"""`report.html` of a sweep: one self-contained page (plotly.js inlined once, nothing fetched)
with the sections docs/sweep.md lists ("The report"): throughput vs latency, load curves,
the Pareto front, heat maps, the SLO capacity and the table of every point.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from kvbench.report.figure import Figure, subplots
from kvbench.report.page import chart_html, html_page, section_html
from kvbench.report.style import PALETTE, base_layout
from kvbench.results.files import atomic_write_bytes
from kvbench.sweep.config import SweepSpec
from kvbench.sweep.options import display_name, value_text
from kvbench.sweep.slo import format_slo
from kvbench.sweep.sweep_folder import CAPACITY_CSV, REPORT_HTML, load_sweep_folder, read_points
from kvbench.sweep.table import STRATEGY_AXES, higher_is_better, metric_column, metric_title

TABLE_COLUMNS = ("point_id", "status", "output_tok_s", "ttft_p50_ms", "ttft_p99_ms",
                 "tpot_p50_ms", "tpot_p99_ms", "e2e_p99_ms", "utilization_mean", "preemptions",
                 "prefix_hit_rate", "meets_slo", "wall_s", "error")


def load_axis(spec: SweepSpec) -> str | None:
    if spec.search is not None:
        return display_name(spec.search.axis)
    return next((a for a in ("request_rate", "max_concurrency") if a in spec.axes), None)


def pareto_front(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The rows that no other row beats (or equals) on both `x` and `y`, sorted by `x`."""
    data = frame.dropna(subset=[x, y])
    values = list(zip(data[x] * (1 if higher_is_better(x) else -1),
                      data[y] * (1 if higher_is_better(y) else -1), strict=True))
    keep = [data.index[i] for i, (a, b) in enumerate(values)
            if not any(c >= a and d >= b and (c > a or d > b) for c, d in values)]
    return data.loc[keep].sort_values(x)


def _collapse(names: list[str], frame: pd.DataFrame) -> list[str]:
    """Strategy-like axes (strategy, reserve, batching, queue_order, kv_cache_dtype) as one
    column: the strategy label (`contiguous-pow2`, `paged`), which names only what applies."""
    if "label" in frame and any(n in STRATEGY_AXES for n in names):
        return ["label", *[n for n in names if n not in STRATEGY_AXES and n != "label"]]
    return names


def _key_text(names: list[str], key: tuple) -> str:
    return ", ".join(
        value_text(v) if name in ("strategy", "label") else f"{name}={value_text(v)}"
        for name, v in zip(names, key, strict=True)
    )


def _multi_axes(spec: SweepSpec) -> list[str]:
    return [display_name(a) for a, v in spec.axes.items() if len(v) > 1]


def _series(frame: pd.DataFrame, spec: SweepSpec, load: str | None) -> list[tuple[str, pd.DataFrame]]:
    others = _collapse([a for a in _multi_axes(spec) if a != load], frame)
    if not others:
        return [("all points", frame)]
    return [(_key_text(others, key if isinstance(key, tuple) else (key,)), group)
            for key, group in frame.groupby(others, sort=False, dropna=False)]


def _chart(fig: Figure, name: str, title: str, height: int) -> str:
    fig.update_layout(**base_layout(title, height))
    return chart_html(fig, name)


def _curves(series, x: str, metrics: tuple[str, ...], titles: tuple[str, ...], hover: str,
            order: str | None) -> Figure:
    """A panel per metric against `x`, a line per series, its points in `order`."""
    fig = subplots(rows=1, cols=len(metrics), titles=titles,
                   horizontal_spacing=0.08 if len(metrics) == 2 else 0.07)
    for k, (label, g) in enumerate(series):
        g = g.sort_values(order) if order and order in g else g
        for col, metric in enumerate(metrics, start=1):
            fig.add({"type": "scatter", "x": g[x].tolist(), "y": g[metric].tolist(),
                     "mode": "lines+markers", "name": label, "legendgroup": label,
                     "showlegend": col == 1, "line": {"color": PALETTE[k % len(PALETTE)]},
                     "text": g["point_id"].astype(str).tolist(), "hovertemplate": hover},
                    row=1, col=col)
    return fig


def _latency_vs_throughput(series, load: str | None) -> str:
    fig = _curves(series, "output_tok_s", ("ttft_p99_ms", "tpot_p99_ms"),
                  ("p99 TTFT", "p99 TPOT"), "%{text}<br>%{x:.1f} tok/s, %{y:.1f} ms", load)
    fig.update_axes("x", {"title": {"text": "output tokens/s"}})
    fig.update_axes("y", {"title": {"text": "ms"}, "type": "log"})
    return _chart(fig, "latency", "", 430)


def _load_curves(series, load: str) -> str:
    series = [(label, g[pd.to_numeric(g[load], errors="coerce").map(_finite)])
              for label, g in series]
    fig = _curves(series, load, ("output_tok_s", "ttft_p99_ms", "tpot_p99_ms"),
                  ("output tokens/s", "p99 TTFT (ms)", "p99 TPOT (ms)"), "%{text}<br>%{y:.1f}",
                  load)
    span = [v for _, g in series for v in g[load]]
    wide = span and min(span) > 0 and max(span) / min(span) > 20
    fig.update_axes("x", {"title": {"text": metric_title(load)}, **({"type": "log"} if wide else {})})
    for col in (2, 3):
        fig.update_axes("y", {"type": "log"}, row=1, col=col)
    return _chart(fig, "load", "", 400)


def _pareto(frame: pd.DataFrame, series, x: str, y: str) -> tuple[str, pd.DataFrame]:
    front = pareto_front(frame, x, y)
    fig = Figure()
    hover = "%{text}<br>%{x:.4g}, %{y:.4g}"
    for k, (label, group) in enumerate(series):
        fig.add({"type": "scatter", "x": group[x].tolist(), "y": group[y].tolist(),
                 "mode": "markers", "name": label, "text": group["point_id"].astype(str).tolist(),
                 "marker": {"color": PALETTE[k % len(PALETTE)], "size": 9, "opacity": 0.8},
                 "hovertemplate": hover})
    if len(front):
        fig.add({"type": "scatter", "x": front[x].tolist(), "y": front[y].tolist(),
                 "mode": "lines+markers", "name": "Pareto front",
                 "line": {"color": "black", "width": 2,
                          "shape": "hv" if not higher_is_better(y) else "vh"},
                 "marker": {"symbol": "circle-open", "size": 14, "color": "black"},
                 "text": front["point_id"].astype(str).tolist(), "hovertemplate": hover})
    fig.update_layout(xaxis={"title": {"text": metric_title(x)}},
                      yaxis={"title": {"text": metric_title(y)}})
    return _chart(fig, "pareto", "", 460), front


def _heat_axes(spec: SweepSpec, frame: pd.DataFrame) -> tuple[tuple[str, str] | None,
                                                              str | None, list[str]]:
    """(two axes, the axis to facet by, the axes averaged over)."""
    multi = _collapse(_multi_axes(spec), frame)
    if spec.report.heatmap:
        pair = _collapse([display_name(a.replace("-", "_")) for a in spec.report.heatmap],
                         frame)
        if len(pair) != 2:
            return None, None, []
        facet = "label" if "label" in multi and "label" not in pair else None
    else:
        rest = [a for a in multi if a != "label"]
        if "label" in multi and len(rest) >= 2:
            pair, facet = rest[:2], "label"
        elif len(multi) >= 2:
            pair, facet = multi[:2], None
        else:
            return None, None, []
    others = [x for x in multi if x not in (*pair, facet)]
    return (pair[0], pair[1]), facet, others


def _heatmaps(frame: pd.DataFrame, spec: SweepSpec) -> str:
    pair, facet, others = _heat_axes(spec, frame)
    if pair is None:
        return "<p>Heat maps need two axes with several values each.</p>"
    a, b = pair
    if a not in frame or b not in frame:
        return f"<p>No heat map: {html.escape(a)} or {html.escape(b)} is not an axis.</p>"
    grid = frame[frame["source"] == "grid"]
    facets = [(None, grid)] if facet is None else list(grid.groupby(facet, sort=False))
    blocks = []
    for n, metric_name in enumerate(spec.report.heatmap_metrics):
        metric = metric_column(metric_name)
        if metric not in grid:
            continue
        note = f" (mean over {', '.join(others)})" if others else ""
        titles = [_key_text([facet], k if isinstance(k, tuple) else (k,)) if facet else ""
                  for k, _ in facets]
        fig = subplots(rows=1, cols=len(facets), titles=titles, horizontal_spacing=0.06)
        colorscale = "Viridis" if higher_is_better(metric) else "Viridis_r"
        for i, (_, data) in enumerate(facets, start=1):
            table = data.pivot_table(index=b, columns=a, values=metric, aggfunc="mean",
                                     sort=False)
            z = table.to_numpy()
            text = [[_cell(v) for v in row] for row in z]
            fig.add({"type": "heatmap", "z": z.tolist(), "text": text,
                     "x": [value_text(c) for c in table.columns],
                     "y": [value_text(r) for r in table.index], "texttemplate": "%{text}",
                     "colorscale": colorscale, "showscale": i == len(facets),
                     "hovertemplate": f"{a}=%{{x}}<br>{b}=%{{y}}<br>%{{z:.4g}}"}, row=1, col=i)
            fig.update_axes("x", {"title": {"text": a}, "type": "category"}, row=1, col=i)
            fig.update_axes("y", {"type": "category", **({"title": {"text": b}} if i == 1 else {})},
                            row=1, col=i)
        blocks.append(_chart(fig, f"heatmap-{n}", f"{metric_title(metric)}{note}", 380))
    return "\n".join(blocks) or "<p>No heat-map metric is in the table.</p>"


def _finite(value: float) -> bool:
    return value is not None and not pd.isna(value) and math.isfinite(value)


def _cell(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.4g}"


def _capacity(capacity: pd.DataFrame, spec: SweepSpec) -> str:
    search = spec.search
    assert search is not None
    axis = display_name(search.axis)
    group_cols = _collapse([c for c in capacity.columns
                            if c in {display_name(a) for a in spec.axes} and c != axis],
                           capacity)
    labels = [_key_text(group_cols, tuple(r[c] for c in group_cols)) or "all"
              for _, r in capacity.iterrows()]
    values = pd.to_numeric(capacity["capacity"]).fillna(0).tolist()
    upper = (pd.to_numeric(capacity["hi"]) - pd.to_numeric(capacity["lo"])).fillna(0).tolist()
    fig = Figure()
    fig.add({"type": "bar", "x": labels, "y": values,
             "error_y": {"type": "data", "symmetric": False, "array": upper,
                         "arrayminus": [0] * len(upper)},
             "marker": {"color": [PALETTE[i % len(PALETTE)] for i in range(len(labels))]},
             "text": [_cell(v) for v in values], "textposition": "inside",
             "insidetextanchor": "end", "textfont": {"color": "white"}})
    fig.update_layout(yaxis={"title": {"text": metric_title(axis)}}, showlegend=False)
    body = _chart(fig, "capacity", f"highest {axis} meeting {format_slo(spec.slo)} "
                  "(bar: met; whisker: first miss)", 400)
    shown = [*group_cols, "capacity", "status", "lo", "hi", "probes",
             "output_tok_s_at_capacity", "miss_above"]
    return body + _table(capacity[[c for c in shown if c in capacity]])


def _table(frame: pd.DataFrame) -> str:
    """The frame as an HTML table: numbers as `_cell` writes them, blanks for missing values."""
    text = frame.map(lambda v: _cell(v) if isinstance(v, float) else "" if v is None else str(v))
    return text.to_html(index=False, border=0)


def build_sweep_page(spec: SweepSpec, points: pd.DataFrame, capacity: pd.DataFrame | None,
                     command: str, title: str) -> bytes:
    done = points[points["status"] == "complete"] if "status" in points else points
    load = load_axis(spec)
    series = _series(done, spec, load) if len(done) else []
    sections: list[tuple[str, str, str, str]] = []  # (key, title, explanation, body)
    if capacity is not None and spec.search is not None and len(capacity):
        sections.append(("capacity", "SLO capacity", (
            f"Bisection over {display_name(spec.search.axis)} (tolerance "
            f"{spec.search.tolerance:.0%}): the highest value whose run meets every target "
            f"({html.escape(format_slo(spec.slo))}) and serves every request."),
            _capacity(capacity, spec)))
    if len(done) and "output_tok_s" in done:
        sections.append(("latency", "Throughput vs latency", (
            "p99 time to first token and p99 time per output token against output throughput,"
            " one curve per configuration, points in order of load. Down and to the right is "
            "better."), _latency_vs_throughput(series, load)))
        if load and load in done:
            sections.append(("load", f"Load curves ({load})",
                             "How throughput and tail latency respond to the offered load.",
                             _load_curves(series, load)))
        x, y = (metric_column(m) for m in spec.report.pareto)
        if x in done and y in done:
            body, front = _pareto(done, series, x, y)
            front_cols = [c for c in ("point_id", x, y) if c in front]
            table = (f"<details><summary>the {len(front)} points on the front</summary>"
                     f"{_table(front[front_cols])}</details>")
            sections.append(("pareto", f"Pareto front: {metric_title(x)} vs {metric_title(y)}",
                             "Each point is a run; the front joins the points that no other "
                             "run beats on both metrics.", body + table))
        sections.append(("heatmaps", "Heat maps",
                         "Metrics over two axes of the grid (grid points only).",
                         _heatmaps(done, spec)))
    cols = [c for c in points.columns
            if c in TABLE_COLUMNS or c in {display_name(a) for a in spec.axis_names()}]
    cols = ["point_id", *[c for c in cols if c != "point_id"]]
    sections.append(("points", "Points", "Every point of the sweep (all columns are in "
                     "points.csv).", f"<div class='scroll'>{_table(points[cols])}</div>"))
    base = ", ".join(f"{display_name(k)}={value_text(v)}" for k, v in spec.base.items())
    counts = points["status"].value_counts().to_dict() if "status" in points else {}
    meta = (f"kvbench {html.escape(spec.kind)}; base: {html.escape(base) or 'defaults'}<br>axes: "
            + html.escape("; ".join(f"{display_name(a)} = {', '.join(value_text(x) for x in v)}"
                                    for a, v in spec.axes.items()) or "none")
            + f"<br>points: {html.escape(', '.join(f'{n} {k}' for k, n in counts.items()))}"
            + (f"<br>command: <code>{html.escape(command)}</code>" if command else ""))
    return html_page(f"sweep {title}", f"sweep {title}", meta,
                     [(key, name, section_html(key, name, explain, body))
                      for key, name, explain, body in sections], stamp=False)


def write_sweep_report(folder: Path, spec: SweepSpec, points: pd.DataFrame,
                       capacity: pd.DataFrame | None, command: str = "",
                       output: Path | None = None) -> Path:
    """Write the sweep's report to `output` (default: `folder/report.html`)."""
    path = Path(output) if output is not None else Path(folder) / REPORT_HTML
    atomic_write_bytes(path, build_sweep_page(spec, points, capacity, command, Path(folder).name))
    return path


def read_and_write(folder: Path, output: Path | None = None) -> Path:
    """Rebuild the report from a sweep folder's files (`sweep.json`, `points.csv`, ...)."""
    spec, data = load_sweep_folder(folder)
    points = read_points(folder)
    capacity_path = Path(folder) / CAPACITY_CSV
    capacity = pd.read_csv(capacity_path) if capacity_path.exists() else None
    return write_sweep_report(folder, spec, points, capacity, data.get("command", ""), output)
