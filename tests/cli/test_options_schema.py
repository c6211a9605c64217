"""`RunOptions` is the schema of `kvbench run`, `kvbench simulate` and the sweep axes: every
field is an option of the commands that take it, with its default, and nothing else is."""

from __future__ import annotations

import dataclasses

import click
import pytest

from kvbench.cli.options import OUTPUT_OPTIONS, command_defaults, help_for, vllm_only_options
from kvbench.cli.run import run_command
from kvbench.cli.simulate import simulate_command
from kvbench.cli.sweep import sweep_command
from kvbench.errors import KvbenchInputError
from kvbench.session.run_options import KINDS, RunOptions, option_fields
from kvbench.sweep.options import canonical_name, catalogue, convert

COMMANDS = {"run": run_command, "simulate": simulate_command}


def options_of(command: click.Command) -> dict[str, click.Option]:
    """The command's options, without vLLM's hidden flags that carry no value into a run
    (ignored or refused: docs/cli.md, vLLM's flags)."""
    return {p.name: p for p in command.params if isinstance(p, click.Option)
            and p.name != "help" and not (p.hidden and not p.expose_value)}


@pytest.mark.parametrize("kind", KINDS)
def test_the_hidden_options_are_vllms_flags_that_give_no_value(kind):
    hidden = [p.opts for p in COMMANDS[kind].params
              if isinstance(p, click.Option) and p.hidden and not p.expose_value]
    assert hidden == [p.opts for p in vllm_only_options(kind)]


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_is_an_option_and_every_option_a_field(kind):
    fields = {name for name, f in option_fields().items() if kind in f.spec.kinds}
    options = options_of(COMMANDS[kind])
    assert set(options) - set(OUTPUT_OPTIONS) == fields
    assert set(OUTPUT_OPTIONS) <= set(options)
    for name in fields:
        info = option_fields()[name]
        assert info.flag in options[name].opts
        assert options[name].help == help_for(info, kind)
    # No option given: the command's values are the schema's defaults for that command.
    params = COMMANDS[kind].make_context(kind, []).params
    given = {k: v for k, v in params.items() if k not in OUTPUT_OPTIONS}
    assert RunOptions.for_kind(kind, **given) == RunOptions.for_kind(kind)
    assert {k: v for k, v in params.items() if k in fields} == {
        k: getattr(RunOptions.for_kind(kind), k) for k in fields}


def test_parsed_command_line_is_a_run_options_instance():
    ctx = run_command.make_context("run", ["--strategy", "paged,fp8", "--block-size", "32",
                                           "--engine", "hf", "--workload-param", "a=1",
                                           "--chunked-prefill", "--json"])
    params = dict(ctx.params)
    assert params.pop("as_json") is True and params.pop("quiet") is False
    options = RunOptions.for_kind("run", **params)
    # every option not given at the command's default (vLLM's), which --help shows
    assert options == dataclasses.replace(
        command_defaults("run"), strategy="paged,fp8", block_size=32, engine_kind="hf",
        workload_params=("a=1",), chunked_prefill=True)


def test_simulate_defaults_differ_where_the_schema_says():
    sim = RunOptions.for_kind("simulate")
    assert (sim.dtype, sim.device, sim.attention_backend, sim.gpu) == (
        "bfloat16", "cpu", "torch", "a100-80gb")
    assert RunOptions.for_kind("run").gpu is None


def test_sweep_takes_every_per_run_option_and_no_session_option():
    per_run = {n for n, f in option_fields().items() if f.spec.per_run}
    assert set(catalogue()) == per_run
    assert {"repeat", "out", "slo"}.isdisjoint(per_run)
    sweep = options_of(sweep_command)
    for name in per_run:
        assert option_fields()[name].flag in sweep[name].opts


def test_sweep_values_take_the_field_types():
    assert canonical_name("--engine") == "engine_kind"
    assert canonical_name("block-size") == "block_size"
    assert convert("block_size", "32") == 32
    assert convert("kv_scale", 2) == 2.0
    assert convert("chunked_prefill", "yes") is True
    assert convert("request_rate", 4) == "4"
    assert convert("kv_memory", None) is None
    with pytest.raises(KvbenchInputError, match="--num-requests: 'many' is not a valid integer"):
        convert("num_requests", "many")
    with pytest.raises(KvbenchInputError, match="--engine: 'vllm' is not one of kvbench, hf"):
        convert("engine_kind", "vllm")
