"""transformers' `layer_types`: which layers attend through the sliding window, read from a
`config.json` (every family that has the key checks it here, with the same messages)."""

from __future__ import annotations

from typing import Any

from kvbench.errors import KvbenchInputError

LAYER_TYPES = ("full_attention", "sliding_attention")


def checked_layer_types(layer_types: Any, name: str, num_layers: Any,
                        allowed: tuple[str, ...] = LAYER_TYPES,
                        key: str = "layer_types") -> tuple[str, ...]:
    """`config.json`'s `layer_types` (or `key`), refused unless a list of one of `allowed`
    per layer."""
    if not isinstance(layer_types, list) or len(layer_types) != num_layers:
        raise KvbenchInputError(
            f"model {name}: config.json {key} must list one type per layer "
            f"(num_hidden_layers {num_layers}), got {layer_types!r:.80}")
    unknown = sorted({str(t) for t in layer_types if t not in allowed})
    if unknown:
        raise KvbenchInputError(
            f"model {name}: config.json {key} {', '.join(unknown)} is not implemented "
            f"(supported: {', '.join(allowed)})")
    return tuple(layer_types)


def periodic_layer_types(num_layers: int, full_every: int) -> tuple[str, ...]:
    """Every `full_every`-th layer full attention, the others sliding (the first sliding):
    gpt-oss's and Gemma 2's alternation (2), Gemma 3's `sliding_window_pattern`."""
    return tuple("sliding_attention" if (i + 1) % full_every else "full_attention"
                 for i in range(num_layers))
