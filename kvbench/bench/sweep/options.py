"""The run options a sweep can vary: every option of `kvbench run` or `kvbench simulate`.

The catalogue is read from the two click commands themselves, so an option added to either
command is a sweep axis at once, under the same name (`--block-size` on the command line,
`block-size` or `block_size` in a sweep file, `block_size` in `config.json`). Workload
parameters are axes too, named `workload_param.NAME` (e.g. `workload_param.prompt_len`).

`run_config_for(kind, values)` turns one point's option values into the `RunConfig` that
`kvbench run` or `kvbench simulate` would build for the same options (through
`kvbench.cli._expand_runs`, so defaults and checks are the commands' own).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import click

from kvbench.errors import KvbenchInputError

KINDS = ("run", "simulate")
# Options of `run`/`simulate` that belong to the sweep as a whole, not to a point.
# `repeat` is a property of `execute_runs`, not of a run: sweep a `seed` axis instead.
SWEEP_LEVEL = frozenset({"out", "quiet", "as_json", "slo", "repeat"})
WORKLOAD_PARAM = "workload_param."


@dataclass(frozen=True)
class OptionInfo:
    name: str  # python name, as in config.json: request_rate
    flag: str  # --request-rate
    param: click.Option
    kinds: tuple[str, ...]  # the commands that have it

    @property
    def is_flag(self) -> bool:
        return bool(self.param.is_flag)


def _command(kind: str) -> click.Command:
    if kind == "simulate":
        from kvbench.cli.simulate import simulate_command

        return simulate_command
    from kvbench.cli import run

    return run


def catalogue() -> dict[str, OptionInfo]:
    """Every point option of `run` and `simulate`, by python name (run's first)."""
    found: dict[str, OptionInfo] = {}
    for kind in KINDS:
        for param in _command(kind).params:
            if not isinstance(param, click.Option) or param.name in SWEEP_LEVEL:
                continue
            if param.name in found:
                info = found[param.name]
                found[param.name] = OptionInfo(info.name, info.flag, info.param,
                                               (*info.kinds, kind))
            else:
                flag = max(param.opts, key=len)
                found[param.name] = OptionInfo(param.name, flag, param, (kind,))
    return found


def canonical_name(text: str) -> str:
    """`--request-rate`, `request-rate`, `request_rate` -> `request_rate`; `--engine` ->
    `engine_kind`; `workload-param.prompt_len` -> `workload_param.prompt_len`."""
    raw = text.strip()
    for prefix in ("workload_param.", "workload-param.", "workload_params.", "workload-params."):
        if raw.startswith(prefix):
            key = raw[len(prefix):].strip()
            if not key:
                break
            return WORKLOAD_PARAM + key
    name = raw.lstrip("-").replace("-", "_")
    options = catalogue()
    if name in options:
        return name
    for info in options.values():
        if any(o.lstrip("-").replace("-", "_") == name for o in info.param.opts):
            return info.name
    known = ", ".join(sorted(options))
    raise KvbenchInputError(
        f"unknown run option {text!r} (options: {known}; or workload_param.NAME)"
    )


def display_name(name: str) -> str:
    """The name in point ids and table columns: a workload parameter without its prefix."""
    return name[len(WORKLOAD_PARAM):] if name.startswith(WORKLOAD_PARAM) else name


def value_text(value: Any) -> str:
    """A value as the command line would spell it (floats without noise, inf as `inf`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, list | tuple):
        return ",".join(value_text(v) for v in value)
    return str(value)


def convert(name: str, value: Any) -> Any:
    """One option value (from TOML or the command line) in the type its command takes."""
    if name.startswith(WORKLOAD_PARAM):
        return value_text(value)
    info = catalogue()[name]
    param = info.param
    if name == "request_rate":  # one spelling per rate, so ids of equal rates are equal
        from kvbench.units import parse_rate

        return value_text(parse_rate(value_text(value)))
    try:
        if info.is_flag:
            return click.BOOL.convert(value, param, None)
        if param.type is click.STRING or isinstance(param.type, click.types.StringParamType):
            return value_text(value)
        if isinstance(param.type, click.Choice):
            return param.type.convert(value_text(value), param, None)
        return param.type.convert(value, param, None)
    except click.BadParameter as err:
        raise KvbenchInputError(f"{info.flag}: {err.format_message()}") from None


def defaults(kind: str) -> dict[str, Any]:
    """The option values of `kvbench <kind>` when none is given."""
    command = _command(kind)
    ctx = click.Context(command)
    values: dict[str, Any] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in ("out", "quiet", "as_json"):
            default = param.get_default(ctx, call=True)
            if isinstance(default, enum.Enum):  # click's UNSET sentinel (click >= 8.2)
                default = None
            if param.multiple:
                default = tuple(default or ())
            elif param.is_flag:
                default = bool(default)
            values[param.name] = default
    return values


def check_kind(kind: str, names: list[str]) -> None:
    if kind not in KINDS:
        raise KvbenchInputError(f"unknown sweep kind {kind!r} (choose from run, simulate)")
    options = catalogue()
    for name in names:
        if name.startswith(WORKLOAD_PARAM):
            continue
        info = options[name]
        if kind not in info.kinds:
            other = "simulate" if "simulate" in info.kinds else "run"
            raise KvbenchInputError(
                f"{info.flag} is an option of `kvbench {other}`, not of `kvbench {kind}`"
                + (" (add --simulate)" if other == "simulate" else "")
            )


def workload_param_items(value: Any) -> tuple[str, ...]:
    """`workload_params` from a sweep file: a KEY=VALUE list or a table."""
    if value is None:
        return ()
    if isinstance(value, dict):
        return tuple(f"{k}={value_text(v)}" for k, v in value.items())
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def run_config_for(kind: str, values: dict[str, Any], slo_ms: dict[str, float] | None = None):
    """The `RunConfig` of one point: the command's defaults, then `values`."""
    from kvbench.cli import _expand_runs

    params = defaults(kind)
    extra_items: list[str] = []
    for name, value in values.items():
        if name.startswith(WORKLOAD_PARAM):
            extra_items.append(f"{display_name(name)}={value_text(value)}")
        elif name == "workload_params":
            params[name] = workload_param_items(value)
        else:
            params[name] = convert(name, value)
    params["workload_params"] = tuple(params.get("workload_params") or ()) + tuple(extra_items)
    params.update(out="", quiet=True, as_json=False, slo=None)
    if kind == "simulate":
        from kvbench.execution.gpus import GPU_PRESETS

        gpu = params.pop("gpu")
        if gpu not in GPU_PRESETS:
            raise KvbenchInputError(f"unknown --gpu {gpu!r} (presets: {', '.join(GPU_PRESETS)})")
        params.setdefault("device", "cpu")
        params.setdefault("attention_backend", "torch")
        runs = _expand_runs(params, "simulated", gpu)
    else:
        engine_kind = params.pop("engine_kind", "kvbench")
        runs = _expand_runs(params, engine_kind, None)
    if len(runs) != 1:
        raise KvbenchInputError(
            "a sweep point takes one strategy, batching and reserve each; "
            "list several values as a sweep axis instead"
        )
    run = runs[0]
    if slo_ms:
        run.slo_ms = dict(slo_ms)
    return run


__all__ = [
    "KINDS",
    "OptionInfo",
    "WORKLOAD_PARAM",
    "canonical_name",
    "catalogue",
    "check_kind",
    "convert",
    "defaults",
    "display_name",
    "run_config_for",
    "value_text",
]
