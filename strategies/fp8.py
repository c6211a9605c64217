"""`fp8`: `paged` bookkeeping with an fp8 (e4m3) KV cache, a registered variant of `paged`.

The cache dtype is the executor's business (strategies never see tensors), so the name only
forces `kv_cache_dtype`; the blocks are counted exactly as `paged` counts them.
"""

from __future__ import annotations

from kvbench.core.kv_cache_dtype import FP8_CACHE_DTYPES
from kvbench.strategies.registry import register_variant

register_variant(
    "fp8", "paged with an fp8 (e4m3) KV cache: --kv-cache-dtype fp8", base="paged",
    kv_cache_dtype=FP8_CACHE_DTYPES[0],
)
