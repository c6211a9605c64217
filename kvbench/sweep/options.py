"""The run options a sweep can vary: every per-run field of `RunOptions`.

An option added to `RunOptions` is a sweep axis at once, under the same name (`--block-size`
on the command line, `block-size` or `block_size` in a sweep file, `block_size` in
`config.json`). Workload parameters are axes too, named `workload_param.NAME` (e.g.
`workload_param.prompt_len`). `--kv-offload` takes `0` or `none` among its sizes: a point
without a host tier.
"""

from __future__ import annotations

import math
from typing import Any

import click

from kvbench.errors import KvbenchInputError
from kvbench.session.run_options import KINDS, RunOptions, per_run_fields
from kvbench.session.session import expand_runs
from kvbench.units import parse_rate, parse_size_bytes

WORKLOAD_PARAM = "workload_param."


# Every option a sweep point takes, by python name (`repeat`, `out`, `slo` belong to the
# sweep as a whole: sweep a `seed` axis instead of repeating).
catalogue = per_run_fields


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
        if name in {flag.lstrip("-").replace("-", "_") for flag in info.flags}:
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
    if value is None:
        return "none"
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
    """One option value (from TOML or the command line) in the type of its field."""
    if name.startswith(WORKLOAD_PARAM):
        return value_text(value)
    info = catalogue()[name]
    if name in ("request_rate", "conversation_rate"):  # one spelling per rate: equal ids
        return value_text(parse_rate(value_text(value)))
    if name == "kv_offload" and no_host_tier(value):
        return None
    if info.multiple:
        return workload_param_items(value)
    if info.optional and value is None:
        return None
    kind = info.base_type
    if kind is str:
        text = value_text(value)
        if info.spec.choices is not None and text not in info.spec.choices:
            raise KvbenchInputError(
                f"{info.flag}: {text!r} is not one of {', '.join(info.spec.choices)}"
            )
        return text
    noun = {bool: "boolean (true or false)", int: "integer", float: "number"}[kind]
    # TOML true is not a number of requests, nor 2.5 a whole one
    if (kind is not bool and isinstance(value, bool)) or (
            kind is int and isinstance(value, float) and not value.is_integer()):
        raise KvbenchInputError(f"{info.flag}: {value!r} is not a valid {noun}")
    try:
        return {bool: click.BOOL, int: click.INT, float: click.FLOAT}[kind].convert(
            value, None, None)
    except click.BadParameter:
        raise KvbenchInputError(f"{info.flag}: {value!r} is not a valid {noun}") from None


def no_host_tier(value: Any) -> bool:
    """`--kv-offload` of a sweep point: `0` (in any unit) or `none` is a point without a
    host tier (a run itself refuses 0: vLLM's --kv-offloading-size has no such value)."""
    text = value_text(value).strip().lower()
    if text == "none":
        return True
    try:
        return float(text) == 0
    except ValueError:
        pass
    try:
        return parse_size_bytes(text) == 0
    except (KvbenchInputError, ValueError):
        return False


def check_kind(kind: str, names: list[str]) -> None:
    if kind not in KINDS:
        raise KvbenchInputError(f"unknown sweep kind {kind!r} (choose from run, simulate)")
    options = catalogue()
    for name in names:
        if name.startswith(WORKLOAD_PARAM):
            continue
        info = options[name]
        if kind not in info.spec.kinds:
            other = "simulate" if "simulate" in info.spec.kinds else "run"
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
    """The `RunConfig` that `kvbench run` or `kvbench simulate` builds for one point's option
    `values` (through `expand_runs`: the defaults and checks are the commands' own)."""
    params: dict[str, Any] = {}
    extra_items: list[str] = []
    for name, value in values.items():
        if name.startswith(WORKLOAD_PARAM):
            extra_items.append(f"{display_name(name)}={value_text(value)}")
        else:
            params[name] = convert(name, value)
    params["workload_params"] = tuple(params.get("workload_params") or ()) + tuple(extra_items)
    runs = expand_runs(RunOptions.for_kind(kind, **params))
    if len(runs) != 1:
        raise KvbenchInputError(
            "a sweep point takes one strategy, batching and reserve each; "
            "list several values as a sweep axis instead"
        )
    run = runs[0]
    if slo_ms:
        run.replay.slo_ms = dict(slo_ms)
    return run
