"""`kvbench sweep [CONFIG.toml | SWEEP_DIR] [options]`: a grid of runs, one folder per point."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from kvbench.errors import KvbenchInputError, KvbenchRunError, os_error_line

HELP = """Run a grid of `kvbench run` (or, with --simulate, `kvbench simulate`) points.

Every run option takes a comma list; more than one value makes it an axis of the grid, and
the grid is the cartesian product of the axes (`--strategy contiguous,paged --request-rate
1,2,4` is 6 points). `--axis NAME=V1,V2` adds any option or `workload_param.NAME` as an axis
(use `;` between values that hold commas). A TOML file (CONFIG) holds the same: see
docs/sweep.md. Flags given with a file override it.

Each point is an ordinary results folder `<out>/<name>/<point-id>/`, where the point id is
its axis values (`strategy=paged,request_rate=4`). The sweep folder also holds sweep.json,
points.csv (one row per point) and report.html (throughput-latency curves, Pareto front, heat
maps). With --slo and --search request-rate, a bisection per combination of the other axes
finds the highest rate that meets the SLO (capacity.csv).

--resume (or a sweep folder as CONFIG) keeps the points whose folder is complete and runs the
others. --executor ray runs each point as a Ray task (`pip install 'kvbench[ray]'`).
"""

def _split(value: str) -> list[str]:
    separator = ";" if ";" in value else ","
    return [v.strip() for v in value.split(separator) if v.strip()]


def _point_options() -> list[click.Option]:
    """`run`'s and `simulate`'s per-run options, taking comma lists instead of one value."""
    # From the schema, not `kvbench.sweep`: `kvbench sweep --help` loads no torch.
    from kvbench.cli.options import click_option
    from kvbench.session.run_options import per_run_fields

    return [click_option(info, "run", comma_list=True) for info in per_run_fields().values()]


def _range(text: str) -> tuple[float, float]:
    items = [v.strip() for v in text.split(",") if v.strip()]
    try:
        lo, hi = (float(v) for v in items)
    except ValueError:
        raise KvbenchInputError(f"--search-range takes LO,HI (numbers), got {text!r}") from None
    return lo, hi


def _given(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    sources = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return {k: v for k, v in params.items() if ctx.get_parameter_source(k) in sources}


def _apply_options(spec, given: dict[str, Any], axis_items: tuple[str, ...]) -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.sweep.options import canonical_name, catalogue

    options = catalogue()
    for name, value in given.items():
        info = options[name]
        if info.multiple:
            spec.base["workload_params"] = [*spec.base.get("workload_params", []), *value]
            continue
        if info.is_flag:
            spec.base[name] = value
            spec.axes.pop(name, None)
            continue
        values = _split(value)
        if len(values) > 1 or (name == "strategy" and values == ["all"]):
            spec.axes[name] = values
            spec.base.pop(name, None)
        elif values:
            spec.base[name] = values[0]
            spec.axes.pop(name, None)
    for item in axis_items:
        key, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise KvbenchInputError(f"--axis takes NAME=V1,V2,..., got {item!r}")
        name = canonical_name(key)
        spec.axes[name] = _split(value)
        spec.base.pop(name, None)


def _build_spec(config: str | None, simulate: bool, given: dict[str, Any],
                extra: dict[str, Any]):
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.sweep.config import ReportSpec, SearchSpec, SweepSpec, load_sweep_config
    from kvbench.sweep.sweep_folder import SWEEP_JSON, load_sweep_folder

    folder = None
    if config is not None and Path(config).is_dir():
        if not (Path(config) / SWEEP_JSON).exists():
            raise KvbenchInputError(f"{config} is a folder without {SWEEP_JSON}: not a sweep")
        grid_flags = [k for k in ("slo", "search", "search_range", "tolerance", "name")
                      if extra.get(k) is not None]
        if given or extra["axis_items"] or simulate or grid_flags:
            raise KvbenchInputError(
                f"{config} is a sweep folder: its grid is in {SWEEP_JSON}; give no grid "
                "options (only --executor, --address, --jobs, report and output options)"
            )
        spec, _ = load_sweep_folder(Path(config))
        folder = Path(config)
    else:
        spec = load_sweep_config(config) if config else SweepSpec()
        if simulate or (config is None and "gpu" in given):
            spec.kind = "simulate"
        spec.normalize()
        _apply_options(spec, given, extra["axis_items"])
        if extra["slo"] is not None:
            spec.slo = extra["slo"]
        if (extra["search"] is not None or extra["search_range"]
                or extra["tolerance"] is not None):
            if extra["search"] is None and spec.search is None:
                raise KvbenchInputError("--search-range and --tolerance need --search AXIS")
            old = spec.search or SearchSpec(extra["search"])
            lo, hi = _range(extra["search_range"]) if extra["search_range"] else (old.lo, old.hi)
            spec.search = dataclasses.replace(
                old, axis=extra["search"] or old.axis, lo=lo, hi=hi,
                tolerance=old.tolerance if extra["tolerance"] is None else extra["tolerance"])
        if extra["name"]:
            spec.name = extra["name"]
    if extra["out"] is not None and folder is None:
        spec.out = extra["out"]
    report = {k: v for k, v in dataclasses.asdict(spec.report).items() if v is not None}
    report.update((k, extra[k]) for k in ("pareto", "heatmap") if extra[k])
    if extra["heatmap_metrics"]:
        report["heatmap_metrics"] = _split(extra["heatmap_metrics"])
    spec.report = ReportSpec.from_dict(report, "--")
    spec.executor = dataclasses.replace(spec.executor, **{
        field: extra[name] for field, name in (("kind", "executor"), ("address", "address"),
                                               ("jobs", "jobs")) if extra[name] is not None})
    return spec.normalize().check(), folder


def _command_line(ctx: click.Context, config: str | None) -> str:
    """The command as typed; rebuilt from the parsed options when `kvbench.cli.main` was
    called from Python (then `sys.argv` is the caller's)."""
    argv = sys.argv
    if len(argv) > 1 and Path(argv[0]).name == "kvbench" and argv[1] == "sweep":
        return shlex.join(["kvbench", *argv[1:]])
    parts = ["kvbench", "sweep", *([config] if config else [])]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        if ctx.get_parameter_source(param.name) != ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        flag = max(param.opts, key=len)
        if param.is_flag:
            parts.append(flag if value or not param.secondary_opts else param.secondary_opts[0])
        elif param.multiple:
            for item in value:
                parts += [flag, str(item)]
        else:
            parts += [flag, str(value)]
    return shlex.join(parts)


def _cell(row, column: str, spec: str = ".1f", suffix: str = "") -> str:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.report.text_table import fmt

    value = row.get(column)
    return fmt(None if value is None or value != value else float(value), spec, suffix)


def _print_tables(result) -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.report.text_table import format_table
    from kvbench.sweep.table import STRATEGY_AXES

    # With a prefix cache in the grid, its hit rate (a cache-size axis's knee shows there)
    hits = "prefix_hit_rate" in result.points and bool(
        (result.points["prefix_hit_rate"].fillna(0) > 0).any())
    rows = []
    for _, r in result.points.iterrows():
        met = r.get("meets_slo")
        rows.append([
            r["point_id"], r["status"], _cell(r, "output_tok_s"),
            *([_cell(r, "prefix_hit_rate", ".1%")] if hits else []),
            _cell(r, "ttft_p50_ms", ".1f", " ms"),
            _cell(r, "ttft_p99_ms", ".1f", " ms"), _cell(r, "tpot_p99_ms", ".2f", " ms"),
            _cell(r, "utilization_mean", ".1%"), _cell(r, "preemptions", ".0f"),
            "" if met is None or met != met else ("yes" if met else "no"),
        ])
    click.echo(format_table(["point", "status", "out tok/s", *(["prefix hit"] if hits else []),
                             "TTFT p50", "TTFT p99", "TPOT p99", "KV util", "preempt",
                             "meets SLO"], rows))
    if result.capacity is not None:
        cap = result.capacity
        group_cols = [c for c in cap.columns if c not in (
            "label", "axis", "capacity", "status", "lo", "hi", "probes", "point_id",
            "miss_above", "slo") and not c.endswith("_at_capacity")]
        cap_rows = []
        for _, r in cap.iterrows():
            value = r["capacity"]
            shown = "-" if value is None or value != value else f"{value:g}"
            if r["status"] == "below_range":
                shown = f"< {r['hi']:g}"
            elif r["status"] == "above_range":
                shown = f">= {value:g}"
            parts = [str(r["label"])] if any(c in STRATEGY_AXES for c in group_cols) else []
            parts += [f"{c}={r[c]}" for c in group_cols if c not in STRATEGY_AXES]
            cap_rows.append([", ".join(parts) or "all", shown,
                             r["status"], int(r["probes"])])
        axis = cap["axis"].iloc[0] if len(cap) else "value"
        click.echo(f"\nSLO capacity ({cap['slo'].iloc[0] if len(cap) else ''}):")
        click.echo(format_table(["group", f"max {axis}", "search", "runs"], cap_rows))


@click.command(name="sweep", help=HELP)
@click.argument("config", required=False, metavar="[CONFIG.toml | SWEEP_DIR]")
@click.option("--simulate", is_flag=True, help="points run `kvbench simulate` (cost model)")
@click.option("--axis", "axis_items", multiple=True, metavar="NAME=V1,V2",
              help="an axis of any run option or workload_param.NAME (repeatable)")
@click.option("--name", default=None,
              help="sweep folder name under --out [default: CONFIG's stem, else a timestamp]")
@click.option("--out", default=None, help="folder that receives the sweep folder [results]")
@click.option("--resume", is_flag=True, help="keep complete points of an existing sweep folder")
@click.option("--slo", default=None, metavar="METRIC.STAT=LIMIT,...",
              help="targets, e.g. ttft.p99=500ms,tpot.p99=50ms (STAT defaults to p99)")
@click.option("--search", default=None, metavar="AXIS",
              help="SLO capacity search over request-rate or max-concurrency")
@click.option("--search-range", default=None, metavar="LO,HI",
              help="bisection range [0.05,100 req/s; 1,1024 for concurrency]")
@click.option("--tolerance", type=float, default=None,
              help="relative width of the final bracket [0.05]")
@click.option("--executor", type=click.Choice(["local", "ray"]), default=None,
              help="where points run [local]")
@click.option("--address", default=None, help="ray: cluster address (e.g. auto)")
@click.option("--jobs", type=int, default=None,
              help="local: parallel processes [1; one per GPU when several are visible]")
@click.option("--pareto", default=None, metavar="X,Y",
              help="metrics of the Pareto front [output_tok_s,tpot.p99]")
@click.option("--heatmap", default=None, metavar="AXIS1,AXIS2", help="axes of the heat maps")
@click.option("--heatmap-metrics", default=None, metavar="M1,M2",
              help="metrics of the heat maps [output_tok_s,tpot.p99]")
@click.option("--point-reports", is_flag=True, help="also write report.html in every point")
@click.option("--dry-run", is_flag=True, help="list the points and exit")
@click.option("--quiet", is_flag=True, help="no progress or table; print the sweep folder")
@click.option("--json", "as_json", is_flag=True, help="print points (and capacity) as JSON")
def sweep_command(config: str | None, simulate: bool, resume: bool, point_reports: bool,
                  dry_run: bool, quiet: bool, as_json: bool, **params: Any) -> None:
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.results.files import check_output_folder
    from kvbench.sweep.driver import resolve_folder, run_sweep
    from kvbench.sweep.grid import expand_grid

    ctx = click.get_current_context()
    extra_names = ("axis_items", "name", "out", "slo", "search", "search_range", "tolerance",
                   "executor", "address", "jobs", "pareto", "heatmap", "heatmap_metrics")
    extra = {k: params.pop(k) for k in extra_names}
    given = _given(ctx, params)
    spec, folder = _build_spec(config, simulate, given, extra)
    if folder is not None:
        resume = True
    if dry_run:
        for point in expand_grid(spec):
            dup = f"  (also {', '.join(point.duplicates)})" if point.duplicates else ""
            click.echo(point.point_id + dup)
        return
    if folder is None:
        check_output_folder(spec.out)  # before the sweep's folder is named
        folder = resolve_folder(spec, resume)
    command = _command_line(ctx, config)
    talk = not quiet and not as_json
    echo = (lambda message: click.echo(message, err=True)) if talk else None
    try:
        result = run_sweep(spec, folder, resume=resume, command=command, echo=echo,
                           point_reports=point_reports)
    except OSError as err:  # once the sweep's folder exists: a failed run, exit 1
        if not os.path.isdir(folder):
            raise  # never started (a name too long, say): exit 2 (kvbench.cli.app)
        raise KvbenchRunError(f"{os_error_line(err)}; {folder} keeps what was written "
                              "(unfinished: --resume continues it)") from None
    if as_json:
        data = {
            "folder": str(folder),
            "points": json.loads(result.points.to_json(orient="records")),
            "capacity": None if result.capacity is None
            else json.loads(result.capacity.to_json(orient="records")),
        }
        click.echo(json.dumps(data, indent=2))
    elif quiet:
        click.echo(str(folder))
    else:
        _print_tables(result)
        click.echo(f"\nsweep: {folder}\nreport: {result.report}")
    if result.failed:
        shown = ", ".join(result.failed[:3]) + (" ..." if len(result.failed) > 3 else "")
        raise KvbenchRunError(
            f"{len(result.failed)} of {len(result.points)} points failed ({shown}); "
            f"see {folder}/points.csv; rerun with --resume to retry them"
        )


sweep_command.params.extend(_point_options())

__all__ = ["sweep_command"]
