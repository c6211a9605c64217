"""`--gpu-spec FILE.toml`: a user's own GPU (and its measured efficiencies) for the simulator.

The keys and an example: docs/simulator.md, "Your own GPU". Without `[host_link]` the GPU's
host link is unknown (None); `[efficiency]` sets any `StepTimeConstants` field, the rest keep
the A100-80GB fit. Unknown keys, wrong types and impossible values raise `KvbenchInputError`
with the file's name. `kvbench calibrate --out FILE.toml` (on a GPU) writes such a file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import fields, replace
from functools import partial
from pathlib import Path
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.simulator.gpus import GPU_PRESETS, INTERCONNECTS, GPUSpec
from kvbench.simulator.host_link import HOST_LINKS, HostLink
from kvbench.simulator.step_time import Interconnect, StepTimeConstants
from kvbench.units import parse_size_bytes

TOP_KEYS = {"name", "description", "memory", "memory_bytes", "bandwidth_gb_s", "peak_tflops",
            "interconnect", "efficiency", "calibrated", "host_link"}
CONSTANT_KEYS = {f.name for f in fields(StepTimeConstants)}


def _number(value: Any, what: str, where: str, zero_ok: bool = False) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
            or (value == 0 and not zero_ok)):
        must = "a number >= 0" if zero_ok else "a positive number"
        raise KvbenchInputError(f"{where}: {what} must be {must}, got {value!r}")
    return float(value)


def _unknown(keys: set[str], allowed: set[str], section: str, where: str) -> None:
    extra = sorted(keys - allowed)
    if extra:
        raise KvbenchInputError(
            f"{where}: unknown key(s) {', '.join(extra)} in {section} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


# Each link table's keys: (the dataclass field, its scale to SI); a latency (`_us`) may be 0.
INTERCONNECT_FIGURES = {"bandwidth_gb_s": ("bandwidth_bytes_s", 1e9),
                        "hop_latency_us": ("hop_latency_s", 1e-6),
                        "call_latency_us": ("call_latency_s", 1e-6)}
HOST_LINK_FIGURES = {"load_gb_s": ("load_bytes_s", 1e9), "store_gb_s": ("store_bytes_s", 1e9),
                     "latency_us": ("latency_s", 1e-6),
                     "fragment_overhead_us": ("fragment_overhead_s", 1e-6)}


def _link(spec: Any, section: str, presets: dict[str, Any], figures: dict[str, tuple[str, float]],
          custom: Callable[..., Any], required: tuple[str, ...], where: str) -> Any:
    """`[section]`: a preset of `presets` with any of its `figures` replaced (then named
    "custom"), or without a preset `custom(**figures)`, which needs the `required` keys."""
    if not isinstance(spec, dict):
        raise KvbenchInputError(f"{where}: [{section}] must be a table")
    _unknown(set(spec), {"preset", *figures}, f"[{section}]", where)
    base = None
    if "preset" in spec:
        if spec["preset"] not in presets:
            raise KvbenchInputError(f"{where}: unknown {section} preset {spec['preset']!r} "
                                    f"(choose from {', '.join(presets)})")
        base = presets[spec["preset"]]
        if set(spec) == {"preset"}:
            return base
    elif not set(required) <= set(spec):
        raise KvbenchInputError(f"{where}: [{section}] needs a preset or "
                                f"{' and '.join(required)}")
    changes = {}
    for key, value in spec.items():
        if key == "preset":
            continue
        name, scale = figures[key]
        changes[name] = _number(value, f"{section}.{key}", where, key.endswith("_us")) * scale
    return replace(base, name="custom", **changes) if base else custom(**changes)


def gpu_spec_from_dict(data: dict[str, Any], where: str, default_name: str = "custom") -> GPUSpec:
    _unknown(set(data), TOP_KEYS, "the file", where)
    if "memory_bytes" in data:
        memory = int(_number(data["memory_bytes"], "memory_bytes", where))
    elif "memory" in data:
        try:
            memory = parse_size_bytes(str(data["memory"]))
        except (KvbenchInputError, ValueError):
            raise KvbenchInputError(f"{where}: cannot read memory {data['memory']!r}") from None
    else:
        raise KvbenchInputError(f"{where}: give memory (e.g. \"80GiB\") or memory_bytes")
    if "bandwidth_gb_s" not in data:
        raise KvbenchInputError(f"{where}: give bandwidth_gb_s (HBM bandwidth, GB/s)")
    bandwidth = _number(data["bandwidth_gb_s"], "bandwidth_gb_s", where) * 1e9
    peaks = data.get("peak_tflops")
    if not isinstance(peaks, dict) or "bf16" not in peaks:
        raise KvbenchInputError(f"{where}: give [peak_tflops] with bf16 = <dense TFLOP/s>")
    _unknown(set(peaks), {"bf16", "fp16", "fp8"}, "[peak_tflops]", where)
    bf16 = _number(peaks["bf16"], "peak_tflops.bf16", where) * 1e12
    fp8 = _number(peaks["fp8"], "peak_tflops.fp8", where) * 1e12 if "fp8" in peaks else None
    link = (_link(data["interconnect"], "interconnect", INTERCONNECTS, INTERCONNECT_FIGURES,
                  partial(Interconnect, "custom", hop_latency_s=0.0), ("bandwidth_gb_s",), where)
            if "interconnect" in data else None)
    host_link = (_link(data["host_link"], "host_link", HOST_LINKS, HOST_LINK_FIGURES,
                       partial(HostLink, "custom", "user host link"),
                       ("load_gb_s", "store_gb_s"), where)
                 if "host_link" in data else None)
    eff = data.get("efficiency", {})
    if not isinstance(eff, dict):
        raise KvbenchInputError(f"{where}: [efficiency] must be a table")
    _unknown(set(eff), CONSTANT_KEYS, "[efficiency]", where)
    base_constants = GPU_PRESETS["a100-80gb"].constants.to_dict()
    for key, value in eff.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KvbenchInputError(f"{where}: efficiency.{key} must be a number, got {value!r}")
        base_constants[key] = float(value)
    try:
        constants = StepTimeConstants(**base_constants)
        return GPUSpec(
            str(data.get("name", default_name)),
            str(data.get("description", f"user GPU from {where}")),
            memory,
            bf16,
            bandwidth,
            constants,
            link,
            fp8,
            bool(data.get("calibrated", bool(eff))),
            host_link=host_link,
        )
    except KvbenchInputError as err:
        raise KvbenchInputError(f"{where}: {err}") from None


def load_gpu_spec(path: str | Path) -> GPUSpec:
    """Read a GPU TOML file; every problem is one `KvbenchInputError` line naming the file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KvbenchInputError(f"--gpu-spec {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise KvbenchInputError(f"--gpu-spec {path}: cannot read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise KvbenchInputError(f"--gpu-spec {path}: not valid TOML: {err}") from None
    return gpu_spec_from_dict(data, f"--gpu-spec {path}", default_name=path.stem)
