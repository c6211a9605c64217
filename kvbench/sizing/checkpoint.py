"""A checkpoint to size: its shape (`ModelConfig`) and how its weights are stored.

`kvbench.models` reads a config.json's shape and refuses quantized weights (the engine runs
float weights only); sizing needs the shape and the storage, so the `quantization_config` is
read here (`kvbench.sizing.loaded_weights`) and the rest goes to the model reader. Presets of
published quantized checkpoints (gpt-oss ships its experts as MXFP4, DeepSeek-V3 as fp8) are
sized as published.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.presets import PRESETS, get_preset
from kvbench.models.resolve_config import read_config_json
from kvbench.sizing.loaded_weights import (
    WeightQuantization,
    quantization_from_config,
    quantization_from_flag,
)

# Presets whose published checkpoints store weights quantized: their config.json's
# quantization_config.
PUBLISHED_QUANTIZATION = {
    "gpt-oss-20b": {"quant_method": "mxfp4"},
    "gpt-oss-120b": {"quant_method": "mxfp4"},
}
# config.json torch_dtype -> kvbench's name
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class Checkpoint:
    model: ModelConfig
    quantization: WeightQuantization | None
    dtype: str | None  # the checkpoint's torch_dtype (kvbench's name), when it says


def checkpoint_from_config(hf: dict[str, Any], name: str) -> Checkpoint:
    """A config.json's shape and weight storage."""
    if not isinstance(hf, dict):
        raise KvbenchInputError(f"model {name}: config.json is not a JSON object")
    shape = dict(hf)
    quantization_config = shape.pop("quantization_config", None)
    text = shape.get("text_config")
    if isinstance(text, dict) and "quantization_config" in text:
        shape["text_config"] = {k: v for k, v in text.items() if k != "quantization_config"}
        quantization_config = quantization_config or text["quantization_config"]
    if shape.get("model_type") in ("gpt_oss", "deepseek_v2", "deepseek_v3") and (
            quantization_config):
        shape["quantization_config"] = quantization_config  # their readers check it
    model = ModelConfig.from_hf_config(shape, name)
    dtype = hf.get("torch_dtype") or (text or {}).get("torch_dtype")
    return Checkpoint(model, quantization_from_config(quantization_config),
                      TORCH_DTYPES.get(str(dtype)) if dtype else None)


def resolve_checkpoint(model: str, quantization_flag: str | None = None) -> Checkpoint:
    """A preset, or a local folder's config.json; `--quantization fp8` quantizes float
    weights as vLLM does when it loads them."""
    if model in PRESETS:
        config = get_preset(model)
        published = PUBLISHED_QUANTIZATION.get(model) or (
            {"quant_method": config.quantization} if config.quantization else None)
        checkpoint = Checkpoint(config, quantization_from_config(published), None)
    else:
        checkpoint = checkpoint_from_config(read_config_json(model), model)
    flagged = quantization_from_flag(quantization_flag)
    if flagged is not None:
        if checkpoint.quantization is not None:
            raise KvbenchInputError(
                f"--quantization {quantization_flag}: {model} is already quantized "
                f"({checkpoint.quantization.scheme})")
        checkpoint = Checkpoint(checkpoint.model, flagged, checkpoint.dtype)
    return checkpoint
