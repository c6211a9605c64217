"""Click options generated from `RunOptions`, the schema of `kvbench run` and `simulate`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from kvbench.session.run_options import OptionField, option_fields

# Options of the command line only: how results are printed, not what is run.
OUTPUT_OPTIONS = ("quiet", "as_json")


def output_options() -> list[click.Option]:
    return [
        click.Option(["--quiet"], is_flag=True,
                     help="no progress or table (warnings still print); print the folder"),
        click.Option(["--json", "as_json"], is_flag=True,
                     help="print kvbench_summary.json to stdout"),
    ]

_TYPES: dict[type, click.ParamType] = {int: click.INT, float: click.FLOAT, str: click.STRING}


def declarations(info: OptionField) -> list[str]:
    """The option's spellings (its flag and vLLM's aliases, each with a --no- form when
    negatable) and its name, which click hands back whichever spelling was used."""
    if info.spec.negatable:
        return [f"{flag}/--no-{flag.removeprefix('--')}" for flag in info.flags] + [info.name]
    return [*info.flags, info.name]


def click_option(info: OptionField, kind: str, *, comma_list: bool = False) -> click.Option:
    """The option of `info` for `kvbench <kind>`; `comma_list`: text that may list values
    (a sweep axis), with no default of its own."""
    spec = info.spec
    kwargs: dict[str, Any] = {"help": spec.help or None, "metavar": spec.metavar}
    if info.is_flag:
        default = info.default_for(kind)  # None: not given (the engine decides)
        kwargs.update(is_flag=True, default=None if default is None else bool(default))
        kwargs["show_default"] = spec.negatable and spec.show_default and not comma_list
    elif info.multiple:
        kwargs.update(multiple=True, type=_TYPES[info.base_type])
    elif comma_list:
        kwargs.update(type=click.STRING, default=None)
    else:
        default = info.default_for(kind)
        param_type = click.Choice(spec.choices) if spec.choices else _TYPES[info.base_type]
        kwargs.update(type=param_type, default=default,
                      show_default=spec.show_default and default is not None)
    if comma_list and len(spec.kinds) == 1:
        kwargs["help"] = (spec.help + " " if spec.help else "") + f"[{spec.kinds[0]} only]"
    return click.Option(declarations(info), **kwargs)


def run_options(kind: str) -> Callable[[click.Command], click.Command]:
    """Decorator for a command (above `@click.command`): every option of `kvbench <kind>`."""

    def decorate(command: click.Command) -> click.Command:
        options = [click_option(info, kind) for info in option_fields().values()
                   if kind in info.spec.kinds]
        command.params[:0] = [*options, *output_options()]
        return command

    return decorate


def split_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Click's parameters -> (the `RunOptions` fields the command line gave, output options).

    An option left at its default is left out, so that `RunOptions.for_kind` can tell it from
    one given (`--defaults vllm` changes only the options not given)."""
    ctx = click.get_current_context()
    given = {k: v for k, v in params.items() if k not in OUTPUT_OPTIONS
             and ctx.get_parameter_source(k) is not ParameterSource.DEFAULT}
    return given, {k: v for k, v in params.items() if k in OUTPUT_OPTIONS}


__all__ = ["OUTPUT_OPTIONS", "click_option", "output_options", "run_options", "split_params"]
