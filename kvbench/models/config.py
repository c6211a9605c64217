"""Shape of a Llama-architecture decoder (Llama, Qwen2, Mistral share it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvbench.errors import KvbenchInputError

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_position_embeddings: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise KvbenchInputError(
                f"model {self.name}: num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )

    @property
    def gqa_ratio(self) -> int:
        return self.num_heads // self.num_kv_heads

    def kv_bytes_per_token(self, kv_element_bytes: int) -> int:
        """K and V for one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_element_bytes

    def num_parameters(self) -> int:
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h
        if self.attention_bias:
            attn += q + 2 * kv
        per_layer = attn + 3 * h * i + 2 * h
        embed = v * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + embed + h

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any], name: str) -> ModelConfig:
        """Read a Hugging Face `config.json` of a Llama, Qwen2 or Mistral model."""
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise KvbenchInputError(
                f"model {name}: model_type {model_type!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        try:
            num_heads = int(hf["num_attention_heads"])
            hidden = int(hf["hidden_size"])
            return cls(
                name=name,
                vocab_size=int(hf["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(hf["intermediate_size"]),
                num_layers=int(hf["num_hidden_layers"]),
                num_heads=num_heads,
                num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
                head_dim=int(hf.get("head_dim") or hidden // num_heads),
                max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
                rope_theta=float(
                    hf.get("rope_theta")
                    or (hf.get("rope_parameters") or {}).get("rope_theta")
                    or 10000.0
                ),
                rms_norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
                tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
                attention_bias=bool(hf.get("attention_bias", model_type == "qwen2")),
                rope_scaling=_rope_scaling(hf),
            )
        except KeyError as missing:
            raise KvbenchInputError(f"model {name}: config.json lacks {missing}") from None


def _rope_scaling(hf: dict[str, Any]) -> dict[str, Any] | None:
    scaling = hf.get("rope_scaling") or hf.get("rope_parameters")
    if not scaling:
        return None
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind in (None, "default"):
        return None
    if kind != "llama3":
        raise KvbenchInputError(f"rope scaling {kind!r} is not supported (supported: llama3)")
    return dict(scaling)
