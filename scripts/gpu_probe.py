"""One model load, four questions a first GPU slot must answer (scripts/gpu_check.sh's probe).

1. load:   how long the model takes to load (random weights are drawn on the device).
2. budget: the KV budget `--gpu-memory-utilization` leaves, with the memory profile's weights
           and activation peak next to the up-front memory check's estimate.
3. decode: eager against CUDA-graph decode on one batch: decode step time, tokens equal, Triton
           compiles and graph captures during the measured steps (both should be 0).
4. arenas: engines built one after another, graphs on: is each arena freed when its engine
           is let go (weak references, no garbage collection), and the device memory after.

Every section is written to `--out` (JSON) as soon as it finishes, so a probe stopped by its
time limit keeps what it measured. Off CUDA (the check script's dry run) the CUDA-only figures
are null and `skipped` says so.

    python scripts/gpu_probe.py --out probe.json [--model llama-3-8b] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import torch

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.execution.kv_budget import profile_cuda_memory
from kvbench.models.memory_check import memory_need
from kvbench.models.resolve_config import resolve_model_config


def triton_compiles() -> int | None:
    """Compiled variants held by kvbench's Triton kernels (None where Triton cannot tell)."""
    try:
        from triton.runtime.jit import JITFunction  # triton: only where kernels run
    except ImportError:
        return None
    from kvbench.kernels import triton_decode, triton_kv_write, triton_mla_decode, triton_prefill

    total = 0
    for module in (triton_decode, triton_kv_write, triton_prefill, triton_mla_decode):
        for value in vars(module).values():
            caches = getattr(value, "device_caches", None) if isinstance(value, JITFunction) \
                else None
            if caches is None:
                continue
            try:  # {device: (kernel cache, ...)} in Triton 3.x
                total += sum(len(entry[0]) for entry in caches.values())
            except (TypeError, IndexError):
                return None
    return total


def requests(num: int, prompt_len: int, output_len: int, vocab: int) -> list[Request]:
    return [Request(i, 0.0, tuple((i * 7919 + j * 31) % vocab for j in range(prompt_len)),
                    output_len) for i in range(num)]


def decode_run(config: EngineConfig, reqs: list[Request], cache: dict) -> dict[str, Any]:
    """One batch to completion: every request arrives at once, so after the first steps
    (the prefills) every step is a decode of the whole batch."""
    built = build_engine(config, model_cache=cache)
    engine = built.engine
    graphs = engine.executor.graphs
    for request in reqs:
        engine.add_request(request)
    step_s = []
    compiles_before = triton_compiles()
    while engine.has_unfinished():
        start = time.perf_counter()
        engine.step()
        step_s.append(time.perf_counter() - start)
    compiles_after = triton_compiles()
    tokens = [list(seq.token_ids) for r in sorted(engine.sequences)
              for seq in engine.sequences[r]]
    decode = step_s[len(reqs):] or step_s  # prefills first (they fit one budget each)
    return {
        "steps": len(step_s),
        "decode_step_ms_p50": 1e3 * statistics.median(decode),
        "decode_step_ms_p99": 1e3 * sorted(decode)[int(0.99 * (len(decode) - 1))],
        "compile_s_at_build": built.compile_s,
        "graphs_captured_at_build": None if graphs is None else len(graphs.graphs),
        "graph_captures_during_run": None if graphs is None else graphs.late_captures,
        "triton_compiles_during_run": (None if compiles_before is None
                                       else compiles_after - compiles_before),
        "kv_budget_bytes": built.kv_budget_bytes,
        "tokens": tokens,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=4096)
    args = parser.parse_args(argv)
    out = Path(args.out)
    cuda = torch.device(args.device).type == "cuda"
    report: dict[str, Any] = {"model": args.model, "device": args.device, "dtype": args.dtype,
                              "skipped": [] if cuda else ["CUDA-only figures: no CUDA (dry run)"]}

    def write(section: str) -> None:
        out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"probe: {section}: {json.dumps(report.get(section))}", flush=True)

    base = EngineConfig(model=args.model, device=args.device, dtype=args.dtype,
                        max_model_len=args.max_model_len, max_num_seqs=args.num_requests,
                        kv_memory=None if cuda else "16MiB",
                        attention_backend="triton" if cuda else "torch")
    cache: dict = {}
    model_config = resolve_model_config(args.model)

    # 1. load
    start = time.perf_counter()
    built = build_engine(base, model_cache=cache)
    report["load"] = {"build_s": time.perf_counter() - start}
    write('load')

    # 2. budget
    budget = built.kv_budget_bytes
    max_batched = max(2048, args.max_model_len)
    estimate = memory_need(model_config, args.dtype.replace("bfloat16", "bf16"), max_batched,
                           args.num_requests)
    report["budget"] = {"kv_budget_bytes": budget, "max_num_batched_tokens": max_batched,
                        "estimated_activation_bytes": estimate.activation_bytes}
    del built
    if cuda:
        model = next(iter(cache.values()))[0]
        measured = profile_cuda_memory(model, torch.device(args.device), max_batched)
        report["budget"].update(total_bytes=measured.total_bytes,
                                weight_bytes=measured.weight_bytes,
                                profiled_activation_bytes=measured.activation_bytes)
    write('budget')

    # 3. decode: eager, then graphs, on the one budget
    reqs = requests(args.num_requests, args.prompt_len, args.output_len, model_config.vocab_size)
    pinned = EngineConfig(**{**vars(base), "kv_memory": budget})
    eager = decode_run(pinned, reqs, cache)
    report["decode"] = {"eager": {k: v for k, v in eager.items() if k != "tokens"}}
    write('decode')
    if cuda:
        graphs = decode_run(EngineConfig(**{**vars(pinned), "enforce_eager": False}), reqs, cache)
        report["decode"]["graphs"] = {k: v for k, v in graphs.items() if k != "tokens"}
        differ = sum(a != b for a, b in zip(eager["tokens"], graphs["tokens"], strict=True))
        report["decode"]["tokens_equal"] = differ == 0
        report["decode"]["sequences_differing"] = differ
    else:
        report["skipped"].append("decode graphs: CUDA only")
    write('decode')

    # 4. arenas: each engine's arena gone once it is let go, graphs on
    # (few, short sequences: a handful of graphs each; the arena is the full budget)
    arenas: list[dict[str, Any]] = []
    report["arenas"] = arenas
    for strategy in ("paged", "contiguous", "paged"):
        config = EngineConfig(**{**vars(pinned), "strategy": strategy, "enforce_eager": False,
                                 "max_num_seqs": 4, "max_model_len": 512})
        try:
            engine_built = build_engine(config, model_cache=cache)
        except torch.OutOfMemoryError as err:  # the previous arena was kept
            arenas.append({"strategy": strategy, "out_of_memory": str(err).splitlines()[0]})
            break
        ref = weakref.ref(engine_built.engine.executor.arena)
        has_graphs = engine_built.engine.executor.graphs is not None
        del engine_built
        arenas.append({"strategy": strategy, "graphs": has_graphs,
                       "arena_alive_after_release": ref() is not None,
                       "allocated_bytes_after_release":
                           torch.cuda.memory_allocated(args.device) if cuda else None})
    write('arenas')
    return 0


if __name__ == "__main__":
    sys.exit(main())
