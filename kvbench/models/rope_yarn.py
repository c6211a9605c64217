"""YaRN rope scaling (rope_type "yarn"), as transformers' `_compute_yarn_parameters` computes it:
low rotary frequencies divided by `factor`, high ones kept, a linear ramp between the
dimensions `beta_fast` and `beta_slow` bound (floored and ceiled unless `truncate` is false, as
gpt-oss sets it); cos and sin times an attention factor. `yarn_scaling` checks a config's dict
without torch (sizing reads configs torch-free)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kvbench.errors import KvbenchInputError
from kvbench.models.config_values import positive_number, rope_scaling_dict, true_or_false

if TYPE_CHECKING:  # torch only where frequencies are computed: sizing checks configs without it
    import torch

YARN_FIELDS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
               "truncate", "attention_factor", "mscale", "mscale_all_dim")
# Keys a rope dict carries beside the scaling's own: its kind, and the base (rope_parameters
# holds rope_theta in transformers 5).
_ROPE_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")


def yarn_scaling(scaling: dict[str, Any], name: str) -> dict[str, Any]:
    """The YaRN fields of `scaling`, checked; refuses a key YaRN does not read, naming it."""
    unknown = sorted(set(scaling) - set(YARN_FIELDS) - set(_ROPE_KEYS))
    if unknown:
        raise KvbenchInputError(
            f"model {name}: config.json rope_scaling (yarn) key {unknown[0]!r} is not "
            f"implemented (kvbench's YaRN reads {', '.join(YARN_FIELDS)})"
        )
    if "original_max_position_embeddings" not in scaling:
        raise KvbenchInputError(
            f"model {name}: config.json rope_scaling (yarn) lacks original_max_position_embeddings")
    for key in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                "attention_factor", "mscale", "mscale_all_dim"):
        if scaling.get(key) is not None:
            positive_number(scaling, key, name, 0, where="rope_scaling ")
    if scaling.get("factor") is None:
        raise KvbenchInputError(f"model {name}: config.json rope_scaling (yarn) lacks factor")
    true_or_false(scaling, "truncate", name, True, where="rope_scaling ")
    return {key: scaling[key] for key in YARN_FIELDS if key in scaling} | {"rope_type": "yarn"}


def read_rope_scaling(hf: dict[str, Any], name: str,
                      supported: tuple[str, ...] = ("default", "llama3", "yarn"),
                      ) -> dict[str, Any] | None:
    """config.json's rope scaling, checked: None (plain rope), YaRN's fields or Llama 3's;
    any kind not in `supported` refused naming it."""
    scaling = rope_scaling_dict(hf, name)
    kind = scaling and (scaling.get("rope_type") or scaling.get("type")) or "default"
    if kind not in supported:
        raise KvbenchInputError(
            f"model {name}: config.json rope_scaling type {kind!r} is not implemented "
            f"(supported: {', '.join(supported)})")
    if kind == "default":
        return None
    if kind == "yarn":
        # As transformers standardises the dict: a top-level original_max_position_embeddings
        # wins, and without one the pretraining length is max_position_embeddings.
        original = hf.get("original_max_position_embeddings") or scaling.get(
            "original_max_position_embeddings", hf.get("max_position_embeddings"))
        if original is not None:
            scaling = {**scaling, "original_max_position_embeddings": original}
        return yarn_scaling(scaling, name)
    needed = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    lacking = [key for key in needed if key not in scaling]
    if lacking:
        raise KvbenchInputError(
            f"model {name}: config.json rope_scaling (llama3) lacks {', '.join(lacking)}")
    return dict(scaling)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's 0.1 mscale ln(scale) + 1 (1 when the context is not stretched)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(scaling: dict[str, Any]) -> float:
    """The factor YaRN multiplies cos and sin by."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = scaling["factor"]
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return float(yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim))
    return yarn_mscale(factor)


def yarn_inv_freq(head_dim: int, rope_theta: float, scaling: dict[str, Any]) -> torch.Tensor:
    """The `[head_dim / 2]` float32 inverse frequencies of YaRN."""
    # torch: only when a model is built
    import torch

    factor = scaling["factor"]
    original = scaling["original_max_position_embeddings"]
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (head_dim * math.log(original / (rotations * 2 * math.pi))) / (
            2 * math.log(rope_theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # a ramp of one point would divide by zero
    ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low),
                       0, 1)
    pos_freqs = rope_theta ** (torch.arange(0, head_dim, 2).to(dtype=torch.float) / head_dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)
    kept = 1 - ramp  # the share of each dimension's frequency left unscaled
    return interpolation * (1 - kept) + extrapolation * kept
