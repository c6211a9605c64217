"""Building a `LlamaDecoder`: seeded random ("dummy") weights or a local Hugging Face folder."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.llama import LlamaDecoder, rope_inv_freq
from kvbench.models.presets import PRESETS, get_preset

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise KvbenchInputError(
            f"unknown --dtype {name!r} (choose from float32, bfloat16, float16)"
        ) from None


def resolve_model_config(model: str) -> ModelConfig:
    """A preset's shape, or the `config.json` of a local folder."""
    if model in PRESETS:
        return get_preset(model)
    path = Path(model)
    if not path.exists():
        get_preset(model)  # raises: unknown preset, and says what a folder would need
    if not path.is_dir():
        raise KvbenchInputError(f"model {model!r} is neither a preset nor a folder")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise KvbenchInputError(f"model folder {model} has no config.json")
    try:
        hf = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise KvbenchInputError(f"{config_file}: not valid JSON ({err.msg}, line {err.lineno})") from None
    return ModelConfig.from_hf_config(hf, name=str(path))


def init_dummy_weights(model: LlamaDecoder, seed: int, std: float = 0.02) -> None:
    """Seeded random weights: normal(0, std) matrices, unit norms, zero biases."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                values = torch.empty(param.shape, dtype=torch.float32)
                values.normal_(0.0, std, generator=generator)
                param.copy_(values)


def load_model(
    model: str,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
    init_std: float = 0.02,
) -> tuple[LlamaDecoder, ModelConfig]:
    config = resolve_model_config(model)
    with torch.device("meta"):
        decoder = LlamaDecoder(config)
    decoder = decoder.to_empty(device=device)
    if config.tie_word_embeddings:  # materialising meta tensors unties shared parameters
        decoder.lm_head.weight = decoder.model.embed_tokens.weight
    if model in PRESETS:
        init_dummy_weights(decoder, seed, init_std)
    else:
        _load_safetensors(decoder, Path(model))
    decoder = decoder.to(dtype=dtype)
    decoder.inv_freq = rope_inv_freq(config).to(device)  # keep RoPE frequencies in float32
    decoder.eval()
    return decoder, config


def _load_safetensors(decoder: LlamaDecoder, folder: Path) -> None:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise KvbenchInputError(f"model folder {folder} has no *.safetensors weights")
    expected = dict(decoder.named_parameters())
    loaded: set[str] = set()
    with torch.no_grad():
        for file in files:
            for name, tensor in load_file(str(file)).items():
                if name not in expected:
                    if "rotary_emb" in name:
                        continue
                    raise KvbenchInputError(f"{file.name}: unexpected weight {name}")
                param = expected[name]
                if tuple(tensor.shape) != tuple(param.shape):
                    raise KvbenchInputError(
                        f"{file.name}: {name} has shape {tuple(tensor.shape)}, "
                        f"config.json implies {tuple(param.shape)}"
                    )
                param.copy_(tensor.to(param.dtype))
                loaded.add(name)
    missing = set(expected) - loaded
    if decoder.config.tie_word_embeddings:
        missing.discard("lm_head.weight")
    if missing:
        raise KvbenchInputError(
            f"model folder {folder} lacks weights: {', '.join(sorted(missing)[:3])}"
            + (" ..." if len(missing) > 3 else "")
        )
