"""The Llama-architecture and Gemma decoders, their configuration, presets and weight loading."""

from kvbench.models.config import ModelConfig
from kvbench.models.presets import PRESETS, get_preset

__all__ = ["ModelConfig", "PRESETS", "get_preset"]
