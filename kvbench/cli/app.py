"""The `kvbench` group and `main`, where every failure becomes one line and an exit code
(`failure`: the contract, one place per kind; docs/cli.md, Exit codes and faults).

Subcommands are imported when invoked or when their own help is shown: `kvbench --help`
loads neither torch nor pandas (it lists the one-line summaries below).
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
import threading
from pathlib import Path

import click

from kvbench.errors import KvbenchInputError, KvbenchRunError, RunInterrupted, os_error_line

# Each command's module and first sentence, shown by `kvbench --help` without importing the
# command (tests/cli/test_lazy_cli.py checks they agree with the commands).
COMMANDS: dict[str, tuple[str, str]] = {
    "calibrate": ("kvbench.cli.calibrate",
                  "Time GEMM and attention kernels on the CUDA GPU and write a --gpu-spec TOML "
                  "file."),
    "compare": ("kvbench.cli.compare",
                "Compare two results folders of `kvbench run` (one strategy's folder or a "
                "comparison folder; strategies are matched by label) and print the differences."),
    "estimate": ("kvbench.cli.estimate",
                 "KV-cache sizing arithmetic, exact and explained: bytes per token, per request "
                 "and in total, the KV budget left next to the weights, and how many requests "
                 "fit per strategy (contiguous reserving the max model length vs paged at the "
                 "mean length)."),
    "export": ("kvbench.cli.export", "Write a run's results in another tool's format."),
    "list": ("kvbench.cli.list",
             "Strategies, batching policies, queue orders, workloads and model presets."),
    "report": ("kvbench.cli.report",
               "Write a self-contained HTML report (opens offline) for RUN_DIR..."),
    "run": ("kvbench.cli.run", "Replay a workload through the engine with one or more strategies."),
    "simulate": ("kvbench.cli.simulate",
                 "Replay a workload with a modelled GPU step time instead of the model (no GPU "
                 "needed)."),
    "sweep": ("kvbench.cli.sweep",
              "Run a grid of `kvbench run` (or, with --simulate, `kvbench simulate`) points."),
}


def load_command(name: str) -> click.Command:
    """The command `name`, importing its module (`<name>_command` in it)."""
    return getattr(importlib.import_module(COMMANDS[name][0]), f"{name}_command")


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            command = load_command(cmd_name)
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(name, (self.commands.get(name) or click.Command(name, help=COMMANDS[name][1]))
                 .get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvbench")
def cli() -> None:
    """kvbench: measure what KV-cache strategies buy on your model, budget and traffic."""


def main(argv: list[str] | None = None) -> int:
    # SIGTERM (`timeout`, a CI cancel, `docker stop`) stops a run as Ctrl-C does: summaries
    # say "interrupted" and the folder stays resumable; only the exit code tells them apart.
    # Installed here, the program's entry, and nowhere in the libraries.
    terminated: list[int] = []

    def on_sigterm(signum: int, _frame: object) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        try:
            result = cli.main(args=argv, prog_name="kvbench", standalone_mode=False)
            sys.stdout.flush()  # a redirected stdout on a full disk fails here, not at exit
            code = result if isinstance(result, int) else 0
        except click.exceptions.Exit as err:
            code = err.exit_code
        except SystemExit as err:  # click's own exit when a pipe's reader left (`| head`)
            code = err.code if isinstance(err.code, int) else 1
        except BaseException as err:  # noqa: BLE001 - `failure` re-raises what is not ours
            message, code = failure(err)
            if message:
                click.echo(f"kvbench: error: {message}", err=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if code == 130 and terminated:
        code = 128 + signal.SIGTERM
    # The console script exits with the code; called from Python, main returns it.
    if sys.argv and Path(sys.argv[0]).name == "kvbench":
        _detach_broken_stdout()
        sys.exit(code)
    return code


def failure(err: BaseException) -> tuple[str | None, int]:
    """The failure contract (docs/cli.md, Exit codes and faults): (the one line to print, the exit code)
    for `err`; anything else (a bug) is raised again, with its traceback. Memory, recursion
    and overflow errors come from sizes or nesting in the input: one line, 2."""
    if isinstance(err, click.exceptions.UsageError):
        return (err.format_message().splitlines() or [str(err)])[0], 2
    if isinstance(err, click.exceptions.ClickException):
        return err.format_message(), err.exit_code
    if isinstance(err, KvbenchInputError):
        return (str(err).splitlines() or [""])[0], 2
    if isinstance(err, RunInterrupted):
        return str(err), 130
    if isinstance(err, KeyboardInterrupt | click.exceptions.Abort):
        return "interrupted", 130
    if isinstance(err, KvbenchRunError):
        return str(err), 1
    if isinstance(err, OSError) and err.errno == errno.EPIPE:
        return None, 1
    if isinstance(err, OSError):
        if err.filename is None and _on_stdout(err):
            err.filename = "standard output"
        return os_error_line(err), 2
    if isinstance(err, MemoryError):
        detail = str(err).splitlines()[0] if str(err) else "MemoryError"
        return f"out of memory: the input asks for more than this machine has ({detail})", 2
    if isinstance(err, RecursionError):
        return "the input is nested too deeply to read (RecursionError)", 2
    if isinstance(err, OverflowError):
        return f"a number in the input is out of range ({err})", 2
    if isinstance(err, UnicodeDecodeError):
        return f"a file given is not UTF-8 text ({err.reason} at byte {err.start})", 2
    raise err


def _on_stdout(err: BaseException) -> bool:
    """Whether `err` came from a write to standard output (`click.echo`'s `file`)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    values = tb.tb_frame.f_locals.values() if tb is not None else ()
    return any(value is sys.stdout for value in values)


def _detach_broken_stdout() -> None:
    # What could not be written would fail again when the interpreter flushes it on exit.
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


__all__ = ["COMMANDS", "LazyGroup", "cli", "failure", "main"]
