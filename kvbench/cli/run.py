"""`kvbench run`, and the printing that `run` and `simulate` share."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click

from kvbench.cli.options import run_options, split_params
from kvbench.session.run_options import RunOptions


@run_options("run")
@click.command(name="run")
def run_command(**params: Any) -> None:
    """Replay a workload through the engine with one or more strategies."""
    options, output = split_params(params)
    execute(RunOptions.for_kind("run", **options), **output)


def execute(options: RunOptions, *, quiet: bool, as_json: bool) -> None:
    """Plan, run and print a session of `kvbench run` or `kvbench simulate`."""
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.session.session import plan_session, run_session

    plan = plan_session(options)
    # --quiet silences progress and the table, never a warning.
    for warning in plan.warnings:
        click.echo(f"kvbench: warning: {warning}", err=True)

    def announce(label: str, k: int, repeat: int) -> None:
        rep = f" (repeat {k}/{repeat})" if repeat > 1 else ""
        click.echo(f"running {label}{rep} ...", err=True)

    result = run_session(
        plan, command="kvbench " + shlex.join(sys.argv[1:]), show_progress=not quiet,
        on_run_start=None if quiet or as_json else announce,
    )
    summaries = result.summaries
    if as_json:
        data: Any = summaries[0] if len(summaries) == 1 else summaries
        if result.repeats:
            data = {"summaries": summaries, "repeats": result.repeats}
        click.echo(json.dumps(data, indent=2))
    elif quiet:
        click.echo(str(result.root))
    else:
        # CLI: loaded when the command runs, so --help imports no pandas/torch
        from kvbench.report.summary_table import render_repeats, render_summary

        click.echo(render_summary(summaries))
        for note in result.notes:
            click.echo(f"note: {note}")
        if result.repeats:
            click.echo("\n" + render_repeats(result.repeats))
        click.echo(f"\nresults: {result.root}")


__all__ = ["execute", "run_command"]
