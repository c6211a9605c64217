"""HTML tables of a report: run header, per-strategy summary, differences, fp8 accuracy."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any

from kvbench.report.metrics import Difference, differences
from kvbench.report.runs import RunData, RunSet
from kvbench.report.style import RunStyle
from kvbench.report.summary_table import REPEAT_COLUMNS
from kvbench.results.metric_catalogue import METRICS
from kvbench.results.repeat import format_mean_ci
from kvbench.units import format_bytes

# Summary table columns: metric names of `metrics.METRICS`; the best value of each is marked.
SUMMARY_COLUMNS = (
    ("output_tok_s", "out tok/s"), ("requests_s", "req/s"), ("ttft.p50", "TTFT p50"),
    ("ttft.p99", "TTFT p99"), ("tpot.p50", "TPOT p50"), ("tpot.p99", "TPOT p99"),
    ("e2e.p50", "E2E p50"), ("e2e.p99", "E2E p99"),
    ("utilization_mean", "KV util"), ("utilization_saturated", "util sat."),
    ("preemptions", "preempt."), ("prefix_hit_rate", "prefix hit"),
)


def _number(value: float | None, unit: str) -> str:
    """A table cell without its unit (the column header carries it)."""
    if value is None:
        return "-"
    if unit == "%":
        return f"{value:.1%}"
    if unit == "":
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"
    magnitude = abs(value)
    return f"{value:.0f}" if magnitude >= 1000 else f"{value:.1f}" if magnitude >= 10 \
        else f"{value:.2f}" if magnitude >= 0.1 else f"{value:.3g}"


def _cell(value: Any) -> str:
    return escape("-" if value is None or value == "" else str(value))


def table_html(headers: Sequence[str], rows: list[list[str]]) -> str:
    """A scrolling table of text cells under a row of `headers`."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<div class='scroll'><table class='summary'><tr>{head}</tr>{body}</table></div>"


def _budget(runs: list[RunData]) -> str:
    """`64.00 MiB; capacity: paged 32768, fp8 65536 tokens` (budgets once, capacity each)."""
    budgets = [r.summary.memory.kv_budget_bytes or r.config.get("kv_budget_bytes") for r in runs]
    text = ", ".join(dict.fromkeys(format_bytes(b) if b else "-" for b in budgets))
    capacities = [f"{r.label} {r.summary.memory.kv_capacity_tokens}" for r in runs
                  if r.summary.memory.kv_capacity_tokens is not None]
    return f"{text}; capacity: {', '.join(capacities)} tokens" if capacities else text


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _versions(run: RunData) -> str:
    v = run.versions
    parts = [f"{k} {v[k]}" for k in ("kvbench", "git", "torch", "triton", "cuda") if v.get(k)]
    return ", ".join(parts) or "-"


def _group_facts(runs: list[RunData]) -> list[tuple[str, str]]:
    first = runs[0]
    s = first.summary
    seeds = sorted({str(r.summary.seed) for r in runs})
    return [
        ("model", f"{s.model or '-'} ({s.dtype or '-'})"),
        ("device", str(s.device or first.config.get("device") or "-")),
        ("workload", f"{s.workload or '-'}, {_or_dash(s.num_requests)} requests"),
        ("KV budget", _budget(runs)),
        ("seed", ", ".join(seeds)),
        ("strategies", ", ".join(r.label for r in runs)),
        ("versions", _versions(first)),
        ("created", str(first.config.get("created") or "-")),
        ("command", str(first.config.get("command") or "-")),
        ("folder", str(first.group)),
    ]


def header_html(runset: RunSet) -> str:
    """What ran: one fact list for one run or comparison, a table with a column per group."""
    groups = [[r for r in runset.runs if r.group_index == i] for i in range(len(runset.groups))]
    facts = [_group_facts(g) for g in groups]
    if len(groups) == 1:
        rows = "".join(
            f"<tr><th>{escape(k)}</th><td class='{'cmd' if k == 'command' else ''}'>"
            f"{_cell(v)}</td></tr>" for k, v in facts[0]
        )
        return f"<table class='facts'>{rows}</table>"
    head = "".join(f"<th>{escape(g[0].group_tag)}</th>" for g in groups)
    rows = []
    for i, (key, _) in enumerate(facts[0]):
        values = [f[i][1] for f in facts]
        differ = len(set(values)) > 1
        cls = " class='differs'" if differ else ""
        tds = "".join(f"<td{cls}>{_cell(v)}</td>" for v in values)
        rows.append(f"<tr><th>{escape(key)}</th>{tds}</tr>")
    return (f"<table class='facts multi'><tr><th></th>{head}</tr>{''.join(rows)}</table>"
            "<p class='note'>Highlighted cells differ between the runs.</p>")


def status_html(runset: RunSet) -> str:
    bad = [r for r in runset.runs if r.status != "complete"]
    named = {p.path.resolve() for p in runset.problems}
    items = "".join(f"<li>{escape(str(p))} ({escape(str(p.path))})</li>"
                    for p in runset.problems)
    items += "".join(f"<li>{escape(r.name)}: {escape(r.status)} ({escape(str(r.path))})</li>"
                     for r in bad if r.path.resolve() not in named)
    if not items:
        return ""
    return (f"<div class='warning'><b>Incomplete runs</b>: their files hold what finished; a "
            f"run killed before its summary shows the requests it had finished."
            f"<ul>{items}</ul></div>")


def summary_html(runset: RunSet, styles: dict[str, RunStyle]) -> str:
    runs = runset.runs
    best: dict[str, float] = {}
    for name, _ in SUMMARY_COLUMNS:
        m = METRICS[name]
        values = [v for v in (m.value(r.summary) for r in runs) if v is not None]
        if len(values) > 1 and len(set(values)) > 1:
            best[name] = max(values) if m.higher_is_better else min(values)
    head = "".join(
        f"<th title='{escape(METRICS[n].title)}'>{escape(t)}"
        f"{'<br><small>ms</small>' if METRICS[n].unit == 'ms' else ''}</th>"
        for n, t in SUMMARY_COLUMNS
    )
    body = []
    for run in runs:
        s = run.summary
        done = f"{_or_dash(s.completed)}/{_or_dash(s.num_requests)}"
        cells = [f"<th class='name'>{_swatch(run, styles)}{escape(run.name)}</th>"
                 f"<td>{escape(done)}</td>"]
        for name, _ in SUMMARY_COLUMNS:
            m = METRICS[name]
            value = m.value(s)
            is_best = name in best and value == best[name]
            cls = " class='best' title='best in this column'" if is_best else ""
            mark = " ★" if is_best else ""
            cells.append(f"<td{cls}>{escape(_number(value, m.unit))}{mark}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        "<div class='scroll'><table class='summary'><tr><th>strategy</th><th>done</th>"
        f"{head}</tr>{''.join(body)}</table></div>"
        "<p class='note'>★ best value in the column (highest throughput, utilization and hit "
        "rate; lowest latency and preemptions). Latencies in milliseconds; KV util = token / "
        "held memory, time-weighted over steps; util sat. = the same over steps with a "
        "waiting queue.</p>"
    )


def kv_groups_html(runset: RunSet) -> str:
    """Each run's KV held per token and every KV group's mean split (`memory.kv_groups`);
    empty when no run has them."""
    rows = []
    for run in runset.runs:
        mem = run.summary.memory
        if not mem.kv_groups:
            continue
        per_token = mem.kv_held_bytes_per_token
        for i, group in enumerate(mem.kv_groups):
            kind = group.get("attention", "-")
            if group.get("window") is not None:
                kind += f" (W {group['window']})"
            cells = [run.name if i == 0 else "",
                     format_bytes(per_token) if i == 0 and per_token else "",
                     kind, _or_dash(group.get("num_layers"))]
            for part in ("token", "reserved", "internal", "external", "free"):
                value = group.get(f"{part}_bytes_mean")
                cells.append(format_bytes(value) if value is not None else "-")
            cells.append(format_bytes(group.get("held_bytes_max") or 0))
            rows.append([c or "-" for c in cells])
    if not rows:
        return ""
    return table_html(("strategy", "KV held / token", "group", "layers", "token", "reserved",
                       "internal", "external", "free", "held max"), rows) + (
        "<p class='note'>Per KV group: step-weighted mean bytes of each part of the "
        "split. One table for every layer (paged, prefix, contiguous without windows): "
        "every group holds the same slots. hybrid: one row per allocation group, each with "
        "its own block tables in one shared pool, whose free pages belong to no group "
        "(free: -); contiguous on a windowed model likewise, each window group a ring. KV held "
        "/ token = mean held bytes / mean computed tokens of the sequences holding memory."
        "</p>"
    )


def noise_html(runset: RunSet, styles: dict[str, RunStyle]) -> str:
    """How far to trust a difference: mean ± 95% CI when the runs were repeated, else a
    warning that one run cannot tell a difference from noise."""
    repeated = [r for r in runset.runs if r.repeat is not None]
    single = [r.name for r in runset.runs if r.repeat is None]
    parts = []
    if single:
        who = "" if not repeated else f" ({', '.join(single)})"
        parts.append(
            f"<p class='badge noise'>single run{escape(who)} — differences below noise are not "
            "significant. Strategies ran one after another on the same machine, so load "
            "changes can move a ranking; <code>--repeat N</code> gives 95% confidence "
            "intervals.</p>")
    if repeated:
        head = "".join(f"<th>{escape(t)}</th>" for _, t, _, _ in REPEAT_COLUMNS)
        rows = []
        for run in repeated:
            cells = "".join(f"<td>{escape(_mean_ci(run.repeat.get(key), spec, scale))}</td>"
                            for key, _, spec, scale in REPEAT_COLUMNS)
            # (the runs behind a figure: every run has a throughput)
            count = max((f.get("n") or 0 for f in run.repeat.values() if isinstance(f, dict)),
                        default=0)
            rows.append(f"<tr><th class='name'>{_swatch(run, styles)}{escape(run.name)}</th>"
                        f"<td>{count or '-'}</td>{cells}</tr>")
        parts.append(
            "<p class='badge repeat'>mean ± 95% confidence interval over repeated runs: "
            "differences inside the intervals are noise</p><div class='scroll'>"
            f"<table class='summary'><tr><th>strategy</th><th>runs</th>{head}</tr>"
            f"{''.join(rows)}</table></div>")
    return "".join(parts)


def _mean_ci(stat: Any, spec: str, scale: float) -> str:
    if not isinstance(stat, dict) or "mean" not in stat or "ci95" not in stat:
        return "-"
    return format_mean_ci(stat, spec, scale)


def _swatch(run: RunData, styles: dict[str, RunStyle]) -> str:
    """A colour chip matching the run's colour in the charts."""
    style = styles.get(run.name)
    return f"<span class='swatch' style='background:{style.color}'></span>" if style else ""


def differences_html(runset: RunSet) -> str:
    parts = []
    for base, new in runset.pairs():
        diffs = differences(base.summary, new.summary)
        rows = "".join(_diff_row(d) for d in diffs)
        parts.append(
            f"<h3>{escape(new.label)}: {escape(base.group_tag)} → {escape(new.group_tag)}</h3>"
            "<div class='scroll'><table class='diff'><tr><th>metric</th>"
            f"<th>{escape(base.name)}</th><th>{escape(new.name)}</th><th>change</th></tr>"
            f"{rows}</table></div>"
        )
    if not parts:
        return ""
    return "".join(parts) + (
        "<p class='note'>Change relative to the first folder given; green is better, red is "
        "worse (changes under 0.5% count as the same). <code>kvbench compare BASE NEW "
        "--fail-on ...</code> turns these into a CI gate.</p>"
    )


def _diff_row(d: Difference) -> str:
    m = d.metric
    return (f"<tr class='{d.verdict.replace('/', '')}'><th>{escape(m.name)}</th>"
            f"<td>{escape(m.format(d.base))}</td><td>{escape(m.format(d.new))}</td>"
            f"<td class='delta'>{escape(d.format_delta())}</td></tr>")


def accuracy_html(run: RunData, styles: dict[str, RunStyle]) -> str:
    """`summary.accuracy` (fp8 runs) as a table of its scalar entries, flattened."""
    accuracy = run.summary.accuracy
    if not accuracy:
        return ""
    rows = []
    for key, value in flatten(accuracy):
        if value is None:
            text = "-"
        elif isinstance(value, float):
            text = f"{value:.6g}"
        elif is_long_series(value):
            text = f"{len(value)} values (charted below)"
        elif isinstance(value, list | dict):
            text = json.dumps(value)
            text = text if len(text) <= LONG_TEXT else text[:LONG_TEXT] + " …"
        else:
            text = str(value)
        rows.append(f"<tr><th>{escape(key)}</th><td>{escape(text)}</td></tr>")
    return (f"<h3>{_swatch(run, styles)}{escape(run.name)}</h3>"
            f"<table class='facts'>{''.join(rows)}</table>")


LONG_TEXT = 160


def is_long_series(value: Any) -> bool:
    """A list of numbers too long to read in a table cell (a report charts it instead)."""
    return (isinstance(value, list) and len(value) > 1
            and all(v is None or (isinstance(v, int | float) and not isinstance(v, bool))
                    for v in value)
            and len(json.dumps(value)) > LONG_TEXT)


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            out.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return [(prefix or "value", value)]
