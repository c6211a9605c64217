"""Nemotron-H, as transformers' NemotronHForCausalLM computes it (docs/models.md, State-space
hybrids): every layer an RMSNorm then one mixer, by its character of
`hybrid_override_pattern`: Mamba-2 (mamba2.py), attention without rope (llama.py's), or a
relu^2 MLP (`down_proj(relu(up_proj(x))^2)`).

Module names are transformers 5's (`model.embeddings`, `model.layers.N.mixer`,
`model.norm_f`); its checkpoints say `backbone.` for `model.` (`CHECKPOINT_PREFIXES`, which the
loader maps).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kvbench.models.config import ModelConfig
from kvbench.models.direct_call import DirectCall, Embedding, Linear
from kvbench.models.gemma import GemmaRMSNorm
from kvbench.models.llama import Attention, AttentionFn, FlatBatchDecoder
from kvbench.models.mamba2 import Mamba2Mixer
from kvbench.models.recurrent_states import RecurrentStates


def nemotron_norm(size: int, eps: float) -> GemmaRMSNorm:
    """transformers' `NemotronHRMSNorm`: (w * x / rms(x)) in float32, cast to x's dtype."""
    return GemmaRMSNorm(size, eps, offset=0.0)


class ReluSquaredMLP(DirectCall):
    """transformers' `NemotronHMLP` with `mlp_hidden_act` "relu2"."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.up_proj = Linear(hidden, intermediate, bias=False)
        self.down_proj = Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.relu(self.up_proj(x)).square())


class NemotronHBlock(DirectCall):
    """norm, then the layer's mixer, residual."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.kind = config.hybrid.mixers[layer_index]
        self.norm = nemotron_norm(h, eps)
        if self.kind == "recurrent":
            self.mixer = Mamba2Mixer(config.hybrid.recurrent, h, eps, layer_index)
        elif self.kind == "attention":
            self.mixer = Attention(config, layer_index)
        else:
            self.mixer = ReluSquaredMLP(h, config.intermediate_size)

    def forward(self, x: torch.Tensor, cos: None, sin: None, attention: AttentionFn,
                states: RecurrentStates) -> torch.Tensor:
        normed = self.norm(x)
        if self.kind == "recurrent":
            return x + self.mixer(normed, states)
        if self.kind == "attention":
            return x + self.mixer(normed, cos, sin, attention)
        return x + self.mixer(normed)


class NemotronHBackbone(DirectCall):
    """transformers' NemotronHModel: `embeddings`, `layers`, `norm_f` (`embed_tokens` and
    `norm` name them as every kvbench backbone does)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(NemotronHBlock(config, i) for i in range(config.num_layers))
        self.norm_f = nemotron_norm(config.hidden_size, config.rms_norm_eps)

    @property
    def embed_tokens(self) -> Embedding:
        return self.embeddings

    @property
    def norm(self) -> GemmaRMSNorm:
        return self.norm_f


class NemotronHDecoder(FlatBatchDecoder):
    """Nemotron-H's flat-batch decoder: `forward` also takes the recurrent layers' states."""

    # checkpoint prefix -> module prefix (the loader renames before matching)
    CHECKPOINT_PREFIXES = {"backbone.": "model."}
    # multi-token-prediction layers, which next-token decoding does not run
    IGNORED_WEIGHTS = ("mtp.",)

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, NemotronHBackbone(config))

    def config_buffers(self) -> dict[str, torch.Tensor]:
        return {}  # no rope

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[None, None]:
        return None, None
