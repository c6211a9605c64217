"""Values read from a `config.json`, refused with one line naming the key where kvbench cannot
compute with them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.models.bounds import check_limit


def positive_int(hf: dict[str, Any], key: str, name: str, default: int | None = None, *,
                 minimum: int = 1, nullable: bool = False) -> Any:
    """`hf[key]`, an integer >= `minimum` within bounds.LIMITS; `default` when the key is
    absent or null (None for a null where `nullable`); refused as lacking without a default."""
    value = hf.get(key)
    if value is None:
        if nullable and key in hf:
            return None
        if default is None:
            raise KvbenchInputError(f"model {name}: config.json lacks '{key}'")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive" if minimum else "a non-negative"
        raise KvbenchInputError(
            f"model {name}: config.json {key} must be {kind} integer"
            f"{' or null' if nullable else ''}, got {value!r}")
    return check_limit(key, value, name)


def dense_layers(hf: dict[str, Any], name: str, num_layers: int) -> tuple[int, ...]:
    """The layers of a Qwen mixture that run a dense MLP: those `mlp_only_layers` names
    (refused unless a list of layer indices below `num_layers`) and those
    `decoder_sparse_step` skips ((i + 1) % step != 0)."""
    step = positive_int(hf, "decoder_sparse_step", name, default=1)
    mlp_only = hf.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers
            for i in mlp_only):
        raise KvbenchInputError(
            f"model {name}: config.json mlp_only_layers must list layer indices below "
            f"num_hidden_layers {num_layers}, got {mlp_only!r:.80}")
    return tuple(i for i in range(num_layers) if i in mlp_only or (i + 1) % step)


def expert_counts(hf: dict[str, Any], name: str, experts_key: str, default_experts: int,
                  default_top_k: int | None, minimum: int = 1) -> tuple[int, int]:
    """The expert count (under `experts_key`, at least `minimum`) and the experts a token
    (num_experts_per_tok), refused when a token would choose more experts than there are."""
    experts = positive_int(hf, experts_key, name, default=default_experts, minimum=minimum)
    top_k = positive_int(hf, "num_experts_per_tok", name, default=default_top_k)
    if experts and top_k > experts:
        raise KvbenchInputError(
            f"model {name}: config.json num_experts_per_tok {top_k} exceeds {experts_key} "
            f"{experts}")
    return experts, top_k


def positive_number(hf: dict[str, Any], key: str, name: str, default: float, *,
                    where: str = "") -> float:
    """`hf[key]` (`default` when absent), a finite positive int or float, as a float; `where`
    names the dict it sits in for the message (`rope_scaling `)."""
    value = hf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 < value < math.inf):
        raise KvbenchInputError(
            f"model {name}: config.json {where}{key} must be a positive number, got {value!r}")
    return float(value)


def true_or_false(fields: dict[str, Any], key: str, name: str, default: bool, *,
                  where: str = "") -> bool:
    """`fields[key]` (`default` when absent), refused unless a JSON true or false; `where`
    names the dict it sits in for the message (`rope_scaling `)."""
    value = fields.get(key, default)
    if not isinstance(value, bool):
        raise KvbenchInputError(
            f"model {name}: config.json {where}{key} must be true or false, got {value!r}")
    return value


def checked_window(window: Any, name: str) -> int:
    """A `sliding_window`: a positive integer."""
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise KvbenchInputError(
            f"model {name}: config.json sliding_window must be a positive integer, "
            f"got {window!r}")
    return window


def refuse_unimplemented(hf: dict[str, Any], name: str, key: str, supported: tuple, why: str,
                         default: Any = None) -> None:
    """Refuses `hf[key]` (`default` when absent) unless one of `supported`; `why` says what
    kvbench computes instead."""
    value = hf.get(key, default)
    if value not in supported:
        raise KvbenchInputError(
            f"model {name}: config.json {key} {value!r} is not implemented ({why})")


def quantization(hf: dict[str, Any], name: str, accepted: str | None = None) -> str | None:
    """The checkpoint's quantization method (its `quantization_config`), None for float
    weights; refused unless `accepted` (a method kvbench sizes from the shape)."""
    config = hf.get("quantization_config")
    if not config:
        return None
    method = config.get("quant_method") if isinstance(config, dict) else None
    if method != accepted or accepted is None:
        sized = f"sizes {accepted} checkpoints and " if accepted else ""
        raise KvbenchInputError(
            f"model {name}: config.json has quantization_config ({method or '?'}); kvbench "
            f"{sized}loads float32/bfloat16/float16 weights only")
    return method


def read_rope_theta(hf: dict[str, Any], default: float) -> float:
    """The rope base: `rope_theta`, or transformers 5's `rope_parameters.rope_theta`."""
    return float(hf.get("rope_theta") or (hf.get("rope_parameters") or {}).get("rope_theta")
                 or default)


def refuse_partial_rotary(fields: dict[str, Any], name: str) -> None:
    """Refuses a `partial_rotary_factor` other than 1 in `fields` (config.json or its rope
    dict): kvbench's rope rotates every dimension of a head."""
    partial = fields.get("partial_rotary_factor", 1.0)
    if partial != 1.0:
        raise KvbenchInputError(
            f"model {name}: config.json partial_rotary_factor {partial} is not implemented "
            "(kvbench rotates every dimension)")


def rope_scaling_dict(hf: dict[str, Any], name: str) -> dict[str, Any] | None:
    """config.json's rope dict (`rope_scaling`, or transformers 5's `rope_parameters`), None
    without one; refused unless a JSON object, or when the rope is partial."""
    refuse_partial_rotary(hf, name)
    scaling = hf.get("rope_scaling") or hf.get("rope_parameters")
    if not scaling:
        return None
    if not isinstance(scaling, dict):
        raise KvbenchInputError(f"model {name}: config.json rope_scaling is not a JSON object")
    refuse_partial_rotary(scaling, name)
    return scaling


@contextmanager
def bad_values_refused(name: str) -> Iterator[None]:
    """Within it, a value of the wrong type or form in `config.json` is refused in one line."""
    try:
        yield
    except KvbenchInputError:
        raise
    except (TypeError, ValueError) as err:
        raise KvbenchInputError(f"model {name}: config.json has a bad value ({err})") from None


# transformers' `layer_types`: which layers attend through the sliding window
LAYER_TYPES = ("full_attention", "sliding_attention")


def checked_layer_types(layer_types: Any, name: str, num_layers: Any,
                        allowed: tuple[str, ...] = LAYER_TYPES) -> tuple[str, ...]:
    """`config.json`'s `layer_types`, refused unless a list of one of `allowed` per layer."""
    if not isinstance(layer_types, list) or len(layer_types) != num_layers:
        raise KvbenchInputError(
            f"model {name}: config.json layer_types must list one type per layer "
            f"(num_hidden_layers {num_layers}), got {layer_types!r:.80}")
    unknown = sorted({str(t) for t in layer_types if t not in allowed})
    if unknown:
        raise KvbenchInputError(
            f"model {name}: config.json layer_types {', '.join(unknown)} is not implemented "
            f"(supported: {', '.join(allowed)})")
    return tuple(layer_types)


def periodic_layer_types(num_layers: int, full_every: int) -> tuple[str, ...]:
    """Every `full_every`-th layer full attention, the others sliding (the first sliding):
    gpt-oss's and Gemma 2's alternation (2), Gemma 3's `sliding_window_pattern`."""
    return tuple("sliding_attention" if (i + 1) % full_every else "full_attention"
                 for i in range(num_layers))
