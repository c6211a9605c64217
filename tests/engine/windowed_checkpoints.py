"""The 5:1 sliding-window checkpoint the engine's window tests share (Gemma's layer pattern on
a tiny Qwen2, saved by transformers)."""

from __future__ import annotations

WINDOW = 16
LAYER_TYPES = ["sliding_attention"] * 5 + ["full_attention"]


def write_five_to_one_checkpoint(folder):
    """Saves a 6-layer Qwen2 with five `WINDOW`-token window layers and one full one."""
    from tests.models.test_config_fields import make_checkpoint

    make_checkpoint(folder, "Qwen2Config", num_hidden_layers=6, use_sliding_window=True,
                    sliding_window=WINDOW, max_window_layers=0, layer_types=LAYER_TYPES,
                    max_position_embeddings=512)
    return folder
