"""vLLM's `--mamba-cache-mode`: where a state-space hybrid's prefix cache keeps copies of the
recurrent state (`kvbench.strategies.prefix`, docs/state_models.md).

- `none`: no copy, so no prefix hit (vLLM without prefix caching);
- `align`: at the block-aligned end of each scheduled chunk (vLLM's default with prefix
  caching on: `MambaModelConfig.verify_and_update_config`, vllm/model_executor/models/config.py);
- `all`: at every block boundary, a state page per block (vLLM's first mamba prefix caching;
  vLLM 0.34 keeps `none` and `align` only and ignores the flag, following
  `--enable-prefix-caching`).
"""

from __future__ import annotations

MAMBA_CACHE_MODES = ("none", "align", "all")
WITH_PREFIX_CACHING = "align"  # vLLM's mode where prefix caching is on
WITHOUT_PREFIX_CACHING = "none"
