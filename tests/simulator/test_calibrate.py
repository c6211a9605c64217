"""`kvbench calibrate`: refuses at once without CUDA; its fits recover known constants from
timings made by the step-time formulas, and `--gpu-spec` reads back what it writes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kvbench.cli import main
from kvbench.models.presets import get_preset
from kvbench.simulator.calibrate import (
    DECODE_SHAPES,
    GEMM_TOKENS,
    PREFILL_TOKENS,
    AttentionPoint,
    CopyPoint,
    GemmPoint,
    Measurements,
    base_preset,
    fit,
    model_matmul_shapes,
)
from kvbench.simulator.gpu_spec_file import load_gpu_spec
from kvbench.simulator.gpus import GPU_PRESETS
from kvbench.simulator.step_time import (
    Hardware,
    StepTimeConstants,
    attention_decode_s,
    attention_prefill_s,
    elementwise_s,
    gemm_s,
)

# A GPU whose kernels follow the model exactly with these constants (not the preset's).
TRUE = StepTimeConstants(
    gemm_peak_efficiency=0.7, gemm_half_tokens=50.0, gemm_bandwidth_efficiency=0.85,
    gemm_launch_s=5e-6, attn_decode_bandwidth_efficiency=0.65, attn_decode_floor_s=12e-6,
    attn_decode_per_seq_s=0.05e-6, attn_prefill_efficiency=0.4, attn_prefill_floor_s=6e-6,
    attn_prefill_per_token_s=0.08e-6, elementwise_bandwidth_efficiency=0.6,
    elementwise_floor_s=3.5e-6,
)
BASE = GPU_PRESETS["a100-80gb"]


def _synthetic(noise: float = 0.0, seed: int = 0) -> Measurements:
    gen = torch.Generator().manual_seed(seed)

    def jitter(t: float) -> float:
        return t * (1.0 + noise * float(torch.randn((), generator=gen)))

    hw = Hardware(BASE.peak_bf16_flops, BASE.hbm_bandwidth_bytes_s, TRUE, None)
    cfg = get_preset("llama-2-7b")
    head_dim = cfg.hidden_size // cfg.num_heads
    out = Measurements("NVIDIA A100-SXM4-80GB", 80 * 2**30)
    for k, n in model_matmul_shapes(cfg):
        for tokens in GEMM_TOKENS:
            out.gemms.append(GemmPoint(tokens, k, n, jitter(gemm_s(TRUE, hw, tokens, k, n, 2, 2))))
    for batch, context in DECODE_SHAPES:
        p = AttentionPoint("decode", batch, context, cfg.num_heads, cfg.num_kv_heads, head_dim, 0)
        t = attention_decode_s(TRUE, hw, batch, p.kv_bytes)
        out.attention.append(dataclasses.replace(p, seconds=jitter(t)))
    for tokens in PREFILL_TOKENS:
        p = AttentionPoint("prefill", 1, tokens, cfg.num_heads, cfg.num_kv_heads, head_dim, 0)
        t = attention_prefill_s(TRUE, hw, tokens, p.flops)
        out.attention.append(dataclasses.replace(p, seconds=jitter(t)))
    for size in (2**20, 2**22, 2**24, 2**26, 2**28):
        out.copies.append(CopyPoint(float(size), jitter(elementwise_s(TRUE, hw, 1, size))))
    return out


def test_fit_recovers_the_constants_of_model_exact_timings():
    calibration = fit(_synthetic(), BASE, "lab")
    assert calibration.peak_bf16_tflops == pytest.approx(BASE.peak_bf16_flops / 1e12)
    assert calibration.bandwidth_gb_s == pytest.approx(BASE.hbm_bandwidth_bytes_s / 1e9)
    expected = {k: v for k, v in TRUE.to_dict().items() if k in calibration.efficiency}
    # The matmuls' weight-bound fit sees tiny activations too: a small share of a percent.
    assert calibration.efficiency == pytest.approx(expected, rel=0.02)
    assert max(calibration.errors.values()) < 0.01


def test_fit_on_noisy_timings_stays_close():
    calibration = fit(_synthetic(noise=0.03, seed=1), BASE, "lab")
    eff = calibration.efficiency
    assert eff["gemm_peak_efficiency"] == pytest.approx(0.7, rel=0.1)
    assert eff["attn_decode_bandwidth_efficiency"] == pytest.approx(0.65, rel=0.1)
    assert eff["elementwise_bandwidth_efficiency"] == pytest.approx(0.6, rel=0.1)
    assert all(v >= 0 for v in eff.values())
    assert max(calibration.errors.values()) < 0.08


def test_efficiency_above_one_raises_the_datasheet_figure():
    slow_sheet = dataclasses.replace(BASE, peak_bf16_flops=BASE.peak_bf16_flops / 2,
                                     hbm_bandwidth_bytes_s=BASE.hbm_bandwidth_bytes_s / 2)
    calibration = fit(_synthetic(), slow_sheet, "lab")
    assert calibration.efficiency["gemm_peak_efficiency"] == 1.0
    assert calibration.peak_bf16_tflops == pytest.approx(BASE.peak_bf16_flops * 0.7 / 1e12,
                                                         rel=0.02)
    assert calibration.efficiency["elementwise_bandwidth_efficiency"] == 1.0
    assert calibration.bandwidth_gb_s == pytest.approx(BASE.hbm_bandwidth_bytes_s * 0.6 / 1e9,
                                                       rel=0.02)


def test_gpu_spec_loader_reads_what_the_writer_writes(tmp_path):
    calibration = fit(_synthetic(), BASE, 'lab "a100"')
    spec = load_gpu_spec(calibration.write(tmp_path / "lab.toml"))
    assert spec.name == 'lab "a100"' and spec.calibrated
    assert spec.memory_bytes == 80 * 2**30
    assert spec.peak_bf16_flops == pytest.approx(calibration.peak_bf16_tflops * 1e12)
    assert spec.hbm_bandwidth_bytes_s == pytest.approx(calibration.bandwidth_gb_s * 1e9)
    constants = spec.constants.to_dict()
    for key, value in calibration.efficiency.items():
        assert constants[key] == value


def test_base_preset_follows_the_device_name():
    assert base_preset("NVIDIA H100 80GB HBM3").name == GPU_PRESETS["h100-80gb"].name
    assert base_preset("NVIDIA A100-SXM4-40GB").name == GPU_PRESETS["a100-40gb"].name
    assert base_preset("Some Future GPU").name == BASE.name
    # "h20" is inside "h200": each device still finds its own preset
    assert base_preset("NVIDIA H200").name == "h200"
    assert base_preset("NVIDIA H20").name == "h20"
    assert base_preset("NVIDIA B200").name == "b200"
    assert base_preset("AMD Instinct MI300X").name == "mi300x"
    assert base_preset("anything", "h200").name == GPU_PRESETS["h200"].name


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_calibrate_without_cuda_exits_2_with_one_line(tmp_path, capsys):
    out = tmp_path / "gpu.toml"
    assert main(["calibrate", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kvbench: error:") and "CUDA" in err[0]
    assert not out.exists()
