"""Bounds on a model's sizes, checked before anything is sized or allocated: a shape far
beyond any published model is a typo or a hostile file, refused in one line rather than run
out of memory or time. docs/models.md (Limits) gives the reason for each limit."""

from __future__ import annotations

import math
from typing import Any

from kvbench.errors import KvbenchInputError

# config.json key -> the largest value kvbench accepts (each at least 8x the largest
# published model's; docs/models.md, Limits)
LIMITS = {
    "num_hidden_layers": 1024,
    "hidden_size": 131_072,
    "intermediate_size": 524_288,
    "moe_intermediate_size": 524_288,
    "num_attention_heads": 1024,
    "num_key_value_heads": 1024,
    "head_dim": 4096,
    "vocab_size": 4_194_304,
    "max_position_embeddings": 134_217_728,
    "sliding_window": 134_217_728,
    "num_local_experts": 4096,
    "num_experts": 4096,
    "n_routed_experts": 4096,
    "qk_nope_head_dim": 4096,
    "qk_rope_head_dim": 4096,
    "v_head_dim": 4096,
    "kv_lora_rank": 131_072,
    "q_lora_rank": 131_072,
}

# ModelConfig field -> the config.json key it is read from
FIELD_KEYS = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "moe_intermediate_size": "moe_intermediate_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "vocab_size": "vocab_size",
    "max_position_embeddings": "max_position_embeddings",
    "sliding_window": "sliding_window",
    "num_local_experts": "num_local_experts",
}


def check_limit(key: str, value: int, name: str) -> int:
    """`value` of config.json's `key`, refused when above its limit."""
    limit = LIMITS.get(key)
    if limit is not None and value > limit:
        raise KvbenchInputError(
            f"model {name}: {key} {value:,} is above kvbench's limit of {limit:,} "
            "(docs/models.md, Limits)")
    return value


def derived_head_dim(hidden_size: int, num_heads: int, name: str) -> int:
    """hidden_size / num_heads, refused unless whole (a config without `head_dim`)."""
    if hidden_size % num_heads:
        raise KvbenchInputError(
            f"model {name}: num_attention_heads {num_heads} does not divide hidden_size "
            f"{hidden_size} (give head_dim when heads are not hidden_size / heads wide)")
    return hidden_size // num_heads


def check_model_bounds(model: Any) -> None:
    """A ModelConfig's sizes within LIMITS and its norm epsilon and rope base finite and
    positive (a NaN epsilon would run to the end computing NaN)."""
    for field, key in FIELD_KEYS.items():
        value = getattr(model, field)
        if value is not None:
            check_limit(key, value, model.name)
    for field in ("rms_norm_eps", "rope_theta"):
        value = getattr(model, field)
        if not (math.isfinite(value) and value > 0):
            raise KvbenchInputError(
                f"model {model.name}: {field} must be a finite positive number, got {value!r}")
