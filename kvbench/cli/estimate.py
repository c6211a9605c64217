"""`kvbench estimate`: KV-cache sizing arithmetic, exact and explained, and modelled step times.

`--step decode:BxCTX` / `--step prefill:TOKENS` prints the simulator's modelled time of each
step and its parts on `--gpu` (or `--gpu-spec FILE.toml`) x `--tensor-parallel-size`.
Nothing is run."""

from __future__ import annotations

import json
from typing import Any

import click

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE
from kvbench.errors import KvbenchInputError
from kvbench.models.hub import with_revision
from kvbench.models.resolve_config import resolve_model_config
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpus import DEFAULT_GPU, GPU_PRESETS
from kvbench.sizing.checkpoint import resolve_checkpoint
from kvbench.sizing.estimate import EstimateInputs, estimate_kv, format_estimate
from kvbench.sizing.host_tier_estimate import estimate_host_tier, format_host_tier
from kvbench.sizing.step_estimate import estimate_steps, format_steps, parse_step
from kvbench.sizing.vllm_versions import CURRENT
from kvbench.units import parse_size_bytes

HELP = (
    "KV-cache sizing arithmetic, exact and explained: bytes per token, per request and in "
    "total, the KV budget left next to the weights, and how many requests fit per strategy "
    "(contiguous reserving the max model length vs paged at the mean length). "
    "With a model and --gpu (or --gpu-memory) the budget is the KV pool vLLM would "
    "allocate at the same flags, term by term as its memory profiler subtracts them. "
    "With --step: the simulator's modelled time of each step, part by part. "
    "Nothing is run."
)


def _pair(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise KvbenchInputError("--compare-kv-utilization takes two utilizations FROM,TO such "
                                f"as 0.4,0.9 or 40%,90%, got {text!r}")
    return parts[0], parts[1]


def _size(text: str | None) -> int | None:
    return parse_size_bytes(text) if text is not None else None


@click.command("estimate", help=HELP)
@click.option("--model", metavar="PRESET|FOLDER|ORG/NAME",
              help="A preset (e.g. llama-2-13b), a local folder with a Hugging Face config.json, "
                   "or a Hugging Face model id (its config.json from the hub cache, fetched "
                   "unless there).")
@click.option("--revision", help="The hub revision of a model id (branch, tag or commit).")
@click.option("--layers", "num_layers", type=int, help="Number of layers (instead of --model).")
@click.option("--kv-heads", "num_kv_heads", type=int,
              help="Number of KV heads (instead of --model).")
@click.option("--head-dim", type=int, help="Head dimension (instead of --model).")
@click.option("--kv-cache-dtype", "--kv-dtype", "kv_cache_dtype", default="auto",
              show_default=True, metavar="auto|fp32|bf16|fp16|fp8",
              help="KV element type; auto stores K/V in the weights --dtype (as vLLM does).")
@click.option("--dtype", default="auto", show_default=True, metavar="auto|bf16|fp16|fp32",
              help="Weights and activations dtype; auto: the checkpoint's torch_dtype (a "
                   "preset: bf16).")
@click.option("--context", type=int,
              help="Tokens per request (prompt + output). Default: --max-model-len.")
@click.option("--concurrency", type=int, default=1, show_default=True,
              help="Concurrent requests for the total.")
@click.option("--block-size", type=int,
              help="Round each request up to blocks of this many tokens; the paged strategy "
                   f"uses it (default {DEFAULT_BLOCK_SIZE} there).")
@click.option("--max-model-len", type=int,
              help="Tokens reserved per request by contiguous (reserve max). Default: the "
                   "model's max_position_embeddings, or --context.")
@click.option("--mean-len", type=int,
              help="Mean request length (tokens) for the paged strategy. Default: --context.")
@click.option("--gpu-memory", metavar="SIZE",
              help="GPU memory as CUDA reports it, e.g. 79.19GiB (instead of --gpu's).")
@click.option("--gpu-memory-utilization", "--gpu-util", "gpu_memory_utilization", metavar="F",
              help="Share of the GPU memory vLLM may use, e.g. 0.92 or 92%.  [default: "
                   f"vLLM's, {CURRENT.default_utilization} from 0.21, 0.9 before; explicit "
                   "shapes: 0.9]")
@click.option("--weights-memory", metavar="SIZE",
              help="One GPU's weights, instead of the checkpoint's as vLLM loads them.")
@click.option("--kv-memory", metavar="SIZE",
              help="The KV budget itself (instead of --gpu-memory and weights).")
@click.option("--compare-kv-utilization", metavar="FROM,TO",
              help="Effective capacity of the KV budget at two KV utilizations (token bytes / "
                   "held bytes), e.g. 0.4,0.9: how many times more KV fits.")
@click.option("--step", "steps", multiple=True, metavar="decode:BxCTX|prefill:TOKENS",
              help="Print the modelled time of this step (repeatable), e.g. decode:32x1024 (32 "
                   "sequences at 1,024 tokens) or prefill:2048. Needs --model.")
@click.option("--gpu", metavar="PRESET",
              help=f"GPU preset ({', '.join(GPU_PRESETS)}): its memory as CUDA reports it "
                   f"sizes vLLM's start-up; also --step's GPU [--step default: {DEFAULT_GPU}].")
@click.option("--max-num-seqs", type=int,
              help="vLLM's --max-num-seqs: rows of the profile's sampler run [default: vLLM's "
                   "for the GPU: 1024 on >= 70 GiB but A100, else 256].")
@click.option("--max-num-batched-tokens", type=int,
              help="vLLM's --max-num-batched-tokens: the profile run's forward [default: "
                   "vLLM's for the GPU: 8192 on >= 70 GiB but A100, else 2048].")
@click.option("--enforce-eager", is_flag=True,
              help="vLLM's --enforce-eager: no CUDA graphs to subtract.")
@click.option("--pipeline-parallel-size", "-pp", type=int, default=1, show_default=True,
              help="vLLM's pipeline stages: each sizes its own KV pool; the smallest sets the "
                   "blocks.")
@click.option("--quantization", metavar="fp8",
              help="vLLM's --quantization fp8: quantize a float checkpoint as it loads (a "
                   "quantized checkpoint's config.json says its own scheme).")
@click.option("--vllm-version", metavar="X.Y",
              help="The vLLM release whose memory profile to model [default: the current, "
                   f"{CURRENT.name}+]; docs/estimate.md lists what changed.")
@click.option("--gpu-spec", metavar="FILE.toml",
              help="Your own GPU for --step (see docs/simulator.md), instead of --gpu.")
@click.option("--tensor-parallel-size", "-tp", type=int, default=1, show_default=True,
              help="GPUs the model is split over: --gpu-memory, the weights' share, the budget "
                   "and KV per token are then one GPU's, capacities the group's; and for --step.")
@click.option("--kv-offload", metavar="SIZE",
              help="A host KV tier of SIZE (the TP group's host memory, as vLLM's "
                   "--kv-offloading-size): tokens per tier, the cache's capacity, and one "
                   "full-context request's load time over the GPU's host link against "
                   "recomputing it (with --model and --gpu or --gpu-spec).")
@click.option("--json", "as_json", is_flag=True, help="Print only JSON (for scripts).")
def estimate_command(model: str | None, revision: str | None, dtype: str,
                     steps: tuple[str, ...], gpu: str | None, gpu_spec: str | None,
                     kv_offload: str | None, as_json: bool, **asked: Any) -> None:
    if revision is not None:
        model = with_revision(model or "", revision)
    try:  # vLLM's refusal to start among the input errors: one line, exit 2
        if steps:
            if model is None:
                raise KvbenchInputError("--step needs --model (a preset or a folder)")
            result = estimate_steps(
                resolve_model_config(model), gpu_spec or gpu or DEFAULT_GPU,
                [parse_step(s) for s in steps],
                tensor_parallel_size=asked["tensor_parallel_size"],
                dtype="bf16" if dtype == "auto" else dtype,
                kv_cache_dtype=asked["kv_cache_dtype"])
            click.echo(json.dumps(result, indent=2) if as_json else format_steps(result))
            return
        quantization = asked.pop("quantization")
        checkpoint = resolve_checkpoint(model, quantization) if model is not None else None
        if dtype == "auto":  # vLLM's: the checkpoint's torch_dtype, float32 served as bf16
            dtype = (checkpoint.dtype if checkpoint is not None else None) or "bf16"
            dtype = "bf16" if dtype == "fp32" else dtype
        sizes = {k: _size(asked.pop(k)) for k in ("gpu_memory", "weights_memory", "kv_memory")}
        compare = _pair(asked.pop("compare_kv_utilization"))
        est = estimate_kv(EstimateInputs(
            **asked, **sizes, dtype=dtype, compare_utilization=compare,
            gpu=get_gpu(gpu) if gpu is not None else None,
            quantization=checkpoint.quantization if checkpoint is not None else None,
            model=checkpoint.model if checkpoint is not None else None))
        host = None
        if kv_offload is not None and est.state_pages is not None:
            raise KvbenchInputError(
                "--kv-offload sizes a host tier of KV blocks; a state-space hybrid's states "
                "are not offloaded (not modelled)")
        if kv_offload is not None:
            host = estimate_host_tier(
                est, parse_size_bytes(kv_offload),
                checkpoint.model if checkpoint is not None else None,
                get_gpu(gpu_spec or gpu) if (gpu_spec or gpu) else None, dtype,
                asked["max_num_batched_tokens"])
    except KvbenchInputError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        out = est.to_dict()
        if host is not None:
            out["host_tier"] = host.to_dict()
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(format_estimate(est))
    if host is not None:
        click.echo("\n" + format_host_tier(host))
