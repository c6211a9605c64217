"""The report page: one self-contained HTML file (plotly.js inlined once, no network)."""

from __future__ import annotations

import time
from html import escape

import kvbench
from kvbench.report import charts, step_charts, tables, timelines
from kvbench.report.budget_waterfall import budget_waterfall_html
from kvbench.report.figure import Figure
from kvbench.report.figure_html import figure_div, plotly_js_script
from kvbench.report.runs import RunData, RunSet
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


def _chart(fig: Figure, name: str) -> str:
    """A chart of the page (plotly.js is inlined once, in its head: `_page`)."""
    div = figure_div(fig, f"chart-{name}", PLOT_CONFIG)
    return f"<div class='chart' data-chart='{name}'>{div}</div>"


def _section(key: str, title: str, explain: str, body: str) -> tuple[str, str, str]:
    html = (f"<section id='{key}'><h2>{escape(title)}</h2>"
            f"{f'<p class=explain>{explain}</p>' if explain else ''}{body}</section>")
    return key, title, html


def _title(runset: RunSet) -> str:
    workloads = sorted({str(r.summary.workload or "?") for r in runset.runs})
    models = sorted({str(r.summary.model or "?") for r in runset.runs})
    what = ", ".join(r.name for r in runset.runs)
    return f"{what} — {', '.join(workloads)} on {', '.join(models)}"


def build_page(runset: RunSet) -> bytes:
    """The report over `runset`: one self-contained HTML page, UTF-8."""
    styles = run_styles(runset)
    colors = {name: s.color for name, s in styles.items()}
    sections: list[tuple[str, str, str]] = []
    sections.append(_section("runs", "What ran", "", tables.status_html(runset)
                             + tables.header_html(runset)))
    sections.append(_section("summary", "Summary per strategy", "",
                             tables.noise_html(runset, colors)
                             + tables.summary_html(runset, colors)))
    diff = tables.differences_html(runset)
    if diff:
        sections.append(_section(
            "differences", "Differences between runs",
            "Each strategy of a later folder against the same strategy of the first.", diff))
    sections.append(_section(
        "throughput", "Throughput",
        "Output tokens generated per second of makespan (first arrival to last finish).",
        _chart(charts.throughput_figure(runset, styles), "throughput")))
    sections.append(_section(
        "latency", "Latency distributions",
        "Cumulative distributions over requests: the height at x is the share of requests "
        "at or below x ms. TTFT: arrival to first token (queueing + prefill); TPOT: time per "
        "output token after the first; E2E: arrival to last token.",
        _chart(charts.latency_cdf_figure(runset, styles), "latency")))
    sections.extend(_latency_detail_sections(runset, styles))
    sections.append(_section(
        "memory", "Where the KV memory goes",
        "Left: the whole arena. Right: only memory held on behalf of requests, the view of "
        "the PagedAttention paper's Figure 2; the green share is the KV utilization. Reserved "
        "slots will be used by a request later, internal fragmentation never will, external "
        "fragmentation is free space in holes too small for the next waiting request.",
        _chart(charts.memory_figure(runset), "memory") + tables.kv_groups_html(runset)))
    waterfall = budget_waterfall_html(runset)
    if waterfall:
        sections.append(_section(
            "budget", "KV budget (vLLM's start-up)",
            "How the simulated KV budget was sized: the memory vLLM would leave for its KV "
            "cache on this GPU at the same flags (docs/estimate.md).", waterfall))
    timeline = timelines.timeline_figure(runset, styles)
    if timeline is not None:
        sections.append(_section(
            "timelines", "Over time",
            "One point per engine step (past 1,500 steps, each stretch's lowest and highest). "
            "Utilization drops show reservations and fragmentation; "
            "a long waiting queue next to low utilization is memory a better strategy would "
            "turn into batch size.", _chart(timeline, "timelines")))
    split = timelines.memory_timeline_figure(runset)
    if split is not None:
        sections.append(_section(
            "memory-time", "KV memory split over time", "Share of the arena per step and run.",
            _chart(split, "memory-time")))
    hits = timelines.hit_rate_figure(runset, styles)
    if hits is not None:
        sections.append(_section(
            "prefix", "Prefix cache",
            "Prompt tokens served from the prefix cache so far over prompt tokens so far, by "
            "admission time. It rises as shared prefixes (system prompts, earlier turns) fill "
            "the cache.", _chart(hits, "prefix")))
    tier = tier_section_html(runset)
    if tier:
        sections.append(_section(
            "host-tier", "Host KV tier",
            "Prefix hits served by the GPU cache and by the host tier (--kv-offload), the bytes "
            "that crossed the host link, and the wait of requests whose KV was loaded back "
            "(admission to the load's end, part of their prefill time; docs/offload.md).",
            tier))
    sections.extend(_accuracy_sections(runset, styles, colors))
    return _page(runset, sections)


def _latency_detail_sections(runset: RunSet, styles: dict[str, RunStyle],
                             ) -> list[tuple[str, str, str]]:
    """TTFT split, ITL CDF, throughput over time, step time vs batch size (each when the
    folders hold what it needs)."""
    out = []
    split = charts.ttft_split_figure(runset, styles)
    if split is not None:
        out.append(_section(
            "ttft-split", "Time to first token: queueing and prefill",
            "Queue: arrival to admission (waiting for memory or a batch slot). Prefill: "
            "admission to first token (the prompt's forward pass, plus the steps it shared). "
            "Memory-bound strategies lose time in the queue; hover for p99.",
            _chart(split, "ttft-split")))
    itl = charts.itl_cdf_figure(runset, styles)
    if itl is not None:
        out.append(_section(
            "itl", "Inter-token latency",
            "Every gap between consecutive output tokens of a request, pooled over requests "
            "(from tokens.parquet). The tail is decode steps that waited for a prefill in the "
            "same batch or for a preemption's recompute.", _chart(itl, "itl")))
    throughput = step_charts.throughput_timeline_figure(runset, styles)
    if throughput is not None:
        fig, source = throughput
        estimate = (" There each decode, and each prefill that completes "
                    "a prompt, samples one token (with chunked prefill a prompt's earlier "
                    "chunks count too)." if "steps.csv" in source else "")
        out.append(_section(
            "throughput-time", "Throughput over time",
            "Output tokens per second in 40 equal windows of the run, from "
            f"{escape(source)}. A ramp at the start is admission; a long low tail is the last "
            f"long requests running in a small batch.{estimate}",
            _chart(fig, "throughput-time")))
    steps = step_charts.step_time_figure(runset, styles)
    if steps is not None:
        out.append(_section(
            "step-time", "Step time vs batch size",
            "Each engine step's duration (steps.csv). Left, decode-only steps against the "
            "sequences they ran: the slope of the median line is what one more sequence in "
            "the batch costs; where it is flat, a larger batch is free throughput. Right, "
            "steps holding a prefill against the tokens they ran: their cost follows prompt "
            "tokens.", _chart(steps, "step-time")))
    return out


def _accuracy_sections(runset: RunSet, styles: dict[str, RunStyle], colors: dict[str, str],
                       ) -> list[tuple[str, str, str]]:
    runs: list[RunData] = [r for r in runset.runs if r.summary.accuracy]
    if not runs:
        return []
    body = "".join(tables.accuracy_html(r, colors) for r in runs)
    fig = charts.accuracy_figure(runs, styles)
    if fig is not None:
        body += _chart(fig, "accuracy")
    return [_section("accuracy", "fp8 KV cache accuracy",
                     "How far the fp8 cache moves the model's outputs from the unquantized "
                     "cache on this workload (kvbench_summary.json, key accuracy).", body)]


def _page(runset: RunSet, sections: list[tuple[str, str, str]]) -> bytes:
    nav = "".join(f"<a href='#{key}'>{escape(title)}</a>" for key, title, _ in sections)
    created = time.strftime("%Y-%m-%d %H:%M:%S")
    head = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>kvbench report: {escape(_title(runset))}</title>"
        f"<style>{CSS}</style>"
    )
    body = (
        f"</head><body><main><h1>kvbench report</h1><p class='sub'>{escape(_title(runset))}</p>"
        f"<nav>{nav}</nav>"
        + "".join(html for _, _, html in sections)
        + f"<footer>Generated by kvbench {escape(kvbench.__version__)} on {created}. "
        "Self-contained: opens offline.</footer></main></body></html>\n"
    )
    # Bytes around plotly.js's bytes: as one str the page would be widened to two bytes a
    # character by its first non-ASCII one, copied, and encoded back (all of plotly.js each
    # time).
    return b"".join((head.encode("utf-8"), plotly_js_script(), body.encode("utf-8")))
