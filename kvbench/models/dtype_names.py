"""dtypes by the name torch gives them, and their bytes per element, without importing torch
(`kvbench simulate` never loads it); the engine's torch dtypes print as the same names."""

from __future__ import annotations

from kvbench.config import EngineConfig
from kvbench.core.kv_cache_dtype import is_fp8_cache
from kvbench.errors import KvbenchInputError
from kvbench.models.sizes import DTYPE_BYTES

FP8_NAME = "float8_e4m3fn"  # the fp8 KV cache's format (e4m3, finite: no infinities)

# Every `--dtype` spelling the model loader accepts -> torch's name for it.
MODEL_DTYPE_NAMES: dict[str, str] = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",  # vLLM's --dtype float
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}

# torch's name -> bytes per element (kvbench.models.sizes.DTYPE_BYTES, the estimate's table).
ELEMENT_BYTES: dict[str, int] = {
    "float32": DTYPE_BYTES["fp32"],
    "bfloat16": DTYPE_BYTES["bf16"],
    "float16": DTYPE_BYTES["fp16"],
    FP8_NAME: DTYPE_BYTES["fp8"],
}


def model_dtype_name(name: str) -> str:
    """torch's name for a `--dtype` spelling (`bf16` -> `bfloat16`)."""
    try:
        return MODEL_DTYPE_NAMES[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown --dtype {name!r} (choose from auto, float32 (float), bfloat16, float16 "
            "(half))"
        ) from None


def kv_cache_dtype_name(config: EngineConfig) -> str:
    """torch's name for the KV cache's dtype: fp8 when asked for, else the model's."""
    return FP8_NAME if is_fp8_cache(config.kv_cache_dtype) else model_dtype_name(config.dtype)


def element_bytes(dtype: object) -> int:
    """Bytes per element of a dtype given by torch's name or as a torch dtype."""
    return ELEMENT_BYTES[str(dtype).removeprefix("torch.")]
