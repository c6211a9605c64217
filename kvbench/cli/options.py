"""Click options generated from `RunOptions`, the schema of `kvbench run` and `simulate`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from kvbench.models.hub import with_revision
from kvbench.session.run_options import OptionField, RunOptions, option_fields
from kvbench.session.vllm_flags import IGNORED_FLAGS, UNMODELLED_FLAGS, prefix_caching_strategy
from kvbench.sizing.vllm_versions import CURRENT

# Options of the command line only, not RunOptions fields: how results are printed, and
# vLLM's --revision and --enable-prefix-caching, which split_params folds into --model as
# `org/name@revision` (kvbench.models.hub) and into --strategy, and which click keeps out of
# the parameters (ctx.meta holds them).
OUTPUT_OPTIONS = ("quiet", "as_json", "revision", "prefix_caching")
REVISION_OPTION = click.Option(
    ["--revision"], expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__("kvbench.revision", value),
    help="the hub revision of a Hugging Face model id given as --model (branch, tag or commit)")

# vLLM's prefix caching switch, which split_params folds into --strategy
# (kvbench.session.vllm_flags.prefix_caching_strategy).
PREFIX_CACHING_OPTION = click.Option(
    ["--enable-prefix-caching/--no-enable-prefix-caching", "prefix_caching"], default=None,
    expose_value=False, callback=lambda ctx, param, value: ctx.meta.__setitem__(
        "kvbench.prefix_caching", None if ctx.get_parameter_source(param.name or "")
        is ParameterSource.DEFAULT else value),
    help="vLLM's prefix caching: each listed strategy in its prefix-caching form (paged -> "
         "prefix, hybrid -> hybrid-prefix, fp8 -> prefix with an fp8 cache); --no-... the "
         "reverse [default: as --strategy says]")

# vLLM's flags that simulate alone models: under `kvbench run`, one line that says so.
SIMULATE_ONLY_VLLM_FLAGS = ("tensor_parallel_size", "quantization")


def _warn_ignored(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if ctx.get_parameter_source(param.name or "") is not ParameterSource.DEFAULT:
        click.echo(f"kvbench: warning: vLLM's {param.opts[0]} ignored: it changes neither "
                   "memory nor scheduling (docs/cli.md, vLLM's flags)", err=True)


def _refuse(why: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if ctx.get_parameter_source(param.name or "") is not ParameterSource.DEFAULT:
            raise click.UsageError(f"vLLM's {param.opts[0]} {why}", ctx)

    return callback


def vllm_only_options(kind: str) -> list[click.Option]:
    """vLLM's flags that are no kvbench option (docs/cli.md, vLLM's flags), hidden from
    --help: the server's, taken and ignored with a warning; the unmodelled, refused."""
    options = [click.Option([flag], is_flag=not takes_value, expose_value=False, hidden=True,
                            callback=_warn_ignored) for flag, takes_value in IGNORED_FLAGS]
    options += [click.Option([flag], expose_value=False, hidden=True, is_flag=False,
                             flag_value="", callback=_refuse("is not modelled by kvbench "
                                                             "(docs/cli.md, vLLM's flags)"))
                for flag in UNMODELLED_FLAGS]
    if kind == "run":
        options += [click.Option(list(info.flags), expose_value=False, hidden=True,
                                 callback=_refuse("is modelled by kvbench simulate; kvbench "
                                                  "run drives one device as loaded"))
                    for name, info in option_fields().items()
                    if name in SIMULATE_ONLY_VLLM_FLAGS]
    return options


# `kvbench simulate`'s own text where `run`'s would mislead: simulate sizes a modelled GPU
# (vLLM's start-up on --gpu), not this machine's device.
SIMULATE_HELP = {
    "dtype": "weights and activations dtype of the modelled GPU: bfloat16 (= auto), float16, "
             "float32 (costed as TF32)",
    "kv_memory": "the KV budget itself, e.g. 20GiB, instead of the pool vLLM's start-up "
                 "leaves on --gpu [default: that pool]",
    "gpu_memory_utilization": "share of --gpu's memory vLLM may use, from which its start-up "
                              f"leaves the KV budget [default: vLLM's, {CURRENT.default_utilization} "
                              "from 0.21, 0.9 before]",
}


class Count(click.types.IntParamType):
    """An integer of at most 2**63 - 1, refused by click in one line before any work: numpy
    and torch hold no larger one (a closed loop of 10**21 requests overflowed mid-run)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        number = super().convert(value, param, ctx)
        if number >= 1 << 63:
            self.fail(f"{number} is more than 2**63 - 1, the largest count a run holds",
                      param, ctx)
        return number


def help_for(info: OptionField, kind: str) -> str | None:
    """The option's help under `kvbench <kind>`."""
    text = SIMULATE_HELP.get(info.name, info.spec.help) if kind == "simulate" else info.spec.help
    return text or None


def declarations(info: OptionField) -> list[str]:
    """The option's spellings (its flag and vLLM's aliases, each with a --no- form when
    negatable) and its name, which click hands back whichever spelling was used."""
    if info.spec.negatable:
        return [f"{flag}/--no-{flag.removeprefix('--')}" for flag in info.flags] + [info.name]
    return [*info.flags, info.name]


def _type(info: OptionField) -> click.ParamType:
    if info.spec.choices:
        return click.Choice(info.spec.choices)
    if info.base_type is int and info.name != "seed":  # (the seed states its own range)
        return Count()
    return {int: click.INT, float: click.FLOAT, str: click.STRING}[info.base_type]


@functools.cache
def command_defaults(kind: str) -> RunOptions:
    """What `kvbench <kind>` takes for the options not given (vLLM's, unless --defaults
    classic), which --help shows; `split_params` still leaves an option at its default out,
    so that `RunOptions.for_kind` resolves it under the --defaults given."""
    return RunOptions.for_kind(kind)


def click_option(info: OptionField, kind: str, *, comma_list: bool = False) -> click.Option:
    """The option of `info` for `kvbench <kind>`; `comma_list`: text that may list values
    (a sweep axis), with no default of its own."""
    spec = info.spec
    kwargs: dict[str, Any] = {"help": help_for(info, kind), "metavar": spec.metavar}
    if info.is_flag:
        default = getattr(command_defaults(kind), info.name)  # None: the engine decides
        kwargs.update(is_flag=True, default=None if default is None else bool(default))
        kwargs["show_default"] = spec.negatable and spec.show_default and not comma_list
    elif info.multiple:
        kwargs.update(multiple=True, type=_type(info))
    elif comma_list:
        kwargs.update(type=click.STRING, default=None)
        if len(spec.kinds) == 1:
            kwargs["help"] = (spec.help + " " if spec.help else "") + f"[{spec.kinds[0]} only]"
    else:
        default = getattr(command_defaults(kind), info.name)
        kwargs.update(type=_type(info), default=default,
                      show_default=spec.show_default and default is not None)
    return click.Option(declarations(info), **kwargs)


def run_options(kind: str) -> Callable[[click.Command], click.Command]:
    """Decorator for a command (above `@click.command`): every option of `kvbench <kind>`."""

    def decorate(command: click.Command) -> click.Command:
        command.params[:0] = [
            *(click_option(info, kind) for info in option_fields().values()
              if kind in info.spec.kinds),
            REVISION_OPTION,
            PREFIX_CACHING_OPTION,
            *vllm_only_options(kind),
            click.Option(["--quiet"], is_flag=True,
                         help="no progress or table (warnings still print); print the folder"),
            click.Option(["--json", "as_json"], is_flag=True,
                         help="print kvbench_summary.json to stdout"),
        ]
        return command

    return decorate


def split_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Click's parameters -> (the `RunOptions` fields the command line gave, output options).

    An option left at its default is left out, so that `RunOptions.for_kind` can tell it from
    one given (--defaults changes only the options not given)."""
    ctx = click.get_current_context()
    revision = ctx.meta.get("kvbench.revision")
    given = {k: v for k, v in params.items() if k not in OUTPUT_OPTIONS
             and ctx.get_parameter_source(k) is not ParameterSource.DEFAULT}
    if revision is not None:
        given["model"] = with_revision(params.get("model") or "", revision)
    if ctx.meta.get("kvbench.prefix_caching") is not None:
        given["strategy"], kv_cache_dtype = prefix_caching_strategy(
            given.get("strategy"), ctx.meta["kvbench.prefix_caching"],
            given.get("kv_cache_dtype"))
        if kv_cache_dtype is not None:
            given["kv_cache_dtype"] = kv_cache_dtype
    return given, {k: v for k, v in params.items() if k in ("quiet", "as_json")}
