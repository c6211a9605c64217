"""`--kv-cache-dtype` names, and whether a name is the fp8 KV cache's (whether a whole
engine configuration keeps one, its strategy's implied options included, is
`kvbench.build.engine_build.keeps_fp8_cache`)."""

from __future__ import annotations

# The names of the fp8 (e4m3) KV cache; "auto" is the model's dtype.
FP8_CACHE_DTYPES = ("fp8", "fp8_e4m3")
KV_CACHE_DTYPES = ("auto", *FP8_CACHE_DTYPES)


def is_fp8_cache(kv_cache_dtype: str) -> bool:
    """Whether a `--kv-cache-dtype` name selects the fp8 KV cache."""
    return kv_cache_dtype in FP8_CACHE_DTYPES
