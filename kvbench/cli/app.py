"""The `kvbench` group and `main`. Exit codes: 0 ok, 2 bad usage or input, 1 failure while
running, 130 Ctrl-C, 143 SIGTERM (stopped as Ctrl-C stops a run).

Subcommands are imported when invoked or when their own help is shown: `kvbench --help`
loads neither torch nor pandas (it lists the one-line summaries below).
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from pathlib import Path

import click

from kvbench.errors import KvbenchInputError, KvbenchRunError, RunInterrupted


class LazyCommand:
    """A subcommand by where it lives, and its summary for the group's help."""

    def __init__(self, module: str, attr: str, summary: str) -> None:
        self.module, self.attr, self.summary = module, attr, summary

    def load(self) -> click.Command:
        command = getattr(importlib.import_module(self.module), self.attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.module}.{self.attr} is not a click command")
        return command


# Each command's first sentence, shown by `kvbench --help` without importing the command
# (tests/cli/test_lazy_cli.py checks they agree with the commands).
COMMANDS: dict[str, LazyCommand] = {
    "calibrate": LazyCommand(
        "kvbench.cli.calibrate", "calibrate_command",
        "Time GEMM and attention kernels on the CUDA GPU and write a --gpu-spec TOML file."),
    "compare": LazyCommand(
        "kvbench.cli.compare", "compare_command",
        "Compare two results folders of `kvbench run` (one strategy's folder or a comparison "
        "folder; strategies are matched by label) and print the differences."),
    "estimate": LazyCommand(
        "kvbench.cli.estimate", "estimate_command",
        "KV-cache sizing arithmetic, exact and explained: bytes per token, per request and in "
        "total, the KV budget left next to the weights, and how many requests fit per strategy "
        "(contiguous reserving the max model length vs paged at the mean length)."),
    "export": LazyCommand(
        "kvbench.cli.export", "export_command",
        "Write a run's results in another tool's format."),
    "list": LazyCommand(
        "kvbench.cli.list", "list_command",
        "Strategies, batching policies, queue orders, workloads and model presets."),
    "report": LazyCommand(
        "kvbench.cli.report", "report_command",
        "Write a self-contained HTML report (opens offline) for RUN_DIR..."),
    "run": LazyCommand(
        "kvbench.cli.run", "run_command",
        "Replay a workload through the engine with one or more strategies."),
    "simulate": LazyCommand(
        "kvbench.cli.simulate", "simulate_command",
        "Replay a workload with a modelled GPU step time instead of the model (no GPU needed)."),
    "sweep": LazyCommand(
        "kvbench.cli.sweep", "sweep_command",
        "Run a grid of `kvbench run` (or, with --simulate, `kvbench simulate`) points."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def __init__(self, *args, lazy: dict[str, LazyCommand], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.lazy[cmd_name].load()
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in self.commands:
                command = self.commands[name]
                if command.hidden:
                    continue
                text = command.get_short_help_str(limit)
            else:
                summary = self.lazy[name].summary
                text = click.Command(name, help=summary).get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvbench")
def cli() -> None:
    """kvbench: measure what KV-cache strategies buy on your model, budget and traffic."""


def _error(message: str) -> None:
    click.echo(f"kvbench: error: {message}", err=True)


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
        code = _run(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if code == 130 and terminated:
        code = 128 + signal.SIGTERM
    return _exit(code)


def _run(argv: list[str] | None) -> int:
    try:
        result = cli.main(args=argv, prog_name="kvbench", standalone_mode=False)
    except click.exceptions.UsageError as err:
        _error(err.format_message().splitlines()[0] if err.format_message() else str(err))
        return 2
    except KvbenchInputError as err:
        _error(str(err).splitlines()[0])
        return 2
    except RunInterrupted as err:
        _error(str(err))
        return 130
    except (KeyboardInterrupt, click.exceptions.Abort):
        _error("interrupted")
        return 130
    except KvbenchRunError as err:
        _error(str(err))
        return 1
    except click.exceptions.Exit as err:
        return err.exit_code
    except click.exceptions.ClickException as err:
        _error(err.format_message())
        return err.exit_code
    return result if isinstance(result, int) else 0


def _exit(code: int) -> int:
    # The console script exits with the code; called from Python, main returns it.
    if sys.argv and Path(sys.argv[0]).name == "kvbench":
        sys.exit(code)
    return code


__all__ = ["COMMANDS", "LazyGroup", "cli", "main"]
