"""The KV budget: floor(memory x utilization) - weights - activations, as vLLM's
`--gpu-memory-utilization` (default 0.9) leaves it; every engine sizes its arena with
`kv_budget_bytes` unless `--kv-memory` gives the budget itself. Utilizations are exact
fractions (`0.92` is 23/25, not the nearest double), so every byte count is an exact integer.
"""

from __future__ import annotations

import math
from fractions import Fraction

from kvbench.errors import KvbenchInputError
from kvbench.units import format_bytes

DEFAULT_GPU_MEMORY_UTILIZATION = Fraction(9, 10)  # vLLM's default

Utilization = Fraction | float | int | str


def parse_fraction(value: Utilization, what: str = "utilization") -> Fraction:
    """`0.92`, `"0.92"` or `"92%"` -> Fraction(23, 25), exactly; must lie in (0, 1]."""
    if isinstance(value, Fraction):
        result = value
    else:
        text = str(value).strip()  # str(0.92) == "0.92": the decimal the user wrote
        percent = text.endswith("%")
        try:
            result = Fraction(text[:-1].strip() if percent else text)
        except (ValueError, ZeroDivisionError):
            raise KvbenchInputError(
                f"cannot read {what} {value!r}: use a fraction such as 0.9 or a percentage "
                "such as 90%"
            ) from None
        if percent:
            result /= 100
    if not 0 < result <= 1:
        raise KvbenchInputError(f"{what} must be in (0, 1], got {value!r}")
    return result


def gpu_memory_utilization(value: Utilization | None) -> Fraction:
    """`--gpu-memory-utilization` as an exact fraction; None: the default, 0.9."""
    if value is None:
        return DEFAULT_GPU_MEMORY_UTILIZATION
    return parse_fraction(value, "--gpu-memory-utilization")


def kv_budget_bytes(
    memory_bytes: int,
    utilization: Utilization | None,
    weight_bytes: int,
    activation_bytes: int = 0,
    *,
    where: str = "",
    advice: str = "use more memory, a higher --gpu-memory-utilization or a smaller --dtype",
) -> int:
    """floor(memory x utilization) - weights - activations; utilization None: 0.9.

    Raises KvbenchInputError when nothing is left for the KV cache, with the figures, `where`
    (e.g. " on a100-40gb") after the first words and `advice` (the caller's ways out) last.
    """
    util = gpu_memory_utilization(utilization)
    usable = math.floor(memory_bytes * util)
    budget = usable - weight_bytes - activation_bytes
    if budget <= 0:
        taken = f"the weights ({format_bytes(weight_bytes)})"
        if activation_bytes:
            taken += f" and activations (~{format_bytes(activation_bytes)})"
        raise KvbenchInputError(
            f"no memory left for the KV cache{where}: {format_bytes(memory_bytes)} x "
            f"{float(util):g} = {format_bytes(usable)} does not exceed {taken}; {advice}"
        )
    return budget


def check_kv_memory(kv_memory: int, memory_bytes: int, gpu_name: str, num_gpus: int = 1) -> int:
    """`--kv-memory` on `num_gpus` GPUs of `memory_bytes` each: a budget larger than all their
    memory is no budget a run can have, so it is refused."""
    if kv_memory > memory_bytes * num_gpus:
        group = f"{num_gpus} x " if num_gpus > 1 else ""
        raise KvbenchInputError(
            f"--kv-memory {format_bytes(kv_memory)} is more than the memory of {group}"
            f"{gpu_name} ({format_bytes(memory_bytes)}): give at most what the GPU holds"
        )
    return kv_memory
