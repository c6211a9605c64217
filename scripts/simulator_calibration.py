"""Calibrate and check kvbench's step-time model against measured GPU kernel profiles.

    python scripts/simulator_calibration.py                  # error table of the shipped model
    python scripts/simulator_calibration.py --fit            # + constants fitted here
    python scripts/simulator_calibration.py --extract GITDIR # rebuild the points file

The points (`scripts/simulator_calibration_points.csv`, a few KB) are medians picked from the
profiles Vidur (Agrawal et al., MLSys 2024; github.com/microsoft/vidur, MIT licence) publishes
for vLLM kernels on A100-80GB and H100-80GB (DGX, NVLink): per-operation times of Llama-2-7B and
Llama-2-70B layers (`data/profiling/compute/{a100,h100}/meta-llama/*/mlp.csv`), flash-attention
decode and prefill of the Llama-2-70B shape at tensor parallelism 2 on A100
(`data/profiling/a100/attention.csv` at commit e2d00e9) and NCCL all-reduce inside one DGX node
(`data/profiling/network/{a100,h100}_dgx/all_reduce.csv`). `--extract` reads them from a git
clone of that repository; only the figures below are kept, not the profiles.

The fit is this script's own: relative least squares (each row divided by its measured time)
for the parts linear in their constants, a grid search for the matmul efficiency curve.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.step_time import (
    Hardware,
    StepTimeConstants,
    StepTimeModel,
    attention_decode_s,
    attention_prefill_s,
    elementwise_s,
    gemm_s,
)

POINTS = Path(__file__).with_name("simulator_calibration_points.csv")
GPUS = {"a100": "a100-80gb", "h100": "h100-80gb"}
MODELS = {"Llama-2-7b-hf": "llama-2-7b", "Llama-2-70b-hf": "llama-2-70b"}
GEMM_OPS = {
    "qkv": "attn_pre_proj",
    "o": "attn_post_proj",
    "gate_up": "mlp_up_proj",
    "down": "mlp_down_proj",
}
ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
TOKENS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096)
FIELDS = ("gpu", "model", "tp", "op", "tokens", "batch", "context", "bytes", "workers", "ms")


# Extraction (needs a clone of microsoft/vidur) --------------------------------------------


def _git_csv(gitdir: str, rev_path: str) -> list[dict[str, str]]:
    text = subprocess.run(
        ["git", "--git-dir", gitdir, "show", rev_path], capture_output=True, text=True, check=True
    ).stdout
    return list(csv.DictReader(io.StringIO(text)))


def extract(gitdir: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []

    def add(**kw: object) -> None:
        rows.append({f: kw.get(f, "") for f in FIELDS})

    for g in GPUS:
        for m, preset in MODELS.items():
            data = _git_csv(gitdir, f"HEAD:data/profiling/compute/{g}/meta-llama/{m}/mlp.csv")
            for r in data:
                tp, t = int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])
                if tp > (2 if preset == "llama-2-7b" else 4) or t not in TOKENS:
                    continue
                if any(x["gpu"] == GPUS[g] and x["model"] == preset and x["tp"] == tp
                       and x["tokens"] == t and x["op"] == "qkv" for x in rows):
                    continue  # the profiles repeat some sizes: keep the first
                for op, col in GEMM_OPS.items():
                    add(gpu=GPUS[g], model=preset, tp=tp, op=op, tokens=t,
                        ms=float(r[f"time_stats.{col}.median"]))
                ms = sum(float(r[f"time_stats.{c}.median"]) for c in ELEMENTWISE)
                add(gpu=GPUS[g], model=preset, tp=tp, op="elementwise", tokens=t, ms=round(ms, 4))
    att = _git_csv(gitdir, "e2d00e9afba96cec9f0e7ea560bbfc4a539fae6a:data/profiling/a100/attention.csv")
    for r in att:
        b, kv = int(r["batch_size"]), int(r["kv_cache_size"])
        if r["is_prefill"] == "False":
            if b in (1, 4, 16, 32, 64, 128) and kv in (128, 512, 1024, 2048, 4032):
                add(gpu="a100-80gb", model="llama-2-70b", tp=2, op="attn_decode", batch=b,
                    context=kv, ms=float(r["time_stats.attn_decode.median"]))
        else:
            q = int(r["prefill_chunk_size"])
            if (kv == 0 and q in (64, 128, 256, 512, 1024, 2048, 3072, 3968)) or (
                q == 512 and kv in (1024, 2048, 3520)
            ):
                add(gpu="a100-80gb", model="llama-2-70b", tp=2, op="attn_prefill", tokens=q,
                    context=kv + q, ms=float(r["time_stats.attn_prefill.median"]))
    for g in GPUS:
        data = _git_csv(gitdir, f"HEAD:data/profiling/network/{g}_dgx/all_reduce.csv")
        ours = [r for r in data if r["rank"] == "0" and r["devices_per_node"] == r["num_workers"]]
        sizes = sorted({int(r["size"]) for r in ours})
        # the profiled size nearest each of 16 KiB ... 64 MiB (decode to large-prefill messages)
        wanted = {min(sizes, key=lambda s, t=t: abs(s - t)) for t in (2**k for k in range(14, 27, 2))}
        for r in ours:
            if int(r["size"]) in wanted:
                add(gpu=GPUS[g], op="all_reduce", bytes=int(r["size"]), workers=int(r["num_workers"]),
                    ms=float(r["time_stats.all_reduce.median"]))
    return rows


# The model on each point ------------------------------------------------------------------


def _hw(gpu_name: str, constants: StepTimeConstants) -> Hardware:
    gpu = get_gpu(gpu_name)
    return Hardware(gpu.peak_flops(2), gpu.hbm_bandwidth_bytes_s, constants, gpu.interconnect)


def _shape(row: dict[str, str]) -> StepTimeModel:
    gpu = get_gpu(row["gpu"])
    return StepTimeModel(get_preset(row["model"]), gpu, 2, 2, int(row["tp"]))


def modelled_ms(row: dict[str, str], c: StepTimeConstants) -> float:
    op, hw = row["op"], _hw(row["gpu"], c)
    if op == "all_reduce":
        return hw.interconnect.all_reduce_s(float(row["bytes"]), int(row["workers"])) * 1e3
    sm = _shape(row)
    t = int(row["tokens"] or 0)
    if op in GEMM_OPS:
        k, n = sm.layer_gemms[list(GEMM_OPS).index(op)]
        return gemm_s(c, hw, t, k, n, 2, 2) * 1e3
    if op == "elementwise":
        # Vidur's ops: 2 norms, rope, activation, one add (its other add is fused in the norm).
        h = sm.model.hidden_size
        moved = t * 2 * (4 * h + 2 * (sm.q_dim + sm.kv_dim) + 3 * sm.inter + 3 * h)
        return elementwise_s(c, hw, 5, moved) * 1e3
    if op == "attn_decode":
        b, ctx = int(row["batch"]), int(row["context"])
        return attention_decode_s(c, hw, b, b * ctx * sm.kv_layer_token_bytes) * 1e3
    if op == "attn_prefill":
        s = int(row["context"])
        pairs = t * (s - t) + t * (t + 1) // 2
        return (attention_prefill_s(c, hw, t, sm.attention_flops_per_pair * pairs)
                + s * sm.kv_layer_token_bytes / hw.hbm_bandwidth_bytes_s) * 1e3
    raise ValueError(op)


def load_points() -> list[dict[str, str]]:
    with POINTS.open(encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def error_table(points: list[dict[str, str]]) -> list[tuple[str, str, int, float, float]]:
    groups: dict[tuple[str, str], list[float]] = {}
    for row in points:
        c = get_gpu(row["gpu"]).constants
        err = modelled_ms(row, c) / float(row["ms"]) - 1
        op = "gemm" if row["op"] in GEMM_OPS else row["op"]
        groups.setdefault((row["gpu"], op), []).append(err)
    return [(g, op, len(e), float(np.mean(np.abs(e))), float(np.max(np.abs(e))))
            for (g, op), e in sorted(groups.items())]


def old_roofline_layer_ms(sm: StepTimeModel, query_lens: list[int], seq_lens: list[int]) -> float:
    """kvbench's model before the step-time model, per layer and per GPU, without its 1 ms:
    max(FLOPs / (peak x 0.5), bytes / (bandwidth x 0.8)), new tokens' KV counted twice."""
    gpu = sm.gpu
    tokens = sum(query_lens)
    pairs = sum(q * (s - q) + q * (q + 1) // 2 for q, s in zip(query_lens, seq_lens, strict=True))
    weights = sum(k * n for k, n in sm.layer_gemms)
    flops = 2 * tokens * weights + sm.attention_flops_per_pair * pairs
    moved = weights * 2 + sm.kv_layer_token_bytes * (sum(seq_lens) + tokens)
    return max(flops / (gpu.peak_flops(2) * 0.5), moved / (gpu.hbm_bandwidth_bytes_s * 0.8)) * 1e3


def step_table(points: list[dict[str, str]]) -> list[tuple[str, float, float, float]]:
    """Llama-2-70B, TP 2, A100: whole layers, sum of the measured ops vs the model's layer."""
    idx = {(r["op"], r["tokens"], r["batch"], r["context"], r["tp"], r["model"], r["gpu"],
            r["bytes"], r["workers"]): float(r["ms"]) for r in points}

    def get(op: str, tokens: int | str = "", batch: int | str = "", ctx: int | str = "",
            tp: str = "2", model: str = "llama-2-70b", gpu: str = "a100-80gb",
            nbytes: int | str = "", workers: int | str = "") -> float | None:
        return idx.get((op, str(tokens), str(batch), str(ctx), tp, model, gpu, str(nbytes),
                        str(workers)))

    gpu = get_gpu("a100-80gb")
    sm = StepTimeModel(get_preset("llama-2-70b"), gpu, 2, 2, 2)
    out = []
    for b, ctx in ((1, 1024), (32, 1024), (64, 2048), (128, 1024), (128, 4032)):
        ops = [get(op, tokens=b, tp="2") for op in (*GEMM_OPS, "elementwise")]
        att = get("attn_decode", batch=b, ctx=ctx)
        if None in ops or att is None:
            continue
        ar = 2 * gpu.interconnect.all_reduce_s(b * 8192 * 2, 2) * 1e3  # no exact size measured
        measured = sum(ops) + att + ar
        cost = sm.cost([1] * b, [ctx] * b, b)
        modelled = sum(v for k, v in cost.parts_ms().items()
                       if k not in ("lm_head", "cpu_overhead", "kv_write")) / 80
        modelled -= cost.parts_ms()["elementwise"] / 80 - modelled_ms(
            {"op": "elementwise", "gpu": "a100-80gb", "model": "llama-2-70b", "tp": "2",
             "tokens": str(b)}, gpu.constants)
        old = old_roofline_layer_ms(sm, [1] * b, [ctx] * b)
        out.append((f"decode {b} x {ctx}", measured, modelled, old))
    for t in (512, 2048):
        ops = [get(op, tokens=t, tp="2") for op in (*GEMM_OPS, "elementwise")]
        att = get("attn_prefill", tokens=t, ctx=t)
        if None in ops or att is None:
            continue
        ar = 2 * gpu.interconnect.all_reduce_s(t * 8192 * 2, 2) * 1e3
        measured = sum(ops) + att + ar
        cost = sm.cost([t], [t], 1)
        modelled = sum(v for k, v in cost.parts_ms().items()
                       if k not in ("lm_head", "cpu_overhead", "kv_write")) / 80
        modelled -= cost.parts_ms()["elementwise"] / 80 - modelled_ms(
            {"op": "elementwise", "gpu": "a100-80gb", "model": "llama-2-70b", "tp": "2",
             "tokens": str(t)}, gpu.constants)
        old = old_roofline_layer_ms(sm, [t], [t])
        out.append((f"prefill {t}", measured, modelled, old))
    return out


# Fitting ----------------------------------------------------------------------------------


def _rel_lstsq(features: list[list[float]], measured: list[float]) -> np.ndarray:
    a = np.array(features, dtype=float) / np.array(measured)[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones(len(measured)), rcond=None)
    return np.maximum(coef, 0.0)


def fit(points: list[dict[str, str]], gpu_name: str) -> StepTimeConstants:
    c = get_gpu(gpu_name).constants
    gpu = get_gpu(gpu_name)
    rows = [r for r in points if r["gpu"] == gpu_name]
    gemm = [r for r in rows if r["op"] in GEMM_OPS]
    best = (math.inf, c)
    for e_max in np.arange(0.55, 0.96, 0.05):
        for half in (0, 10, 20, 30, 40, 60, 80, 120):
            for e_bw in np.arange(0.6, 0.96, 0.05):
                for launch in (0, 2e-6, 4e-6, 6e-6, 8e-6):
                    trial = replace(c, gemm_peak_efficiency=round(float(e_max), 2),
                                    gemm_half_tokens=float(half),
                                    gemm_bandwidth_efficiency=round(float(e_bw), 2),
                                    gemm_launch_s=launch)
                    err = float(np.mean([abs(math.log(modelled_ms(r, trial) / float(r["ms"])))
                                         for r in gemm]))
                    if err < best[0]:
                        best = (err, trial)
    c = best[1]
    bw, peak = gpu.hbm_bandwidth_bytes_s, gpu.peak_flops(2)
    elt = [r for r in rows if r["op"] == "elementwise"]
    if elt:
        feats, ms = [], []
        for r in elt:
            sm = _shape(r)
            t, h = int(r["tokens"]), sm.model.hidden_size
            moved = t * 2 * (4 * h + 2 * (sm.q_dim + sm.kv_dim) + 3 * sm.inter + 3 * h)
            feats.append([5e3, moved / bw * 1e3])
            ms.append(float(r["ms"]))
        floor, inv = _rel_lstsq(feats, ms)
        c = replace(c, elementwise_floor_s=float(floor),
                    elementwise_bandwidth_efficiency=float(min(1.0, 1 / inv)))
    dec = [r for r in rows if r["op"] == "attn_decode"]
    if dec:
        feats, ms = [], []
        for r in dec:
            sm = _shape(r)
            b, ctx = int(r["batch"]), int(r["context"])
            feats.append([1e3, b * 1e3, b * ctx * sm.kv_layer_token_bytes / bw * 1e3])
            ms.append(float(r["ms"]))
        floor, per_seq, inv = _rel_lstsq(feats, ms)
        c = replace(c, attn_decode_floor_s=float(floor), attn_decode_per_seq_s=float(per_seq),
                    attn_decode_bandwidth_efficiency=float(min(1.0, 1 / inv)))
    pf = [r for r in rows if r["op"] == "attn_prefill"]
    if pf:
        feats, ms = [], []
        for r in pf:
            sm = _shape(r)
            t, s = int(r["tokens"]), int(r["context"])
            pairs = t * (s - t) + t * (t + 1) // 2
            kv_read = s * sm.kv_layer_token_bytes / bw * 1e3
            feats.append([1e3, t * 1e3, sm.attention_flops_per_pair * pairs / peak * 1e3])
            ms.append(float(r["ms"]) - kv_read)
        floor, per_tok, inv = _rel_lstsq(feats, ms)
        c = replace(c, attn_prefill_floor_s=float(floor), attn_prefill_per_token_s=float(per_tok),
                    attn_prefill_efficiency=float(min(1.0, 1 / inv)))
    return c


def fit_interconnect(points: list[dict[str, str]], gpu_name: str) -> tuple[float, float, float]:
    rows = [r for r in points if r["gpu"] == gpu_name and r["op"] == "all_reduce"
            and int(r["bytes"]) >= 16384]
    feats, ms = [], []
    for r in rows:
        n, size = int(r["workers"]), float(r["bytes"])
        steps = 2 * (n - 1)
        feats.append([steps / n * size / 1e9 * 1e3, steps * 1e-6 * 1e3, 1e-6 * 1e3])
        ms.append(float(r["ms"]))
    inv_gbs, lat_us, call_us = _rel_lstsq(feats, ms)
    return 1e9 / inv_gbs, lat_us * 1e-6, call_us * 1e-6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extract", metavar="GITDIR", help="git dir of a microsoft/vidur clone")
    parser.add_argument("--fit", action="store_true", help="also print constants fitted here")
    args = parser.parse_args(argv)
    if args.extract:
        rows = extract(args.extract)
        with POINTS.open("w", encoding="utf-8", newline="") as f:
            f.write("# medians from microsoft/vidur data/profiling (see "
                    "scripts/simulator_calibration.py); ms per layer or per collective\n")
            writer = csv.DictWriter(f, FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {len(rows)} points to {POINTS}")
    points = load_points()
    print("| GPU | operation | points | mean abs error | max abs error |")
    print("|-----|-----------|-------:|---------------:|--------------:|")
    for g, op, n, mean, worst in error_table(points):
        print(f"| {g} | {op} | {n} | {mean:.1%} | {worst:.1%} |")
    print()
    print("Llama-2-70B, tensor parallel 2, A100-80GB: one decoder layer (ms)")
    print("| step | measured ops | model | error | old roofline | its error |")
    print("|------|-------------:|------:|------:|-------------:|----------:|")
    for name, measured, model, old in step_table(points):
        print(f"| {name} | {measured:.3f} | {model:.3f} | {model / measured - 1:+.1%} "
              f"| {old:.3f} | {old / measured - 1:+.1%} |")
    if args.fit:
        for g in GPUS.values():
            print(f"\nfitted {g}: {fit(points, g).to_dict()}")
            bw, lat, call = fit_interconnect(points, g)
            print(f"fitted {g} interconnect: {bw / 1e9:.0f} GB/s bus bandwidth, "
                  f"{lat * 1e6:.2f} us per hop, {call * 1e6:.2f} us per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
