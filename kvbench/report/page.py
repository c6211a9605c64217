"""The report page: one self-contained HTML file (plotly.js inlined once, no network)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

import kvbench
from kvbench.report import charts, step_charts, tables, timelines
from kvbench.report.budget_waterfall import budget_waterfall_html
from kvbench.report.figure import Figure
from kvbench.report.figure_json import to_json
from kvbench.report.plotly_assets import plotly_js
from kvbench.report.residency_section import residency_figure, residency_table_html
from kvbench.report.runs import RunSet
from kvbench.report.style import RunStyle, run_styles
from kvbench.report.tier_section import tier_section_html

PLOT_CONFIG = {
    "displaylogo": False,  # the logo links to plot.ly
    "responsive": True,
    "toImageButtonOptions": {"format": "png", "scale": 2},
    "modeBarButtonsToRemove": ["select2d", "lasso2d"],
}

CSS = """
:root { --fg: #1d2330; --muted: #5b6475; --line: #dde1e8; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: #f6f7f9; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 48px; }
h1 { font-size: 22px; margin: 4px 0 2px; }
h2 { font-size: 17px; margin: 0 0 6px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
.sub { color: var(--muted); margin: 0 0 14px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px;
          padding: 14px 16px; margin: 14px 0; }
.explain, .note { color: var(--muted); margin: 4px 0 8px; font-size: 13px; }
nav { font-size: 13px; margin: 6px 0 0; }
nav a { color: var(--accent); margin-right: 12px; text-decoration: none; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { padding: 4px 6px; border-bottom: 1px solid var(--line); text-align: right;
         white-space: nowrap; }
th { font-weight: 600; }
table.facts th, table.facts td { text-align: left; white-space: normal; }
table.facts th { color: var(--muted); font-weight: 500; width: 1%; white-space: nowrap; }
td.cmd { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px;
         word-break: break-all; }
td.differs { background: #fff4d6; }
table.summary th.name, table.summary tr:first-child th:first-child { text-align: left; }
td.best { font-weight: 700; background: #e7f5e9; }
table.diff tr.better td.delta { color: #1a7f37; font-weight: 600; }
table.diff tr.worse td.delta { color: #c62828; font-weight: 600; }
table.diff th { text-align: left; }
.scroll { overflow-x: auto; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
          margin-right: 6px; vertical-align: baseline; }
.warning { background: #fdecea; border: 1px solid #f5c2c0; border-radius: 6px;
           padding: 8px 12px; margin: 10px 0; }
.chart { min-height: 200px; }
.badge { display: inline-block; border-radius: 6px; padding: 4px 10px; margin: 2px 0 10px;
         font-size: 13px; }
.badge.noise { background: #fff4d6; border: 1px solid #f0d58c; }
.badge.repeat { background: #e7f5e9; border: 1px solid #b7dfbe; }
footer { color: var(--muted); font-size: 12px; margin-top: 18px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
"""


# plotly.py writes this before plotly.js: MathJax (never used here) configured locally, so
# nothing is fetched for it.
_PLOTLY_CONFIG_SCRIPT = b"<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"


def chart_html(fig: Figure, name: str) -> str:
    """A chart of a page: a div sized by the layout's height (full width) and the
    `Plotly.newPlot` call that draws it, as plotly.py's `to_html(full_html=False)` lays it
    out (plotly.js is inlined once, in the page's head: `html_page`)."""
    div_id = f"chart-{name}"
    height = f"{fig.layout['height']}px" if fig.layout.get("height") else "100%"
    call = (f'Plotly.newPlot("{div_id}", {to_json(fig.data)}, {to_json(fig.layout)}, '
            f"{to_json(PLOT_CONFIG)})")
    return (f"<div class='chart' data-chart='{name}'>"
            f'<div style="height:{height}; width:100%;">'
            f'<div id="{div_id}" class="plotly-graph-div" style="height:100%; width:100%;">'
            f'</div><script>if (document.getElementById("{div_id}")) {{{call}}};</script>'
            "</div></div>")


Styles = dict[str, RunStyle]


@dataclass(frozen=True)
class Section:
    """A section of the page: `draw` gives its body, a figure (drawn as the chart named
    `key`) or HTML; None or "" when the runs hold nothing it shows (then it is left out)."""

    key: str
    title: str
    explain: str
    draw: Callable[[RunSet, Styles], Figure | str | None]


def _throughput_time(runset: RunSet, styles: Styles) -> str | None:
    found = step_charts.throughput_timeline_figure(runset, styles)
    if found is None:
        return None
    fig, source = found
    estimate = (" There each decode, and each prefill that completes a prompt, samples one "
                "token (with chunked prefill a prompt's earlier chunks count too)."
                if "steps.csv" in source else "")
    return f"<p class='note'>From {escape(source)}.{estimate}</p>" + chart_html(fig, "throughput-time")


def _accuracy(runset: RunSet, styles: Styles) -> str:
    runs = [r for r in runset.runs if r.summary.accuracy]
    fig = charts.accuracy_figure(runs, styles) if runs else None
    return ("".join(tables.accuracy_html(r, styles) for r in runs)
            + (chart_html(fig, "accuracy") if fig is not None else ""))


def _residency(runset: RunSet, styles: Styles) -> str:
    fig = residency_figure(runset, styles)
    return residency_table_html(runset) + (chart_html(fig, "residency") if fig is not None
                                           else "")


# The page's sections, in order; a new section is one more entry.
SECTIONS = (
    Section("runs", "What ran", "",
            lambda runset, _: tables.status_html(runset) + tables.header_html(runset)),
    Section("summary", "Summary per strategy", "",
            lambda runset, styles: tables.noise_html(runset, styles)
            + tables.summary_html(runset, styles)),
    Section("differences", "Differences between runs",
            "Each strategy of a later folder against the same strategy of the first.",
            lambda runset, _: tables.differences_html(runset)),
    Section("throughput", "Throughput",
            "Output tokens generated per second of makespan (first arrival to last finish).",
            charts.throughput_figure),
    Section("latency", "Latency distributions",
            "Cumulative distributions over requests: the height at x is the share of requests "
            "at or below x ms. TTFT: arrival to first token (queueing + prefill); TPOT: time "
            "per output token after the first; E2E: arrival to last token.",
            charts.latency_cdf_figure),
    Section("ttft-split", "Time to first token: queueing and prefill",
            "Queue: arrival to admission (waiting for memory or a batch slot). Prefill: "
            "admission to first token (the prompt's forward pass, plus the steps it shared). "
            "Memory-bound strategies lose time in the queue; hover for p99.",
            charts.ttft_split_figure),
    Section("itl", "Inter-token latency",
            "Every gap between consecutive output tokens of a request, pooled over requests "
            "(from tokens.parquet). The tail is decode steps that waited for a prefill in the "
            "same batch or for a preemption's recompute.", charts.itl_cdf_figure),
    Section("throughput-time", "Throughput over time",
            "Output tokens per second in 40 equal windows of the run. A ramp at the start is "
            "admission; a long low tail is the last long requests running in a small batch.",
            _throughput_time),
    Section("step-time", "Step time vs batch size",
            "Each engine step's duration (steps.csv). Left, decode-only steps against the "
            "sequences they ran: the slope of the median line is what one more sequence in "
            "the batch costs; where it is flat, a larger batch is free throughput. Right, "
            "steps holding a prefill against the tokens they ran: their cost follows prompt "
            "tokens.", step_charts.step_time_figure),
    Section("memory", "Where the KV memory goes",
            "Left: the whole arena. Right: only memory held on behalf of requests, the view "
            "of the PagedAttention paper's Figure 2; the green share is the KV utilization. "
            "Reserved slots will be used by a request later, internal fragmentation never "
            "will, external fragmentation is free space in holes too small for the next "
            "waiting request.",
            lambda runset, _: chart_html(charts.memory_figure(runset), "memory")
            + tables.kv_groups_html(runset)),
    Section("budget", "KV budget (vLLM's start-up)",
            "How the simulated KV budget was sized: the memory vLLM would leave for its KV "
            "cache on this GPU at the same flags (docs/estimate.md).",
            lambda runset, _: budget_waterfall_html(runset)),
    Section("timelines", "Over time",
            "One point per engine step (past 1,500 steps, each stretch's lowest and highest). "
            "Utilization drops show reservations and fragmentation; a long waiting queue next "
            "to low utilization is memory a better strategy would turn into batch size.",
            timelines.timeline_figure),
    Section("memory-time", "KV memory split over time", "Share of the arena per step and run.",
            lambda runset, _: timelines.memory_timeline_figure(runset)),
    Section("prefix", "Prefix cache",
            "Prompt tokens served from the prefix cache so far over prompt tokens so far, by "
            "admission time. It rises as shared prefixes (system prompts, earlier turns) fill "
            "the cache.", timelines.hit_rate_figure),
    Section("host-tier", "Host KV tier",
            "Prefix hits served by the GPU cache and by the host tier (--kv-offload), the "
            "bytes that crossed the host link, and the wait of requests whose KV was loaded "
            "back (admission to the load's end, part of their prefill time; docs/offload.md).",
            lambda runset, _: tier_section_html(runset)),
    Section("residency", "KV block residency",
            "How long prefix-cache blocks stay (vLLM's --kv-cache-metrics: lifetime from "
            "allocation to eviction, idle time before eviction, gaps between hits; every "
            "block, per tier), and the reuse-distance curve: the prefix hit rate an LRU cache "
            "of N blocks would reach over the same lookups (a block hits when fewer than N "
            "distinct blocks were used since its last use), the GPU cache and the host tier "
            "marked. Where the curve climbs is the tier size that pays.", _residency),
    Section("accuracy", "fp8 KV cache accuracy",
            "How far the fp8 cache moves the model's outputs from the unquantized cache on "
            "this workload (kvbench_summary.json, key accuracy).", _accuracy),
)


def build_page(runset: RunSet) -> bytes:
    """The report over `runset`: one self-contained HTML page, UTF-8."""
    styles = run_styles(runset)
    shown = []
    for section in SECTIONS:
        body = section.draw(runset, styles)
        if isinstance(body, Figure):
            body = chart_html(body, section.key)
        if body:
            shown.append((section.key, section.title,
                          section_html(section.key, section.title, section.explain, body)))
    title = _title(runset)
    return html_page(f"kvbench report: {title}", "kvbench report", escape(title), shown)


def _title(runset: RunSet) -> str:
    workloads = sorted({str(r.summary.workload or "?") for r in runset.runs})
    models = sorted({str(r.summary.model or "?") for r in runset.runs})
    what = ", ".join(r.name for r in runset.runs)
    return f"{what} — {', '.join(workloads)} on {', '.join(models)}"


def section_html(key: str, title: str, explain: str, body: str) -> str:
    explain = f"<p class=explain>{explain}</p>" if explain else ""
    return f"<section id='{key}'><h2>{escape(title)}</h2>{explain}{body}</section>"


def html_page(title: str, heading: str, sub: str, sections: list[tuple[str, str, str]],
              stamp: bool = True) -> bytes:
    """A self-contained page (UTF-8): `sections` as (key, title, HTML) after a nav to them;
    `title` is text, `sub` (under the heading) HTML; `stamp`: the footer says when."""
    nav = "".join(f"<a href='#{key}'>{escape(name)}</a>" for key, name, _ in sections)
    created = f" on {time.strftime('%Y-%m-%d %H:%M:%S')}" if stamp else ""
    head = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{CSS}</style>"
    )
    body = (
        f"</head><body><main><h1>{escape(heading)}</h1><p class='sub'>{sub}</p><nav>{nav}</nav>"
        + "".join(html for _, _, html in sections)
        + f"<footer>Generated by kvbench {escape(kvbench.__version__)}{created}. "
        "Self-contained: opens offline.</footer></main></body></html>\n"
    )
    # Bytes around plotly.js's bytes: as one str the page would be widened to two bytes a
    # character by its first non-ASCII one, copied, and encoded back (all of plotly.js each
    # time).
    return b"".join((head.encode("utf-8"), _PLOTLY_CONFIG_SCRIPT, b"\n<script>", plotly_js(),
                     b"</script>", body.encode("utf-8")))
