"""`kvbench run`, and what `run` and `simulate` share: options, checks, printing."""

from __future__ import annotations

import errno
import json
import shlex
import sys
from collections.abc import Callable
from typing import Any

import click

from kvbench.cli.options import run_options, split_params
from kvbench.errors import KvbenchInputError, KvbenchRunError
from kvbench.session.run_options import RunOptions

# More repeats than this only make folders (each is made before the first run starts):
# a 95% interval from 1,000 repeats is already 18x narrower than from 3.
MAX_REPEAT = 1000
# Threads past the cores take turns (warned); this many per core is refused: each thread
# reserves its own stack, and a thousand of them exhaust a memory-limited machine.
MAX_THREADS_PER_CORE = 4


def session_command(kind: str, help: str, before: Callable[[], None] = lambda: None):
    """`kvbench <kind>` (run or simulate): its options from the schema, checked, then run;
    `before` runs once the command line is read."""

    @run_options(kind)
    @click.command(name=kind, help=help)
    def command(**params: Any) -> None:
        options, output = split_params(params)
        before()
        check_counts(options)
        execute(RunOptions.for_kind(kind, **options), **output)

    return command


def check_counts(given: dict[str, Any]) -> None:
    """Refuse, before any work, counts from the command line that no run can mean."""
    # CLI: loaded when the command runs, so --help imports no pandas/torch
    from kvbench.session.input_warnings import usable_cores

    repeat = given.get("repeat", 1)
    if repeat > MAX_REPEAT:
        raise KvbenchInputError(f"--repeat {repeat:,} is more than {MAX_REPEAT:,} (each repeat "
                                "is a folder made before the first run)")
    threads, cores = given.get("cpu_threads", 1), usable_cores()
    if threads > MAX_THREADS_PER_CORE * cores:
        raise KvbenchInputError(
            f"--cpu-threads {threads:,} is more than {MAX_THREADS_PER_CORE} per core of the "
            f"{cores} cores this process may use (each thread reserves its own stack)")


run_command = session_command(
    "run", "Replay a workload through the engine with one or more strategies.")


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
    try:
        _print(result, quiet=quiet, as_json=as_json)
    except OSError as err:  # stdout on a full disk: the run is done, its folder whole
        if err.errno == errno.EPIPE:
            raise  # the reader left (`| head`): nothing to say (kvbench.cli.app)
        raise KvbenchRunError(f"standard output: {err.strerror or err}; the results are "
                              f"whole in {result.root}") from None


def _print(result: Any, *, quiet: bool, as_json: bool) -> None:
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
