"""`EngineKind`: what runs a configuration's steps (the model, the simulator, transformers)."""

from __future__ import annotations

from enum import StrEnum

from kvbench.errors import KvbenchInputError


class EngineKind(StrEnum):
    """The values are the spellings of `config.json` and `kvbench_summary.json` (`executor`), and of
    `--engine` for the two that `kvbench run` takes."""

    MODEL = "kvbench"  # kvbench's engine over the real model
    SIMULATED = "simulated"  # `kvbench simulate`: the engine over a GPU's step-time model
    TRANSFORMERS = "hf"  # the baseline: transformers' generate() with its own cache

    @classmethod
    def parse(cls, text: str) -> EngineKind:
        try:
            return cls(text)
        except ValueError:
            raise KvbenchInputError(
                f"unknown engine {text!r} (choose from {', '.join(cls)})"
            ) from None

