"""`kvbench calibrate`: time a GPU's kernels and fit the simulator's step-time constants to them.

What is timed (CUDA events, median of several runs after warm-up, at a few sizes of one
model's shapes) and how each fit inverts `kvbench.simulator.step_time`'s formulas:
docs/simulator.md, "Measured on your GPU". The peak FLOP/s and HBM bandwidth written are the
base preset's datasheet figures; an efficiency that would exceed 1 raises the figure to the
measured one instead. The fitting functions take plain measurements, so they are tested
without a GPU; only `measure` needs CUDA.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.simulator.gpus import GPU_PRESETS, GPUSpec
from kvbench.simulator.step_time import (
    Hardware,
    StepTimeConstants,
    attention_decode_s,
    attention_prefill_s,
    elementwise_s,
    gemm_s,
)

GEMM_TOKENS = (1, 2, 4, 8, 16, 64, 256, 512, 1024, 2048, 4096)
WEIGHT_BOUND_MAX_TOKENS = 8
COMPUTE_BOUND_MIN_TOKENS = 256
DECODE_SHAPES = ((1, 1024), (8, 1024), (32, 1024), (64, 2048), (128, 1024), (128, 4096),
                 (32, 4096), (8, 512))
PREFILL_TOKENS = (128, 512, 1024, 2048, 4096)
COPY_BYTES = (2**20, 2**22, 2**24, 2**26, 2**28)
BYTES_BF16 = 2


@dataclass(frozen=True)
class GemmPoint:
    tokens: int
    k: int
    n: int
    seconds: float


@dataclass(frozen=True)
class AttentionPoint:
    """Decode (one query per sequence) or prefill (causal, `tokens` queries of one sequence)."""

    kind: str  # "decode" | "prefill"
    batch: int
    context: int  # decode: tokens of KV per sequence; prefill: prompt tokens
    num_heads: int
    num_kv_heads: int
    head_dim: int
    seconds: float

    @property
    def kv_bytes(self) -> float:
        return 2.0 * self.batch * self.context * self.num_kv_heads * self.head_dim * BYTES_BF16

    @property
    def flops(self) -> float:
        """Causal prefill: QK^T and PV over the query-key pairs under the mask."""
        pairs = self.context * (self.context + 1) / 2
        return 4.0 * self.num_heads * self.head_dim * pairs * self.batch


@dataclass(frozen=True)
class CopyPoint:
    num_bytes: float  # read + written
    seconds: float


@dataclass
class Measurements:
    device_name: str
    memory_bytes: int
    gemms: list[GemmPoint] = field(default_factory=list)
    attention: list[AttentionPoint] = field(default_factory=list)
    copies: list[CopyPoint] = field(default_factory=list)


@dataclass
class Calibration:
    """A fitted GPU: what `kvbench.simulator.gpu_spec_file` reads, plus the fit's errors."""

    name: str
    description: str
    memory_bytes: int
    peak_bf16_tflops: float
    bandwidth_gb_s: float
    efficiency: dict[str, float]
    errors: dict[str, float]  # operation -> mean |model / measured - 1| on its points

    def to_toml(self) -> str:
        lines = [
            "# Written by `kvbench calibrate`: use with --gpu-spec FILE.toml",
            "# mean abs error of the fit: "
            + (", ".join(f"{op} {err:.1%}" for op, err in self.errors.items()) or "none"),
            f"name = {_toml_str(self.name)}",
            f"description = {_toml_str(self.description)}",
            f"memory_bytes = {int(self.memory_bytes)}",
            f"bandwidth_gb_s = {self.bandwidth_gb_s!r}",
            "calibrated = true",
            "",
            "[peak_tflops]",
            f"bf16 = {self.peak_bf16_tflops!r}",
            "",
            "[efficiency]",
        ]
        lines += [f"{key} = {float(value)!r}" for key, value in self.efficiency.items()]
        return "\n".join(lines) + "\n"

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_toml(), encoding="utf-8")
        return path


def _toml_str(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


# Fitting --------------------------------------------------------------------------------


def _nonnegative_lstsq(columns: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: a negative one is pinned to 0 and the rest
    refitted (a floor or per-item cost the data cannot see is 0, not negative)."""
    active = list(range(len(columns)))
    coef = np.zeros(len(columns))
    while active:
        a = np.stack([columns[i] for i in active], axis=1)
        # Relative least squares: every point counts by its relative error.
        w = 1.0 / y
        solution, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
        if (solution >= 0).all():
            coef[:] = 0.0
            coef[active] = solution
            return coef
        active.pop(int(np.argmin(solution)))
    return coef


@dataclass(frozen=True)
class _GemmFit:
    launch_s: float
    bandwidth_share: float  # achieved weight-read bandwidth / base bandwidth
    peak_flops_eff: float  # peak x gemm_peak_efficiency
    half_tokens: float


def fit_gemm(points: Sequence[GemmPoint], bandwidth_bytes_s: float) -> _GemmFit:
    tiny = [p for p in points if p.tokens <= WEIGHT_BOUND_MAX_TOKENS]
    big = [p for p in points if p.tokens >= COMPUTE_BOUND_MIN_TOKENS]
    if not tiny or len({p.tokens for p in big}) < 2:
        raise KvbenchInputError("calibrate: too few matmul sizes to fit")
    # Weight-bound: t = launch + kn w / (bw e): one line over all shapes in weight bytes.
    weights = np.array([p.k * p.n * BYTES_BF16 for p in tiny], dtype=float)
    times = np.array([p.seconds for p in tiny])
    launch, inv_rate = _nonnegative_lstsq([np.ones_like(weights), weights], times)
    bw_share = (1.0 / inv_rate) / bandwidth_bytes_s if inv_rate > 0 else 1.0
    # Compute-bound: t - launch = 2kn (T + h) / (P e) = x (T + h) with x = 2kn / (P e).
    flops = np.array([2.0 * p.tokens * p.k * p.n for p in big])
    kn2 = np.array([2.0 * p.k * p.n for p in big])
    t_big = np.array([p.seconds for p in big]) - launch
    inv_pe, inv_pe_h = _nonnegative_lstsq([flops, kn2], np.maximum(t_big, 1e-9))
    peak_eff = 1.0 / inv_pe
    return _GemmFit(float(launch), float(bw_share), float(peak_eff), float(inv_pe_h * peak_eff))


def _fit_rate(what: str, min_points: int, seconds: list[float],
              *columns: list[float]) -> tuple[float, ...]:
    """`t = floor + per-item costs x columns[:-1] + columns[-1] / rate`, fitted: the floor,
    each per-item cost and the rate (inf when the data cannot see it)."""
    if len(seconds) < min_points:
        raise KvbenchInputError(f"calibrate: too few {what} sizes to fit")
    y = np.array(seconds)
    *costs, inv_rate = _nonnegative_lstsq(
        [np.ones_like(y), *(np.array(c, dtype=float) for c in columns)], y)
    return (*(float(c) for c in costs), float(1.0 / inv_rate) if inv_rate > 0 else math.inf)


def base_preset(device_name: str, base: str | None = None) -> GPUSpec:
    """The preset whose datasheet figures the file keeps: `base`, else one named like the
    device (\"NVIDIA H100 80GB HBM3\" -> h100-80gb), else a100-80gb."""
    if base is not None:
        if base not in GPU_PRESETS:
            raise KvbenchInputError(
                f"unknown --base {base!r} (presets: {', '.join(GPU_PRESETS)})")
        return GPU_PRESETS[base]
    words = device_name.lower().replace("-", " ").split()
    for name, spec in GPU_PRESETS.items():
        parts = name.split("-")
        if all(any(part in word for word in words) for part in parts):
            return spec
    return GPU_PRESETS["a100-80gb"]


def _share(achieved: float, datasheet: float) -> tuple[float, float]:
    """(efficiency, datasheet figure): an efficiency above 1 raises the figure instead."""
    if achieved > datasheet:
        return 1.0, achieved
    return achieved / datasheet, datasheet


def fit(measurements: Measurements, base: GPUSpec, name: str) -> Calibration:
    """Fit the step-time constants of `kvbench.simulator.step_time` to `measurements`."""
    bandwidth = base.hbm_bandwidth_bytes_s
    peak = base.peak_bf16_flops
    copies = measurements.copies
    copy_floor, copy_rate = _fit_rate("copy", 2, [p.seconds for p in copies],
                                      [p.num_bytes for p in copies])
    # The best bandwidth any kernel reached bounds the HBM figure from below.
    _, bandwidth = _share(copy_rate, bandwidth)
    gemm = fit_gemm(measurements.gemms, bandwidth)
    gemm_eff, peak = _share(gemm.peak_flops_eff, peak)
    decode = [p for p in measurements.attention if p.kind == "decode"]
    prefill = [p for p in measurements.attention if p.kind == "prefill"]
    dec_floor, dec_per_seq, dec_rate = _fit_rate(
        "decode attention", 3, [p.seconds for p in decode], [p.batch for p in decode],
        [p.kv_bytes for p in decode])
    pf_floor, pf_per_token, pf_rate = _fit_rate(
        "prefill attention", 3, [p.seconds for p in prefill],
        [p.context * p.batch for p in prefill], [p.flops for p in prefill])
    efficiency = {
        "gemm_peak_efficiency": gemm_eff,
        "gemm_half_tokens": gemm.half_tokens,
        "gemm_bandwidth_efficiency": min(1.0, gemm.bandwidth_share),
        "gemm_launch_s": gemm.launch_s,
        "attn_decode_bandwidth_efficiency": min(1.0, dec_rate / bandwidth),
        "attn_decode_floor_s": dec_floor,
        "attn_decode_per_seq_s": dec_per_seq,
        "attn_prefill_efficiency": min(1.0, pf_rate / peak),
        "attn_prefill_floor_s": pf_floor,
        "attn_prefill_per_token_s": pf_per_token,
        "elementwise_bandwidth_efficiency": min(1.0, copy_rate / bandwidth),
        "elementwise_floor_s": copy_floor,
    }
    calibration = Calibration(
        name=name,
        description=f"{measurements.device_name}, measured by kvbench calibrate "
                    f"(datasheet base: {base.name})",
        memory_bytes=measurements.memory_bytes,
        peak_bf16_tflops=peak / 1e12,
        bandwidth_gb_s=bandwidth / 1e9,
        efficiency=efficiency,
        errors={},
    )
    calibration.errors = fit_errors(measurements, calibration)
    return calibration


def fit_errors(measurements: Measurements, calibration: Calibration) -> dict[str, float]:
    """Mean |model / measured - 1| per operation, the model being the step-time formulas."""
    base = GPU_PRESETS["a100-80gb"].constants.to_dict()
    constants = StepTimeConstants(**{**base, **calibration.efficiency})
    hw = Hardware(calibration.peak_bf16_tflops * 1e12, calibration.bandwidth_gb_s * 1e9,
                  constants, None)
    decode = [p for p in measurements.attention if p.kind == "decode"]
    prefill = [p for p in measurements.attention if p.kind == "prefill"]
    groups: dict[str, tuple[Sequence[Any], Callable[[Any], float]]] = {
        "gemm": (measurements.gemms,
                 lambda p: gemm_s(constants, hw, p.tokens, p.k, p.n, BYTES_BF16, BYTES_BF16)),
        "attn_decode": (decode, lambda p: attention_decode_s(constants, hw, p.batch, p.kv_bytes)),
        "attn_prefill": (prefill, lambda p: attention_prefill_s(constants, hw,
                                                                 p.context * p.batch, p.flops)),
        "copy": (measurements.copies, lambda p: elementwise_s(constants, hw, 1, p.num_bytes)),
    }
    return {op: float(np.mean([abs(model(p) / p.seconds - 1.0) for p in points]))
            for op, (points, model) in groups.items() if points}


# Measuring (CUDA) -----------------------------------------------------------------------


def require_cuda() -> None:
    """Raise `KvbenchInputError` at once where there is no CUDA device to time."""
    # torch: only `kvbench calibrate` on a GPU
    import torch

    if not torch.cuda.is_available():
        raise KvbenchInputError(
            "kvbench calibrate needs a CUDA GPU (torch.cuda.is_available() is False); "
            "on this machine use a preset (--gpu) or write a --gpu-spec file by hand")


def _time_cuda(fn: Callable[[], Any], warmup: int = 3, repeats: int = 10) -> float:
    """Median seconds of `fn` on the current CUDA stream (CUDA events)."""
    # torch: only `kvbench calibrate` on a GPU
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def _head_dim(cfg: ModelConfig) -> int:
    return cfg.head_dim or cfg.hidden_size // cfg.num_heads


def model_matmul_shapes(cfg: ModelConfig) -> list[tuple[int, int]]:
    """(k, n) of one layer's QKV, O, gate+up and down projections (tensor parallel 1)."""
    head_dim = _head_dim(cfg)
    qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * head_dim
    return [(cfg.hidden_size, qkv), (cfg.num_heads * head_dim, cfg.hidden_size),
            (cfg.hidden_size, 2 * cfg.intermediate_size),
            (cfg.intermediate_size, cfg.hidden_size)]


def measure(cfg: ModelConfig, device: str = "cuda",
            progress: Callable[[str], None] | None = None) -> Measurements:
    """Time matmuls, attention and copies of `cfg`'s shapes on `device` (bf16)."""
    # torch: only `kvbench calibrate` on a GPU
    import torch
    import torch.nn.functional as F

    require_cuda()
    dev = torch.device(device)
    props = torch.cuda.get_device_properties(dev)
    out = Measurements(torch.cuda.get_device_name(dev), int(props.total_memory))
    say = progress or (lambda _msg: None)
    dtype = torch.bfloat16
    with torch.no_grad(), torch.cuda.device(dev):
        say("matmuls")
        for k, n in model_matmul_shapes(cfg):
            weight = torch.randn(k, n, device=dev, dtype=dtype)
            for tokens in GEMM_TOKENS:
                x = torch.randn(tokens, k, device=dev, dtype=dtype)
                seconds = _time_cuda(lambda x=x, weight=weight: x @ weight)
                out.gemms.append(GemmPoint(tokens, k, n, seconds))
        heads, kv_heads = cfg.num_heads, cfg.num_kv_heads
        head_dim = _head_dim(cfg)
        gqa = heads != kv_heads
        for kind, shapes in (("decode", DECODE_SHAPES),
                             ("prefill", [(1, tokens) for tokens in PREFILL_TOKENS])):
            say(f"{kind} attention")
            for batch, context in shapes:  # decode: one query a sequence; prefill: causal
                queries = 1 if kind == "decode" else context
                q = torch.randn(batch, heads, queries, head_dim, device=dev, dtype=dtype)
                k_ = torch.randn(batch, kv_heads, context, head_dim, device=dev, dtype=dtype)
                v = torch.randn_like(k_)

                def attend(q=q, k_=k_, v=v, causal=kind == "prefill"):
                    return F.scaled_dot_product_attention(q, k_, v, is_causal=causal,
                                                          enable_gqa=gqa)

                out.attention.append(AttentionPoint(kind, batch, context, heads, kv_heads,
                                                    head_dim, _time_cuda(attend)))
        say("copies")
        for size in COPY_BYTES:
            src = torch.empty(size // 2 // 2, device=dev, dtype=dtype)
            dst = torch.empty_like(src)
            seconds = _time_cuda(lambda dst=dst, src=src: dst.copy_(src))
            out.copies.append(CopyPoint(float(size), seconds))
    return out
