"""A vLLM start-up in words: the waterfall from total memory to KV cache, then vLLM's own log
lines ("Available KV cache memory", "GPU KV cache size", "Maximum concurrency"), printed as
vLLM would (docs/estimate.md shows one).
"""

from __future__ import annotations

from kvbench.sizing.vllm_kv_cache import GiB
from kvbench.sizing.vllm_startup import StageMemory, VllmStartup


def vllm_lines(startup: VllmStartup) -> list[str]:
    """vLLM's start-up lines, as it prints them (or its refusal)."""
    lines = [f"Available KV cache memory: {stage.available / GiB:.2f} GiB"
             + (f" (pipeline stage {stage.stage})" if len(startup.stages) > 1 else "")
             for stage in startup.stages]
    if startup.pool is None:
        return [*lines, f"ValueError: {startup.refusal}"]
    pool = startup.pool
    return [*lines,
            f"GPU KV cache size: {pool.tokens:,} tokens",
            f"Maximum concurrency for {pool.max_model_len:,} tokens per request: "
            f"{pool.max_concurrency:.2f}x"]


def waterfall_rows(startup: VllmStartup, stage: StageMemory) -> list[tuple[str, int, str]]:
    """(term, bytes, how) from total memory down to the KV cache, for one GPU of `stage`."""
    rows = [
        ("total memory", stage.total, f"{startup.memory_source} ({startup.gpu or '--gpu-memory'})"),
        ("requested", stage.requested, f"total x --gpu-memory-utilization "
                                       f"{float(startup.utilization):g}"),
        ("- weights", stage.weights, "as loaded" if startup.weights_source == "loaded"
         else "--weights-memory"),
        ("- peak activation", stage.activation, _activation_how(startup, stage)),
        ("- non-torch memory", stage.non_torch,
         "NCCL / all-reduce buffers and cuBLAS workspace" if startup.tensor_parallel_size > 1
         else "cuBLAS workspace and the like"),
    ]
    piecewise, full = startup.cuda_graph_sizes
    if stage.cuda_graphs_subtracted:
        rows.append(("- CUDA graphs", stage.cuda_graphs,
                     f"{piecewise} piecewise + {full} full graphs, estimated"))
    rows.append(("= available KV cache", stage.available, "vLLM's 'Available KV cache memory'"))
    pool = startup.pool
    if pool is not None and stage.available > 0:
        held = pool.num_blocks * pool.block_bytes
        how = f"{pool.num_blocks:,} blocks x {pool.block_bytes:,} B"
        if pool.padding_layers:
            how += (f"; {pool.padding_layers} padding layer(s) in {pool.num_groups} groups' "
                    "equal pages")
        rows.append(("  in whole blocks", held, how))
    return rows


def _activation_how(startup: VllmStartup, stage: StageMemory) -> str:
    parts = [f"forward of {startup.max_num_batched_tokens:,} tokens {stage.forward / GiB:.2f}"]
    if stage.sampler:
        parts.append(f"sampler over {min(startup.max_num_seqs, startup.max_num_batched_tokens):,}"
                     f" seqs {stage.sampler / GiB:.2f}")
    text = "max(" + ", ".join(parts) + ") GiB"
    if stage.moe_workspace:
        text += f" + MoE workspace {stage.moe_workspace / GiB:.2f} GiB"
    if stage.request_buffers >= GiB // 100:
        text += f" + block tables {stage.request_buffers / GiB:.2f} GiB"
    return text


def format_vllm_startup(startup: VllmStartup) -> str:
    """The waterfall per GPU (each pipeline stage), then vLLM's lines."""
    tp, pp = startup.tensor_parallel_size, startup.pipeline_parallel_size
    group = f"TP {tp} x PP {pp}" if pp > 1 else f"TP {tp}"
    lines = [f"vLLM {startup.release.name}+ start-up, per GPU ({group}; max_num_seqs "
             f"{startup.max_num_seqs:,}, max_num_batched_tokens "
             f"{startup.max_num_batched_tokens:,}, block size {startup.block_size}):"]
    for stage in startup.stages:
        if pp > 1:
            lines.append(f"  pipeline stage {stage.stage} ({len(stage.layers)} layers):")
        rows = waterfall_rows(startup, stage)
        width = max(len(term) for term, _, _ in rows)
        for term, value, how in rows:
            lines.append(f"  {term.ljust(width)}  {value / GiB:9.2f} GiB  {how}")
    piecewise, full = startup.cuda_graph_sizes
    stage = startup.stages[-1]
    if stage.cuda_graphs and not stage.cuda_graphs_subtracted:
        lines.append(f"  (CUDA graphs, ~{stage.cuda_graphs / GiB:.2f} GiB for {piecewise} + "
                     f"{full} graphs, are captured after the KV cache is sized: not subtracted "
                     f"before vLLM 0.21)")
    if tp * pp > 1 and startup.pool is not None:
        lines.append(f"  each of the {tp * pp} GPUs holds its share of the same "
                     f"{startup.pool.tokens:,} tokens")
    lines += ["", "as vLLM prints it:", *("  " + line for line in vllm_lines(startup))]
    return "\n".join(lines)


def format_beside_measured(startup: VllmStartup, total: int, weights: int, activation: int,
                           budget: int) -> str:
    """vLLM's start-up model beside a profile measured on the GPU (`kvbench run` on CUDA):
    the same total, then weights, activation peak and KV budget, predicted and measured.
    kvbench's engine captures no CUDA graphs before sizing and keeps no non-torch pool of
    vLLM's, so those terms are the model's alone."""
    stage = startup.stages[0]
    rows = [("total memory", total, stage.total),
            ("weights", weights, stage.weights),
            ("peak activation", activation, stage.activation),
            ("non-torch memory", None, stage.non_torch),
            ("CUDA graphs", None, stage.cuda_graphs if stage.cuda_graphs_subtracted else 0),
            ("KV budget", budget, stage.available)]
    lines = [f"KV budget: measured beside vLLM {startup.release.name}'s start-up model "
             "(per GPU, GiB):",
             f"  {'term':<18}{'measured':>10}{'vLLM model':>12}"]
    for term, measured, predicted in rows:
        shown = f"{measured / GiB:10.2f}" if measured is not None else f"{'-':>10}"
        lines.append(f"  {term:<18}{shown}{predicted / GiB:12.2f}")
    return "\n".join(lines)
