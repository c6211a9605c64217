"""Building a decoder (`LlamaDecoder`, its gpt-oss subclass, `DeepseekDecoder` for latent
attention, `GemmaDecoder` for Gemma's architecture, or the state-space hybrids'
`GraniteHybridDecoder`, `Qwen3NextDecoder` and `NemotronHDecoder`): seeded random ("dummy")
weights or a local Hugging Face folder."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.deepseek import DeepseekDecoder
from kvbench.models.dtype_names import model_dtype_name
from kvbench.models.gemma import GemmaDecoder
from kvbench.models.gpt_oss import GptOssDecoder
from kvbench.models.granite_hybrid import GraniteHybridDecoder
from kvbench.models.llama import LlamaDecoder
from kvbench.models.memory_check import AvailableFn, MemoryNeed, check_memory, memory_need
from kvbench.models.nemotron_h import NemotronHDecoder
from kvbench.models.presets import PRESETS
from kvbench.models.qwen3_next import Qwen3NextDecoder
from kvbench.models.resolve_config import first_line, model_folder, resolve_model_config


def parse_dtype(name: str) -> torch.dtype:
    return getattr(torch, model_dtype_name(name))


# Elements drawn per call on an accelerator: bounds the float32 staging buffer (256 MiB).
DUMMY_CHUNK_ELEMENTS = 1 << 26


def init_dummy_weights(model: LlamaDecoder, seed: int, std: float = 0.02) -> None:
    """Seeded random weights: normal(0, std) matrices, identity norms (weights of 1, or of 0
    for Gemma's (1 + w) norms), zero biases.

    Drawn in float32 by torch's generator of the device the weights are on, then cast: on the
    CPU one serial Mersenne-Twister stream (slow for billions of weights); on a GPU its
    Philox generator, in chunks, in parallel. The two generators give different numbers for
    the same seed, so the same `--seed` gives the same weights on every run of one device
    type, not the same weights on CPU and GPU.
    """
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    identity_norm = getattr(model, "identity_norm_weight", 1.0)
    # a model whose norms differ in identity (Qwen3-Next) tells each one's
    identity_of = getattr(model, "identity_norm_weight_of", lambda _name: identity_norm)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(identity_of(name))
            elif name.endswith("bias"):
                param.zero_()
            elif not draws_on_device(device):
                values = torch.empty(param.shape, dtype=torch.float32)
                values.normal_(0.0, std, generator=generator)
                param.copy_(values)
            else:
                _draw_in_chunks(param.view(-1), std, generator)


def draws_on_device(device: torch.device) -> bool:
    """Whether dummy weights are drawn by the device's own generator (every accelerator)."""
    return device.type != "cpu"


def _draw_in_chunks(flat: torch.Tensor, std: float, generator: torch.Generator) -> None:
    staging = torch.empty(min(flat.numel(), DUMMY_CHUNK_ELEMENTS), dtype=torch.float32,
                          device=flat.device)
    for start in range(0, flat.numel(), DUMMY_CHUNK_ELEMENTS):
        chunk = flat[start : start + DUMMY_CHUNK_ELEMENTS]
        values = staging[: chunk.numel()]
        values.normal_(0.0, std, generator=generator)
        chunk.copy_(values)


def decoder_class(
    config: ModelConfig,
) -> type[LlamaDecoder] | type[DeepseekDecoder] | type[GemmaDecoder] | type[Qwen3NextDecoder]:
    """The module that computes `config`'s model: DeepSeek's latent attention, Qwen3-Next's
    Gated DeltaNet hybrid, or the decoder of its architecture (gpt-oss's, Gemma's or
    Llama's)."""
    if config.mla is not None:
        return DeepseekDecoder
    if config.hybrid is not None and config.hybrid.recurrent.kind == "gated_deltanet":
        return Qwen3NextDecoder
    return {"gpt_oss": GptOssDecoder, "gemma": GemmaDecoder,
            "granite_hybrid": GraniteHybridDecoder,
            "nemotron_h": NemotronHDecoder}.get(config.architecture, LlamaDecoder)


# The hybrid families the engine computes, as `decoder_class` picks them.
HYBRID_DECODERS = (GraniteHybridDecoder, NemotronHDecoder, Qwen3NextDecoder)


def computes_recurrent_layers(config: ModelConfig) -> bool:
    """Whether the engine has a decoder for `config`'s hybrid family: Granite-4.0-H's and
    Nemotron-H's Mamba-2 layers, Qwen3-Next's Gated DeltaNet ones."""
    return config.hybrid is not None and decoder_class(config) in HYBRID_DECODERS


def load_model(
    model: str,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
    init_std: float = 0.02,
    need: MemoryNeed | None = None,
    available: AvailableFn | None = None,
) -> tuple[LlamaDecoder, ModelConfig]:
    """The model on `device`; refused before anything is allocated when it cannot fit.

    `need` is what the run will take (weights, activations, KV); by default the weights alone.
    `available` tells the device's free bytes (see `check_memory`). A hybrid's decoder takes
    its recurrent states as a `RecurrentStates` beside the attention callable; a hybrid family
    without a decoder (`computes_recurrent_layers`) is refused.
    """
    config = resolve_model_config(model)
    if config.hybrid is not None and not computes_recurrent_layers(config):
        raise KvbenchInputError(
            f"model {model}: its {config.hybrid.recurrent.kind} layers keep a recurrent state "
            "kvbench's engine does not compute for this family yet (it runs Granite-4.0-H, "
            "Nemotron-H and Qwen3-Next; kvbench estimate and simulate size this one)")
    folder = None if model in PRESETS else model_folder(model, weights=True)
    if config.quantization is not None:
        raise KvbenchInputError(
            f"model {model}: config.json has quantization_config ({config.quantization}); "
            "kvbench loads float32/bfloat16/float16 weights only (kvbench estimate and "
            "simulate size it)")
    if config.vision_parameters:
        raise KvbenchInputError(
            f"model {model}: a multimodal Gemma 3 (config.json model_type gemma3); kvbench "
            "runs text models: estimate and simulate size this one, run needs a folder of "
            "its text model (model_type gemma3_text)")
    device = torch.device(device)
    check_memory(need or memory_need(config, dtype), device, available)
    files = _weight_files(folder) if folder is not None else []
    with torch.device("meta"):
        # Cast while on meta: materialised in float32 first, a bfloat16 model would briefly
        # take twice the bytes the memory check allowed.
        decoder = decoder_class(config)(config).to(dtype=dtype)
    decoder = decoder.to_empty(device=device)
    if config.tie_word_embeddings:  # materialising meta tensors unties shared parameters
        decoder.lm_head.weight = decoder.model.embed_tokens.weight
    if folder is None:
        init_dummy_weights(decoder, seed, init_std)
    else:
        _load_safetensors(decoder, folder, files)
    decoder.reset_buffers(device)  # to_empty left them uninitialised
    decoder.eval()
    return decoder, config


# Floating dtypes a checkpoint may store weights in; anything else (int8, fp8 with scales)
# is quantised and would be read as nonsense by a plain cast.
WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _weight_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise KvbenchInputError(f"model folder {folder} has no *.safetensors weights")
    unreadable = [f.name for f in files if not os.access(f, os.R_OK)]
    if unreadable:
        raise KvbenchInputError(f"model folder {folder}: cannot read {unreadable[0]}")
    return files


def _load_safetensors(decoder: LlamaDecoder, folder: Path, files: list[Path]) -> None:
    """Copy every tensor of `files` into `decoder`, checking name, shape and dtype first.

    Tensors are read one at a time (`safe_open`): the header names every tensor with its shape
    and dtype, so a wrong one is refused before its bytes are read.
    """
    # safetensors: only for a model folder
    from safetensors import SafetensorError, safe_open

    expected = dict(decoder.named_parameters())
    loaded: dict[str, str] = {}
    with torch.no_grad():
        for file in files:
            try:
                with safe_open(str(file), framework="pt") as reader:
                    for name in reader.keys():
                        if name.startswith(getattr(decoder, "IGNORED_WEIGHTS", ())):
                            continue
                        if name not in expected and FUSED_EXPERTS.search(name):
                            for target, tensor in _split_fused_experts(decoder, reader, file, name):
                                _copy_tensor(file, target, tensor.shape, lambda t=tensor: t,
                                             expected, loaded)
                            continue
                        target = _renamed(decoder, name)
                        if name not in expected and (expert := NAMED_EXPERT.search(name)):
                            layer, index, proj = expert.groups()
                            target = _expert_weight(decoder, layer, int(index), proj)
                        _copy_tensor(file, target, reader.get_slice(name).get_shape(),
                                     lambda name=name: reader.get_tensor(name), expected, loaded)
            except (SafetensorError, OSError) as err:
                raise KvbenchInputError(
                    f"{file}: not a readable safetensors file ({first_line(err)})"
                ) from None
    missing = set(expected) - set(loaded)
    if decoder.config.tie_word_embeddings:
        missing.discard("lm_head.weight")
    if missing:
        raise KvbenchInputError(
            f"model folder {folder} lacks weights: {', '.join(sorted(missing)[:3])}"
            + (" ..." if len(missing) > 3 else "")
        )


def _renamed(decoder: LlamaDecoder, name: str) -> str:
    """A checkpoint tensor's name as the decoder's modules call it (`CHECKPOINT_PREFIXES`:
    Nemotron-H's files say `backbone.` where its modules say `model.`)."""
    for prefix, module in getattr(decoder, "CHECKPOINT_PREFIXES", {}).items():
        if name.startswith(prefix):
            return module + name[len(prefix):]
    return name


# transformers 5 can save Mixtral's experts fused (as its modules hold them): per layer
# `mlp.experts.gate_up_proj` [experts, 2 x intermediate, hidden] (w1 rows, then w3 rows),
# `mlp.experts.down_proj` [experts, hidden, intermediate] (w2) and `mlp.gate.weight` (router).
FUSED_EXPERTS = re.compile(
    r"^(model\.layers\.\d+\.)mlp\.(experts\.(gate_up|down)_proj|gate\.weight)$")


# Qwen3-MoE's and DeepSeek's checkpoints (and transformers 5's save_pretrained of them) name
# each expert's SwiGLU `mlp.experts.E.{gate,up,down}_proj`: the decoder's `EXPERT_WEIGHT` and
# `EXPERT_PROJ` say what its modules call them (Mixtral's w1, w3, w2 for `LlamaDecoder`).
NAMED_EXPERT = re.compile(r"^(model\.layers\.\d+\.)mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")


def _expert_weight(decoder, layer: str, expert: int, proj: str) -> str:
    return layer + decoder.EXPERT_WEIGHT.format(expert=expert, proj=decoder.EXPERT_PROJ[proj])


def _split_fused_experts(decoder, reader, file: Path, name: str) -> list[tuple[str, torch.Tensor]]:
    """A fused expert tensor as the decoder's per-expert weights (name, tensor)."""
    layer, kind = FUSED_EXPERTS.search(name).group(1, 3)
    experts = decoder.config.num_local_experts
    tensor = reader.get_tensor(name)
    if kind is None:  # the router
        return [(layer + decoder.ROUTER_WEIGHT, tensor)]
    if tensor.dim() != 3 or tensor.shape[0] != experts:
        raise KvbenchInputError(
            f"{file}: tensor {name} has shape {tuple(tensor.shape)}, config.json implies "
            f"{experts} experts")
    if kind == "down":
        return [(_expert_weight(decoder, layer, e, "down"), tensor[e]) for e in range(experts)]
    return [(_expert_weight(decoder, layer, e, proj), tensor[e].chunk(2, dim=0)[which])
            for e in range(experts) for which, proj in enumerate(("gate", "up"))]


def _copy_tensor(file: Path, name: str, shape, read, expected: dict,
                 loaded: dict[str, str]) -> None:
    """Copy the tensor `read()` gives into parameter `name`, its name and `shape` checked
    before its bytes are read."""
    if name not in expected:
        if "rotary_emb" in name:
            return
        raise KvbenchInputError(f"{file}: unexpected tensor {name}{_config_hint(name)}")
    if name in loaded:
        raise KvbenchInputError(f"{file}: tensor {name} is also in {loaded[name]}")
    param = expected[name]
    if tuple(shape) != tuple(param.shape):
        raise KvbenchInputError(
            f"{file}: tensor {name} has shape {tuple(shape)}, config.json implies "
            f"{tuple(param.shape)}")
    tensor = read()
    if tensor.dtype not in WEIGHT_DTYPES:
        raise KvbenchInputError(
            f"{file}: tensor {name} is {str(tensor.dtype).removeprefix('torch.')}; kvbench "
            "loads float32, bfloat16 or float16 weights (quantised checkpoints are not supported)"
        )
    param.copy_(tensor.to(param.dtype))
    # Checked at the run's dtype: a weight past float16's range turns inf in the copy. A NaN
    # or inf weight gives NaN logits, and every token and figure of the run after them.
    if not bool(torch.isfinite(param).all()):
        nans = int(torch.isnan(param).sum())
        infs = int(torch.isinf(param).sum())
        raise KvbenchInputError(
            f"{file}: tensor {name} holds {nans:,} NaN and {infs:,} infinite values "
            f"(in {str(param.dtype).removeprefix('torch.')}); the weights are damaged")
    loaded[name] = file.name


def _config_hint(name: str) -> str:
    """Which config.json key would have declared an unexpected bias or q/k norm."""
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return " (per-head q/k norms are Qwen3's: config.json model_type is not qwen3)"
    if not name.endswith(".bias"):
        return ""
    if any(p in name for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
        return " (config.json does not set attention_bias)"
    if "mlp" in name:
        return " (config.json does not set mlp_bias)"
    return ""
