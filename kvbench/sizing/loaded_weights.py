"""Weights as vLLM loads them: the checkpoint's quantization, sharded over tensor parallelism
and split over pipeline stages ("Model loading took X GiB memory"; docs/estimate.md's
"weights" row).

A quantized checkpoint stores the decoder's linear layers in `WeightQuantization`'s bytes per
weight (fp8 and int8 1, int4 0.5 + 2.5 / group, mxfp4 0.5 + 1 / 32 with each GPU's expert
width rounded up to 256, as vLLM's MXFP4 MoE kernels hold it); embeddings, the LM head
(vocabulary padded to 64), norms and routers stay in the model dtype. Tensor parallelism
splits every linear layer, the embedding and the LM head, and replicates norms, routers and
latent attention's down-projections; pipeline stages split the layers as `get_pp_indices`,
the first holding the embedding and any vision tower, the last the final norm and LM head.
Rotary embeddings add a cos/sin cache of max_position_embeddings x rotary dim on every GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.sizes import DTYPE_BYTES

VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE
MXFP4_WIDTH_MULTIPLE = 256


@dataclass(frozen=True)
class WeightQuantization:
    """How a checkpoint stores its quantized linear layers."""

    scheme: str  # "fp8" | "int8" | "int4" | "mxfp4"
    bytes_per_weight: Fraction
    experts_only: bool = False  # mxfp4: gpt-oss quantizes its experts only

    def describe(self) -> str:
        where = "experts" if self.experts_only else "linear layers"
        return f"{self.scheme} {where} ({float(self.bytes_per_weight):.4g} B a weight)"


def quantization_from_config(config: dict[str, Any] | None) -> WeightQuantization | None:
    """The scheme of a config.json `quantization_config` (None: float weights)."""
    if not config:
        return None
    method = str(config.get("quant_method", "")).lower()
    if method == "mxfp4":
        return WeightQuantization("mxfp4", Fraction(1, 2) + Fraction(1, 32), experts_only=True)
    if method in ("fp8", "fbgemm_fp8", "modelopt"):
        return WeightQuantization("fp8", Fraction(1))
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        bits = int(config.get("bits", config.get("w_bit", 4)))
        group = int(config.get("group_size", config.get("q_group_size", 128)))
        return _integer(bits, group)
    if method == "compressed-tensors":
        weights = _compressed_tensors_weights(config)
        bits, kind = int(weights.get("num_bits", 8)), weights.get("type", "int")
        if bits == 8 and kind == "float":
            return WeightQuantization("fp8", Fraction(1))
        group = weights.get("group_size") if weights.get("strategy") == "group" else None
        return _integer(bits, group)
    raise KvbenchInputError(
        f"quantization_config quant_method {method or '?'!r} is not sized by kvbench "
        "(fp8, mxfp4, awq, gptq and compressed-tensors 4- and 8-bit are)")


def quantization_from_flag(flag: str | None) -> WeightQuantization | None:
    """vLLM's `--quantization fp8`: a float checkpoint quantized to fp8 as it loads."""
    if flag is None:
        return None
    if flag.lower() != "fp8":
        raise KvbenchInputError(
            f"--quantization {flag!r}: only fp8 (vLLM's online fp8) is modelled; a "
            "pre-quantized checkpoint's config.json says its own scheme")
    return WeightQuantization("fp8", Fraction(1))


def _integer(bits: int, group: int | None) -> WeightQuantization:
    if bits not in (4, 8):
        raise KvbenchInputError(f"{bits}-bit weights are not sized by kvbench (4 and 8 are)")
    if bits == 8:
        return WeightQuantization("int8", Fraction(1))
    per_group = Fraction(5, 2) / group if group and group > 0 else Fraction(0)
    return WeightQuantization("int4", Fraction(1, 2) + per_group)


def _compressed_tensors_weights(config: dict[str, Any]) -> dict[str, Any]:
    groups = config.get("config_groups") or {}
    for group in groups.values():
        if isinstance(group, dict) and isinstance(group.get("weights"), dict):
            return group["weights"]
    raise KvbenchInputError("compressed-tensors quantization_config has no weights scheme")


@dataclass(frozen=True)
class StageWeights:
    """One GPU's weights in one pipeline stage."""

    layers: tuple[int, ...]  # the model layers this stage holds
    bytes: int
    first: bool
    last: bool


def pipeline_layers(num_layers: int, pipeline_parallel_size: int) -> list[tuple[int, ...]]:
    """Each stage's layers, as vLLM's `get_pp_indices` splits them."""
    pp = pipeline_parallel_size
    if pp < 1 or pp > num_layers:
        raise KvbenchInputError(
            f"--pipeline-parallel-size must be between 1 and the model's {num_layers} layers, "
            f"got {pp}")
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    stages, start = [], 0
    for size in sizes:
        stages.append(tuple(range(start, start + size)))
        start += size
    return stages


def loaded_weights(model: ModelConfig, dtype: str, quantization: WeightQuantization | None,
                   tensor_parallel_size: int = 1,
                   pipeline_parallel_size: int = 1) -> list[StageWeights]:
    """One GPU's weight bytes in each pipeline stage."""
    tp = tensor_parallel_size
    d = DTYPE_BYTES[dtype]
    stages = pipeline_layers(model.num_layers, pipeline_parallel_size)
    vocab_rows = math.ceil(_round_up(model.vocab_size, VOCAB_PADDING) / tp)
    table = vocab_rows * model.hidden_size * d  # one GPU's embedding or LM head
    rotary_dim = model.mla.qk_rope_head_dim if model.mla is not None else model.head_dim
    rotary = model.max_position_embeddings * rotary_dim * d * (
        2 if model.rope_local_theta is not None else 1)
    out = []
    for index, layers in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        total = sum(_layer_bytes(model, i, d, quantization, tp) for i in layers) + rotary
        if first:
            total += table + math.ceil(model.vision_parameters / tp) * d
        if last:
            total += model.hidden_size * d  # the final norm
            if not (first and model.tie_word_embeddings):
                total += table
        out.append(StageWeights(layers, int(total), first, last))
    return out


def _layer_bytes(model: ModelConfig, layer: int, d: int,
                 quantization: WeightQuantization | None, tp: int) -> Fraction:
    """One GPU's bytes of decoder layer `layer`."""
    h = model.hidden_size
    norms = model.norms_per_layer * h + (2 * model.head_dim if model.qk_norm else 0)
    if model.mla is not None:
        norms += (model.mla.q_lora_rank or 0) + model.mla.kv_lora_rank
        down = h * model.mla.latent_dim + h * (model.mla.q_lora_rank or 0)
    else:
        down = 0
    attention = model._attention_parameters() - down  # the sharded part
    sinks = model.num_heads if model.attention_sinks else 0
    linear_bytes = d if quantization is None or quantization.experts_only else (
        quantization.bytes_per_weight)
    total = Fraction(norms * d + down * linear_bytes) + Fraction(
        attention * linear_bytes + sinks * d, tp)
    if not model.is_moe_layer(layer):
        dense = 3 * h * model.intermediate_size + (
            2 * model.intermediate_size + h if model.mlp_bias else 0)
        return total + Fraction(dense * linear_bytes, tp)
    experts, width = model.num_local_experts, model.moe_intermediate_size
    total += experts * h * d  # the router, replicated
    shared = 3 * h * model.num_shared_experts * width
    total += Fraction(shared * linear_bytes, tp)
    if quantization is not None and quantization.scheme == "mxfp4":
        per_gpu = _round_up(math.ceil(width / tp), MXFP4_WIDTH_MULTIPLE)
        total += experts * 3 * h * per_gpu * quantization.bytes_per_weight
    else:
        total += Fraction(experts * 3 * h * width * linear_bytes, tp)
    if model.moe_bias:
        total += Fraction(experts * (2 * width + h) * d, tp) + experts * d
    return total


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
