"""`kvbench compare BASE_DIR NEW_DIR`: differences between two results folders, a CI gate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kvbench.errors import KvbenchInputError
from kvbench.report.metrics import (
    DEFAULT_DIFF,
    check_pairs,
    differences_with_noise,
    parse_thresholds,
)
from kvbench.report.runs import RunData, load_runs, pair_runs
from kvbench.report.text_table import format_table
from kvbench.results.metric_catalogue import METRICS
from kvbench.results.run_folder import check_finished


def _metric_help() -> str:
    names = ", ".join(METRICS)
    return (
        "Compare two results folders of `kvbench run` (one strategy's folder or a comparison "
        "folder; strategies are matched by label) and print the differences. With --fail-on, "
        "exit 1 when a threshold is crossed, so CI can gate regressions.\n\n"
        "--fail-on takes METRIC:+N% or METRIC:-N% items, comma-separated. The sign is the "
        "direction the metric may move: output_tok_s:-5% fails when new < base x 0.95, "
        "ttft.p99:+10% fails when new > base x 1.10. Without % the number is an absolute "
        "change in the metric's unit (ms, tok/s, a count, a fraction): ttft.p99:+10ms (or "
        "+10) fails when new > base + 10 ms, preemptions:+0 fails on any increase. A metric "
        "missing in NEW but present in BASE fails.\n\n"
        "The runs must be whole (finished: no folder still named .partial, status "
        "complete, every file readable, every planned strategy there) and share workload, "
        "workload params, num_requests, request and conversation rates, concurrency, model, "
        "dtype, kv_cache_dtype and KV budget; otherwise compare exits 2 saying why, unless "
        "--allow-incomplete or --allow-mismatch. When both sides ran with --repeat, values are the means over "
        "repeats and each row says whether the 95% confidence intervals overlap (a difference "
        "within noise); a single-run comparison prints a warning that it cannot tell noise "
        "from change. A change is called better or worse only beyond noise: between repeats "
        "whose intervals are apart, or between simulated runs (no noise); between single "
        "measured runs it is 'not tested'. Without --fail-on there is no gate: the Markdown "
        "says 'no gate' and the JSON's passed is null.\n\n"
        f"Metrics: {names}. Latency metrics (ttft, tpot, itl, e2e, queue, prefill) take .mean, "
        ".p50, .p90, .p99 or .max and are in milliseconds; utilization_mean, "
        "utilization_saturated and prefix_hit_rate are fractions (0..1)."
    )


@click.command("compare", help=_metric_help())
@click.argument("base_dir", type=click.Path(path_type=Path))
@click.argument("new_dir", type=click.Path(path_type=Path))
@click.option("--fail-on", "fail_on", default=None, metavar="METRIC:±N[%|ms][,...]",
              help="thresholds: relative (output_tok_s:-5%, ttft.p99:+10%) or absolute in "
                   "the metric's unit (ttft.p99:+10ms, preemptions:+0); see above")
@click.option("--metrics", "metric_list", default=None, metavar="NAME[,NAME...]",
              help="rows to print [default: throughput, latency p50/p99, utilization, "
                   "preemptions, hit rate; plus every --fail-on metric]; 'all' for all")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]),
              default="text", show_default=True,
              help="text table, JSON, or Markdown for a pull-request comment")
@click.option("--json", "as_json", is_flag=True, help="same as --format json")
@click.option("--allow-mismatch", is_flag=True,
              help="compare runs whose workload, model, dtype or budget differ (warns)")
@click.option("--allow-incomplete", is_flag=True,
              help="compare runs that did not finish, on what they finished (warns)")
@click.pass_context
def compare_command(ctx: click.Context, base_dir: Path, new_dir: Path, fail_on: str | None,
                    metric_list: str | None, fmt: str, as_json: bool,
                    allow_mismatch: bool, allow_incomplete: bool) -> None:
    fmt = "json" if as_json else fmt
    thresholds = parse_thresholds(fail_on)
    names = _metric_names(metric_list, [t.metric.name for t in thresholds])
    unfinished = check_finished([base_dir, new_dir], allow_incomplete=allow_incomplete,
                                refusal="compare finished runs only (--allow-incomplete "
                                        "compares what finished)")
    base_runs = load_runs([base_dir]).runs
    new_runs = load_runs([new_dir]).runs
    pairs, unmatched = match_runs(base_runs, new_runs)
    warnings = check_pairs(pairs, allow_mismatch)
    if unfinished:
        warnings.insert(0, f"{unfinished}; compared on what finished (--allow-incomplete)")
    failures: list[str] = []
    report = []
    for base, new in pairs:
        rows = differences_with_noise(base, new, names)
        checks = []
        for threshold in thresholds:
            d = next((r for r, _ in rows if r.metric.name == threshold.metric.name), None)
            why = threshold.crossed(d.base, d.new) if d is not None else None
            checks.append((threshold, why))
            if why:
                failures.append(f"{new.label}: {threshold.text}: {why}")
        report.append((base, new, rows, checks))
    if fmt == "json":
        click.echo(json.dumps(_as_json(base_dir, new_dir, report, unmatched, failures,
                                       warnings, gated=bool(thresholds)), indent=2))
    elif fmt == "markdown":
        click.echo(_markdown(base_dir, new_dir, base_runs, new_runs, report, unmatched,
                             failures, warnings, gated=bool(thresholds)))
    else:
        for warning in warnings:
            click.echo(f"kvbench: warning: {warning}", err=True)
        _print(base_dir, new_dir, base_runs, new_runs, report, unmatched, failures)
    ctx.exit(1 if failures else 0)


def _metric_names(text: str | None, extra: list[str]) -> list[str]:
    if text and text.strip() == "all":
        return list(METRICS)
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(DEFAULT_DIFF)
    for name in names:
        if name not in METRICS:
            raise KvbenchInputError(f"unknown metric {name!r} in --metrics; known: "
                                    f"{', '.join(METRICS)}")
    return names + [n for n in extra if n not in names]


def match_runs(base: list[RunData], new: list[RunData]):
    """Pairs by strategy label; two single runs pair whatever their labels."""
    pairs = pair_runs(base, new)
    paired = {id(r) for pair in pairs for r in pair}
    unmatched = [r for r in base + new if id(r) not in paired]
    if not pairs:
        raise KvbenchInputError(
            "no strategy in common: base has " + ", ".join(r.label for r in base)
            + "; new has " + ", ".join(r.label for r in new)
        )
    return pairs, unmatched


def _describe(folder: Path, runs: list[RunData]) -> str:
    v = runs[0].versions
    bits = [f"git {v['git']}" if v.get("git") else "", runs[0].config.get("created") or ""]
    extra = ", ".join(b for b in bits if b)
    return f"{folder}" + (f" ({extra})" if extra else "")


def _print(base_dir, new_dir, base_runs, new_runs, report, unmatched, failures) -> None:
    click.echo(f"base: {_describe(base_dir, base_runs)}")
    click.echo(f"new:  {_describe(new_dir, new_runs)}")
    for base, new, rows, checks in report:
        title = new.label if base.label == new.label else f"{base.label} -> {new.label}"
        click.echo(f"\n{title}")
        table = [[d.metric.name, d.metric.format(d.base), d.metric.format(d.new),
                  d.format_delta(), "" if d.verdict == "same" else d.verdict,
                  spread.describe() if spread else ""]
                 for d, spread in rows]
        headers = ["metric", "base", "new", "change", "", "noise"]
        if not any(spread for _, spread in rows):
            headers, table = headers[:-1], [r[:-1] for r in table]
        click.echo(format_table(headers, table))
        for threshold, why in checks:
            click.echo(f"  {'FAIL' if why else 'ok  '} {threshold.text}"
                       + (f": {why}" if why else ""))
    if unmatched:
        click.echo("\nnot compared (no counterpart): "
                   + ", ".join(f"{r.label} ({r.path})" for r in unmatched))
    if failures:
        click.echo(f"\n{len(failures)} threshold(s) crossed:", err=True)
        for failure in failures:
            click.echo(f"  {failure}", err=True)


def _markdown(base_dir, new_dir, base_runs, new_runs, report, unmatched, failures,
              warnings, gated: bool) -> str:
    """The comparison as GitHub-flavoured Markdown, for a pull-request comment."""
    if failures:
        verdict = f"**{len(failures)} threshold(s) crossed**"
    else:
        verdict = "**passed**" if gated else "**no gate** (no --fail-on)"
    lines = [f"### kvbench compare: {verdict}", "",
             f"- base: `{_describe(base_dir, base_runs)}`",
             f"- new: `{_describe(new_dir, new_runs)}`"]
    if warnings:
        lines += ["", *(f"> **warning:** {w}" for w in warnings)]
    for base, new, rows, checks in report:
        title = new.label if base.label == new.label else f"{base.label} → {new.label}"
        with_noise = any(spread for _, spread in rows)
        head = ["metric", "base", "new", "change", "verdict"] + (["noise"] if with_noise else [])
        lines += ["", f"#### {title}", "", "| " + " | ".join(head) + " |",
                  "|" + "|".join(["---"] + ["---:"] * 3 + ["---"] * (len(head) - 4)) + "|"]
        for d, spread in rows:
            cells = [f"`{d.metric.name}`", d.metric.format(d.base), d.metric.format(d.new),
                     d.format_delta(), "" if d.verdict == "same" else d.verdict]
            if with_noise:
                cells.append(spread.describe() if spread else "")
            lines.append("| " + " | ".join(cells) + " |")
        if checks:
            lines.append("")
            lines += [f"- {':x: FAIL' if why else ':white_check_mark: ok'} `{t.text}`"
                      + (f": {why}" if why else "") for t, why in checks]
    if unmatched:
        lines += ["", "Not compared (no counterpart): "
                  + ", ".join(f"`{r.label}`" for r in unmatched)]
    return "\n".join(lines)


def _as_json(base_dir, new_dir, report, unmatched, failures, warnings, gated: bool) -> dict:
    return {
        "base": str(base_dir),
        "new": str(new_dir),
        "pairs": [
            {
                "base_label": base.label,
                "new_label": new.label,
                "metrics": {d.metric.name: {"base": d.base, "new": d.new, "change": d.ratio,
                                            "verdict": d.verdict,
                                            **_noise_json(spread)} for d, spread in rows},
                "checks": [{"threshold": t.text, "failed": bool(why), "message": why}
                           for t, why in checks],
            }
            for base, new, rows, checks in report
        ],
        "unmatched": [str(r.path) for r in unmatched],
        "failures": failures,
        "warnings": warnings,
        # null without --fail-on: no gate, nothing passed
        "passed": not failures if gated else None,
    }


def _noise_json(spread) -> dict:
    if spread is None:
        return {}
    return {"base_ci95": spread.base_ci, "new_ci95": spread.new_ci,
            "within_noise": spread.overlap}
