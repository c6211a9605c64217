"""The Llama-architecture decoder, its configuration, presets and weight loading."""

from kvbench.model.config import ModelConfig
from kvbench.model.presets import PRESETS, get_preset

__all__ = ["ModelConfig", "PRESETS", "get_preset"]
