"""A model's shape: a preset's, or the `config.json` of a local Hugging Face folder or hub id.

Torch-free, so `kvbench simulate` and `kvbench estimate` resolve a model without loading torch.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.hub import hub_folder, is_hub_id
from kvbench.models.presets import PRESETS, get_preset


def resolve_model_config(model: str) -> ModelConfig:
    """A preset's shape, or the `config.json` of a local folder or Hugging Face model id."""
    if model in PRESETS:
        return get_preset(model)
    return ModelConfig.from_hf_config(read_config_json(model), name=str(Path(model)))


def model_folder(model: str, weights: bool = False) -> Path:
    """The folder of `model`: a local path, or a Hugging Face model id's snapshot in the hub
    cache (fetched, with `weights` its weights too, unless there already)."""
    return hub_folder(model, weights) if is_hub_id(model) else Path(model)


def read_config_json(model: str) -> dict:
    """The `config.json` of the local folder or hub id `model` (a name that is neither is
    refused as an unknown preset, with what a folder would need)."""
    path = model_folder(model)
    if not path.exists():
        get_preset(model)  # raises: unknown preset, and says what a folder would need
    if not path.is_dir():
        raise KvbenchInputError(f"model {model!r} is neither a preset nor a folder")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise KvbenchInputError(f"model folder {model} has no config.json")
    try:
        return json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise KvbenchInputError(f"{config_file}: not valid JSON ({err.msg}, line {err.lineno})") from None
    except RecursionError:
        raise KvbenchInputError(f"{config_file}: nested too deeply to be a model config") from None
    except (OSError, UnicodeDecodeError) as err:
        raise KvbenchInputError(f"{config_file}: cannot read it ({first_line(err)})") from None


def first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
