"""`--kv-cache-dtype` names, and the one test of whether a run keeps an fp8 KV cache."""

from __future__ import annotations

# The names of the fp8 (e4m3) KV cache; "auto" is the model's dtype.
FP8_CACHE_DTYPES = ("fp8", "fp8_e4m3")
KV_CACHE_DTYPES = ("auto", *FP8_CACHE_DTYPES)


def is_fp8_cache(kv_cache_dtype: str) -> bool:
    """Whether a `--kv-cache-dtype` name selects the fp8 KV cache."""
    return kv_cache_dtype in FP8_CACHE_DTYPES
