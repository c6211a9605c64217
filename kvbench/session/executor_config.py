"""`ExecutorConfig`: what runs the engine's steps (`EngineKind`) and, simulated, on which GPU."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvbench.core.engine_kind import EngineKind


@dataclass
class ExecutorConfig:
    # `config.json` keeps the flat names of the options (metadata "json").
    kind: EngineKind = field(default=EngineKind.MODEL, metadata={"json": "engine_kind"})
    gpu: str | None = None  # the simulated GPU's preset
    gpu_spec: str | None = None  # a GPU described in a TOML file: replaces `gpu`
    # Whose defaults the options the user did not give took: vLLM v1's (the commands') or
    # kvbench's classic ones, which the sections state (`kvbench.session.vllm_defaults`); the
    # values they took are in their own sections. A configuration built in Python, or read
    # from a config.json written before the option, took the sections' own: classic.
    defaults: str = "classic"

    def __post_init__(self) -> None:
        self.kind = EngineKind.parse(self.kind)
        if self.defaults == "kvbench":  # the former name of classic (session.vllm_defaults)
            self.defaults = "classic"

    @property
    def simulated_gpu(self) -> str | None:
        """The preset name or TOML file of the GPU a simulated run models."""
        return self.gpu_spec or self.gpu
