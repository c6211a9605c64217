"""vLLM's `serve` flags that are not kvbench options of their own: prefix caching (a choice of
strategy in kvbench), the flags accepted and ignored because they change neither memory nor
scheduling, and the flags kvbench refuses because it does not model their knob
(docs/cli.md, vLLM's flags). Names and meanings: vLLM's `vllm/engine/arg_utils.py`
(`EngineArgs`)."""

from __future__ import annotations

from kvbench.errors import KvbenchInputError

# --enable-prefix-caching turns a strategy into its prefix-caching form; --no-... the reverse.
WITH_PREFIX_CACHING = {"paged": "prefix", "hybrid": "hybrid-prefix"}
WITHOUT_PREFIX_CACHING = {cached: plain for plain, cached in WITH_PREFIX_CACHING.items()}

# Flags of the server around the engine: taken (with their value) and ignored, with a warning.
# (flag, whether it takes a value)
IGNORED_FLAGS: tuple[tuple[str, bool], ...] = (
    ("--host", True),
    ("--port", True),
    ("--api-key", True),
    ("--served-model-name", True),
    ("--uvicorn-log-level", True),
    ("--trust-remote-code", False),
    ("--disable-log-stats", False),
    ("--disable-log-requests", False),
    ("--enable-log-requests", False),
)

# vLLM flags whose knob changes memory or scheduling and which kvbench does not model:
# refused in one line rather than taken and ignored (a result would look like the flag's).
UNMODELLED_FLAGS: tuple[str, ...] = (
    "--swap-space",
    "--cpu-offload-gb",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--enable-expert-parallel",
    "--speculative-config",
    "--enable-lora",
    "--calculate-kv-scales",
    "--num-gpu-blocks-override",
    "--max-num-partial-prefills",
    "--long-prefill-token-threshold",
    "--scheduling-policy",
)


def prefix_caching_strategy(strategy: str | None, enable: bool,
                            kv_cache_dtype: str | None) -> tuple[str, str | None]:
    """`(strategy, kv_cache_dtype)` under vLLM's `--enable-prefix-caching` (`enable`) or
    `--no-enable-prefix-caching`: each listed strategy in its form with or without prefix
    caching (`paged` <-> `prefix`, `hybrid` <-> `hybrid-prefix`; `fp8`, which is `paged` with
    an fp8 cache, becomes `prefix` with `--kv-cache-dtype fp8`). `strategy` None is the
    default (`paged`); `kv_cache_dtype` None is not given."""
    flag = "--enable-prefix-caching" if enable else "--no-enable-prefix-caching"
    names = [s.strip() for s in (strategy or "paged").split(",") if s.strip()]
    if names == ["all"]:
        raise KvbenchInputError(
            f"{flag} with --strategy all: 'all' already runs with and without prefix caching; "
            "list the strategies instead")
    if not enable:
        return ",".join(WITHOUT_PREFIX_CACHING.get(n, n) for n in names), kv_cache_dtype
    if "contiguous" in names:
        raise KvbenchInputError(
            f"{flag} with --strategy contiguous: prefix caching shares blocks, and contiguous "
            "has none (use paged, hybrid or fp8)")
    if "fp8" in names:
        if len(names) > 1:
            raise KvbenchInputError(
                f"{flag} with fp8 among other strategies: one --kv-cache-dtype holds for the "
                "list; run --strategy prefix --kv-cache-dtype fp8 on its own")
        if kv_cache_dtype not in (None, "auto", "fp8", "fp8_e4m3"):
            raise KvbenchInputError(
                f"--strategy fp8 keeps an fp8 cache; --kv-cache-dtype {kv_cache_dtype} "
                "contradicts it")
        return "prefix", kv_cache_dtype if kv_cache_dtype not in (None, "auto") else "fp8"
    return ",".join(WITH_PREFIX_CACHING.get(n, n) for n in names), kv_cache_dtype
