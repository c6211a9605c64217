"""kvbench against transformers' own continuous batching: same weights, requests and KV budget.

Replays the same ShareGPT request lengths (kvbench's `sharegpt` workload, `--seed`) offline
through kvbench's engine (paged, continuous batching) and through transformers'
`ContinuousBatchingManager` (the engine behind `generate_batch`) with a paged cache of the
same byte budget, each request's own `max_new_tokens`, EOS off, on one torch thread. Both
run the `tiny` preset's random weights (transformers gets kvbench's tensors, not a copy).
The sides alternate (kvbench, transformers, kvbench, ...), so a slow spell on a shared
machine hits both; the script prints each repeat's output tokens per second, the medians and
their ratio (kvbench / transformers), and the load before and after (`os.getloadavg`).

    python scripts/peer_transformers_cb.py                   # 64 requests, 16 MiB, 3 repeats
    python scripts/peer_transformers_cb.py --num-requests 16 --repeats 1   # a quick check
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.execution.transformers_engine import import_transformers, to_transformers
from kvbench.units import parse_size_bytes
from kvbench.workloads.load import load_workload

MODEL = "tiny"
MAX_MODEL_LEN = 2048


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--kv-memory", default="16MiB")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def kvbench_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(model=MODEL, strategy="paged", batching="continuous", dtype="float32",
                        kv_memory=args.kv_memory, max_model_len=MAX_MODEL_LEN,
                        max_num_seqs=args.max_num_seqs)


def run_kvbench(config: EngineConfig, requests, model_cache: dict) -> tuple[float, int]:
    """(seconds, output tokens) of one offline run of every request."""
    engine = build_engine(config, model_cache=model_cache).engine
    start = time.perf_counter()
    for request in requests:
        engine.add_request(request)
    engine.run_to_completion()
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(group[0].token_ids) - group[0].prompt_len
                        for group in engine.sequences.values())


def run_transformers(hf_model, cb_config, requests) -> tuple[float, int]:
    """(seconds, output tokens) of one offline run through a fresh continuous-batching
    manager."""
    manager = hf_model.init_continuous_batching(continuous_batching_config=cb_config)
    manager.start()
    start = time.perf_counter()
    for request in requests:
        manager.add_request(list(request.prompt_token_ids), request_id=str(request.request_id),
                            max_new_tokens=request.output_len)
    tokens = 0
    for _ in requests:
        result = manager.get_result(timeout=3600)
        if result is None:
            raise RuntimeError("transformers' continuous batching stopped before every request")
        tokens += len(result.generated_tokens)
    elapsed = time.perf_counter() - start
    manager.stop(block=True)
    return elapsed, tokens


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    transformers = import_transformers()
    config = kvbench_config(args)
    model_cache: dict = {}
    built = build_engine(config, model_cache=model_cache)
    decoder = built.engine.executor.model
    model_config = decoder.config
    workload = load_workload("sharegpt", args.num_requests, args.seed, model_config.vocab_size,
                             max_model_len=MAX_MODEL_LEN)
    requests = workload.requests
    hf_model = to_transformers(decoder, MODEL, torch.device("cpu"))
    hf_model.generation_config.do_sample = False
    hf_model.generation_config.max_new_tokens = max(r.output_len for r in requests)
    # The same bytes of KV: transformers' block is `page_size` tokens of every layer.
    kv_bytes = parse_size_bytes(args.kv_memory)
    bytes_per_token = (2 * model_config.num_layers * model_config.num_kv_heads
                       * model_config.head_dim * 4)
    page_size = config.block_size
    cb_config = transformers.ContinuousBatchingConfig(
        page_size=page_size, num_blocks=kv_bytes // (bytes_per_token * page_size),
        max_batch_tokens=max(2048, MAX_MODEL_LEN), max_requests_per_batch=args.max_num_seqs,
        use_cuda_graph=False, allow_block_sharing=False,
    )
    print(f"{len(requests)} sharegpt requests (seed {args.seed}), "
          f"{sum(r.output_len for r in requests)} output tokens, KV {args.kv_memory} "
          f"({kv_bytes // bytes_per_token} tokens), model {MODEL}, 1 thread; "
          f"load before {os.getloadavg()[0]:.2f}")
    kv_rates, hf_rates = [], []
    for repeat in range(1, args.repeats + 1):
        kv_s, kv_tokens = run_kvbench(config, requests, model_cache)
        with torch.inference_mode():
            hf_s, hf_tokens = run_transformers(hf_model, cb_config, requests)
        kv_rates.append(kv_tokens / kv_s)
        hf_rates.append(hf_tokens / hf_s)
        print(f"repeat {repeat}: kvbench {kv_rates[-1]:,.1f} tok/s ({kv_tokens} tokens), "
              f"transformers {hf_rates[-1]:,.1f} tok/s ({hf_tokens} tokens), "
              f"ratio {kv_rates[-1] / hf_rates[-1]:.2f}x")
    ratios = [k / h for k, h in zip(kv_rates, hf_rates, strict=True)]
    print(f"median: kvbench {statistics.median(kv_rates):,.1f} tok/s, transformers "
          f"{statistics.median(hf_rates):,.1f} tok/s, ratio {statistics.median(ratios):.2f}x "
          f"[{min(ratios):.2f}-{max(ratios):.2f}]; load after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
