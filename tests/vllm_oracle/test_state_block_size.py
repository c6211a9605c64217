"""The attention block size vLLM raises for a state-space hybrid, from vLLM's own
`Platform._align_hybrid_block_size` (vllm/platforms/interface.py) on each published config,
against `kvbench.sizing.state_pages`: the block size and the padded state page.

Runs where vLLM is importable (an oracle venv: /work/mkoracle.sh); CPU only. vLLM's function
reads its config objects for a handful of fields, given here as plain namespaces; the model
class answers the state shapes and dtypes (`get_mamba_state_shape_from_config`, `..._dtype_`).
Qwen3-Next's module needs optional quantization packages to import, so its two classmethods
are restated from vllm/model_executor/models/qwen3_next.py, calling the same
`MambaStateShapeCalculator.gated_delta_net_state_shape` and dtype calculator."""

from __future__ import annotations

import contextlib
import types

import pytest

pytest.importorskip("vllm.platforms.interface", reason="vLLM is not installed (oracle venv)")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vllm.config.vllm as vllm_config_module  # noqa: E402
from vllm.model_executor.layers.mamba.mamba_utils import (  # noqa: E402
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models.registry import ModelRegistry  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402

from kvbench.models.presets import PRESETS  # noqa: E402
from kvbench.sizing.state_pages import state_pages  # noqa: E402
from tests.models.published_hybrid_configs import (  # noqa: E402
    GRANITE_4_H_SMALL_CONFIG,
    NEMOTRON_H_8B_CONFIG,
    QWEN3_NEXT_80B_A3B_CONFIG,
)


class Qwen3NextStateShapes:
    """vllm/model_executor/models/qwen3_next.py's two classmethods, as written there."""

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
            vllm_config.model_config.dtype, vllm_config.cache_config.mamba_cache_dtype,
            vllm_config.cache_config.mamba_ssm_cache_dtype)

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        hf = vllm_config.model_config.hf_text_config
        return MambaStateShapeCalculator.gated_delta_net_state_shape(
            vllm_config.parallel_config.tensor_parallel_size, hf.linear_num_key_heads,
            hf.linear_num_value_heads, hf.linear_key_head_dim, hf.linear_value_head_dim,
            hf.linear_conv_kernel_dim, 0)


def _model_class(architecture):
    if architecture == "Qwen3NextForCausalLM":
        return Qwen3NextStateShapes
    if architecture == "GraniteMoeHybridForCausalLM":
        from vllm.model_executor.models.granitemoehybrid import GraniteMoeHybridForCausalLM
        return GraniteMoeHybridForCausalLM
    from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM
    return NemotronHForCausalLM


# preset, published config, head size, vLLM's mamba_ssm_cache_dtype after its config hooks
CASES = [
    ("qwen3-next-80b-a3b", QWEN3_NEXT_80B_A3B_CONFIG, 256, "auto"),
    ("granite-4.0-h-small", GRANITE_4_H_SMALL_CONFIG, 128, "auto"),
    ("nemotron-h-8b", NEMOTRON_H_8B_CONFIG, 128, "float32"),  # NemotronHForCausalLMConfig
]


def _vllm_block(config, head_size, ssm_dtype, tp, cache_dtype, block_size, monkeypatch,
                mode="none"):
    fields = dict(config)
    hf = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    architecture = config["architectures"][0]
    model_config = types.SimpleNamespace(
        use_mla=False, model_impl="vllm", dtype=torch.bfloat16, architecture=architecture,
        hf_config=hf, hf_text_config=hf, get_head_size=lambda: head_size,
        get_num_kv_heads=lambda parallel: max(1, hf.num_key_value_heads // tp))
    cache_config = types.SimpleNamespace(
        cache_dtype=cache_dtype, block_size=block_size, mamba_cache_mode=mode,
        mamba_page_size_padded=None, mamba_cache_dtype="auto",
        mamba_ssm_cache_dtype=ssm_dtype, use_replayssm=False)
    vllm_config = types.SimpleNamespace(
        cache_config=cache_config, model_config=model_config,
        parallel_config=types.SimpleNamespace(tensor_parallel_size=tp),
        speculative_config=None, num_speculative_tokens=0, use_flashinfer_replayssm=False)
    monkeypatch.setattr(vllm_config_module, "set_current_vllm_config",
                        lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(ModelRegistry, "resolve_model_cls",
                        lambda arch, model_config: (_model_class(arch), arch))

    class CudaLike(Platform):  # FlashAttention, vLLM's CUDA default, the one backend
        @classmethod
        def _find_non_ssm_backends(cls, vllm_config):
            return [FlashAttentionBackend]

    CudaLike._align_hybrid_block_size(vllm_config, FlashAttentionBackend)
    return cache_config.block_size, cache_config.mamba_page_size_padded


@pytest.mark.parametrize("preset, config, head_size, ssm_dtype", CASES)
@pytest.mark.parametrize("tp, cache_dtype, block_size", [
    (1, "auto", 16), (2, "auto", 16), (1, "fp8", 16), (1, "auto", 64)])
def test_block_size_and_page_are_vllms(preset, config, head_size, ssm_dtype, tp, cache_dtype,
                                       block_size, monkeypatch):
    block, padded = _vllm_block(config, head_size, ssm_dtype, tp, cache_dtype, block_size,
                                monkeypatch)
    pages = state_pages(PRESETS[preset], 1 if cache_dtype == "fp8" else 2, 2, tp, block_size)
    assert pages.block_size == block
    assert pages.page_bytes == (padded or pages.state_bytes_per_layer)


def _checkpoint_alignment(architecture):
    """What vLLM's layers declare (`get_mamba_prefill_checkpoint_alignment`): a Gated DeltaNet
    layer FlashInfer's 64-token checkpoints where that prefill kernel runs (CUDA Hopper), a
    Mamba-2 layer none (`MambaMixer2` keeps `MambaBase`'s)."""
    from vllm.model_executor.layers.mamba.abstract import MambaBase
    from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2
    from vllm.v1.attention.backends.gdn_attn import FLASHINFER_GDN_CHECKPOINT_ALIGNMENT

    assert (MambaMixer2.get_prefill_checkpoint_alignment
            is MambaBase.get_prefill_checkpoint_alignment)
    if architecture == "Qwen3NextForCausalLM":
        return FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
    return None


@pytest.mark.parametrize("preset, config, head_size, ssm_dtype", CASES)
@pytest.mark.parametrize("tp, block_size", [(1, 16), (2, 16), (1, 64)])
def test_align_mode_block_size_is_vllms(preset, config, head_size, ssm_dtype, tp, block_size,
                                        monkeypatch):
    """vLLM's default with prefix caching (`align`): the block also a multiple of the layers'
    prefill checkpoint alignment (`kvbench.sizing.state_pages.checkpoint_alignment`)."""
    import vllm.model_executor.layers.mamba.abstract as mamba_abstract

    from kvbench.sizing.state_pages import checkpoint_alignment

    alignment = _checkpoint_alignment(config["architectures"][0])
    monkeypatch.setattr(mamba_abstract, "get_mamba_prefill_checkpoint_alignment",
                        lambda vllm_config: alignment)
    block, padded = _vllm_block(config, head_size, ssm_dtype, tp, "auto", block_size,
                                monkeypatch, mode="align")
    model = PRESETS[preset]
    assert checkpoint_alignment(model, "align") == (alignment or 1)
    pages = state_pages(model, 2, 2, tp, block_size, checkpoint_alignment(model, "align"))
    assert pages.block_size == block
    assert pages.page_bytes == (padded or pages.state_bytes_per_layer)
