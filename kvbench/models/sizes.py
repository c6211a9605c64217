"""Sizes of a model's parts: bytes per element and weights (KV per token: `ModelConfig.kv_groups`).

One formula each, shared by `kvbench estimate` and the check that refuses a run before it
allocates (`kvbench.models.memory_check`), so the two never disagree.
"""

from __future__ import annotations

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig

# Bytes per element. fp8 is float8 (e4m3 in kvbench's fp8 strategy); its scales are
# per block or per tensor and are left out of the per-token figure.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
_DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
WEIGHT_DTYPES = ("fp32", "bf16", "fp16")


def canonical_dtype(name: str, allowed: tuple[str, ...] = tuple(DTYPE_BYTES)) -> str:
    """`bfloat16` -> `bf16`; raises KvbenchInputError for anything not in `allowed`."""
    key = str(name).strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in allowed:
        raise KvbenchInputError(f"unknown dtype {name!r} (choose from: {', '.join(allowed)})")
    return key


def weights_dtype(model: ModelConfig, dtype: str = "bf16") -> str:
    """The dtype `model`'s weights are stored in: its checkpoint's fp8 where its config.json
    says so (`ModelConfig.quantization`; the compute dtype stays `dtype`), else `dtype`.

    fp8 checkpoints' block scales (one float32 per 128 x 128 weights, 0.02%) are left out.
    """
    if model.quantization == "fp8":
        return "fp8"
    return canonical_dtype(dtype, WEIGHT_DTYPES)


def weights_bytes(model: ModelConfig, dtype: str = "bf16") -> int:
    """Weights of `model` stored in `dtype` (parameters x bytes per element), or in its
    checkpoint's fp8 (`weights_dtype`)."""
    return model.num_parameters() * DTYPE_BYTES[weights_dtype(model, dtype)]
