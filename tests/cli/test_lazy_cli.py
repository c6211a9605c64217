"""`kvbench --help` loads no heavy library, and the lazily listed commands are the real ones."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from kvbench.cli.app import COMMANDS, cli, load_command

HEAVY = ("torch", "pandas", "numpy", "kvbench.sweep")

PROBE = """
import contextlib, io, json, sys
from kvbench.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "help": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _help(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout)


def test_help_imports_no_torch_pandas_numpy_or_sweep_code():
    result = _help("--help")
    assert result["code"] == 0
    for name in COMMANDS:
        assert f"  {name} " in result["help"]
    loaded = set(result["modules"])
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize("command", ["run", "simulate", "sweep"])
def test_command_help_is_light_too(command):
    result = _help(command, "--help")
    assert result["code"] == 0 and "--strategy" in result["help"]
    assert not set(result["modules"]) & set(HEAVY)


def test_lazy_entries_are_the_commands_with_their_own_summaries():
    for name, (_, summary) in COMMANDS.items():
        command = load_command(name)
        assert command.name == name
        listed = click.Command(name, help=summary)
        for width in (40, 80, 10_000):  # as `kvbench --help` shows it, at any terminal width
            assert listed.get_short_help_str(width) == command.get_short_help_str(width), name
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)


def test_a_corrupt_trace_is_refused_before_torch_loads(tmp_path):
    """`kvbench run` on a trace with a billion-token prompt: one line, exit 2, before the
    model (and torch, seconds of start-up) loads, so the refusal is immediate."""
    trace = tmp_path / "huge-prompt.jsonl"
    trace.write_text('{"prompt_len": 1000000000, "output_len": 5}\n')
    result = _help("run", "--workload", str(trace), "--device", "cpu",
                   "--out", str(tmp_path / "out"))
    assert result["code"] == 2
    assert "torch" not in result["modules"]
    assert not (tmp_path / "out").exists()
