"""How much an fp8 KV cache changes the model's output: the `accuracy` section of fp8 runs.

The same requests run twice, on the same model: with the run's fp8 cache and with the
unquantized cache (`paged`, `--kv-cache-dtype auto`, i.e. the model dtype). Compared:

- generated tokens, position by position: the share of positions that agree before the first
  divergence (averaged over sequences; after a divergence the two continuations condition on
  different text, so later positions say little), and the share of all positions that agree;
- prefill logits of a sample of requests, each prompt prefilled alone through both caches:
  max and mean absolute error, next to the reference logits' scale and top-1/top-2 margin.

Random-weight models have nearly flat logits (top-1/top-2 margins of a few hundredths), so a
tiny logit error flips greedy choices that a trained model would make with a wide margin:
token agreement on them understates real-model accuracy. The logit error is the measure that
carries over; `init_std=` builds the preset with larger weights whose next token is well
determined, to measure agreement where it means something.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from typing import Any

import torch

from kvbench.build.engine_build import BuiltEngine, effective_config, keeps_fp8_cache
from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.layout import KVLayout
from kvbench.core.request import Request
from kvbench.core.step_batch import StepBatch
from kvbench.errors import KvbenchInputError
from kvbench.execution.device import resolve_device
from kvbench.models.loader import load_model, parse_dtype
from kvbench.models.presets import PRESETS

MAX_LOGIT_ROWS = 64  # prompt positions whose logits are compared, per sampled request

NOTE = (
    "Random-weight models have nearly flat logits (see prefill_top1_margin_mean), so tiny "
    "logit errors flip greedy choices: token agreement on them understates the agreement of a "
    "trained model; the logit error is the figure that carries over. Agreement is over the "
    "sampled tokens when temperature > 0 (same seeds in both runs)."
)


def measure_fp8_accuracy(
    config: EngineConfig,
    requests: list[Request],
    sample_size: int = 8,
    *,
    init_std: float | None = None,
    kv_memory: int | str | None = None,
    model_cache: dict | None = None,
) -> dict[str, Any]:
    """Run `requests` with `config`'s fp8 cache and with the unquantized cache and compare.

    `init_std` loads a preset model with weights of that standard deviation (larger than the
    default 0.02 gives peaked logits). `kv_memory` overrides the budget of both runs (default:
    the config's). Requests that do not fit either engine are left out. Engines are built one
    after the other and dropped, so the caller's own engine should be gone on a GPU.
    """
    if not keeps_fp8_cache(config):
        raise KvbenchInputError(
            f"fp8 accuracy needs an fp8 KV cache (strategy fp8 or --kv-cache-dtype fp8), got "
            f"strategy {config.strategy!r} with --kv-cache-dtype {config.kv_cache_dtype!r}"
        )
    fp8_config = effective_config(dataclasses.replace(config))
    if kv_memory is not None:
        fp8_config = dataclasses.replace(fp8_config, kv_memory=kv_memory,
                                         gpu_memory_utilization=None)
    ref_config = dataclasses.replace(fp8_config, strategy="paged", kv_cache_dtype="auto")
    cache = model_cache if model_cache is not None else {}
    if init_std is not None:
        _preload_model(fp8_config, init_std, cache)

    fp8 = _Run(fp8_config, requests, cache)
    usable = fp8.usable
    sample = _sample(usable, sample_size)
    fp8.run(usable)
    fp8_logits = [fp8.prefill_logits(r.prompt_token_ids) for r in sample]
    kv_scales = fp8.built.engine.executor.arena.scales()
    fp8.close()

    ref = _Run(ref_config, usable, cache)
    compared = ref.usable
    ref.run(compared)
    ref_logits = [ref.prefill_logits(r.prompt_token_ids) for r in sample if r in compared]
    ref_kv_dtype = str(ref.built.kv_dtype).removeprefix("torch.")
    ref.close()
    fp8_logits = [lg for lg, r in zip(fp8_logits, sample, strict=True) if r in compared]

    tokens = _token_agreement(
        [ref.outputs[r.request_id] for r in compared], [fp8.outputs[r.request_id] for r in compared]
    )
    logits = _logit_error(ref_logits, fp8_logits)
    return {
        "kv_cache_dtype": "fp8_e4m3",
        "reference_kv_cache_dtype": ref_kv_dtype,
        "reference_strategy": ref_config.strategy,
        **tokens,
        **logits,
        "temperature": config.temperature,
        "num_requests_compared": len(compared),
        "num_requests_skipped": len(requests) - len(compared),
        "init_std": init_std,
        "kv_scales": kv_scales,
        "note": NOTE,
    }


class _Run:
    """One engine over the requests that fit it."""

    def __init__(self, config: EngineConfig, requests: list[Request], cache: dict) -> None:
        self.built: BuiltEngine = build_engine(config, model_cache=cache)
        self.usable = [r for r in requests if self._fits(r)]
        self.outputs: dict[int, list[list[int]]] = {}

    def _fits(self, request: Request) -> bool:
        try:
            self.built.engine.check_request(request)
        except KvbenchInputError:
            return False
        return True

    def run(self, requests: list[Request]) -> None:
        engine = self.built.engine
        for request in requests:
            engine.add_request(dataclasses.replace(request, arrival_s=0.0))
        engine.run_to_completion()
        for request in requests:
            self.outputs[request.request_id] = [
                seq.token_ids[seq.prompt_len :] for seq in engine.sequences[request.request_id]
            ]

    def prefill_logits(self, prompt: tuple[int, ...]) -> torch.Tensor:
        """Logits `[rows, vocab]` (float32, CPU) of one prompt prefilled alone, at up to
        `MAX_LOGIT_ROWS` evenly spaced positions (the last one included)."""
        executor = self.built.engine.executor
        length = len(prompt)
        num_slots = executor.arena.num_slots
        block_size = 16 if math.ceil(length / 16) * 16 <= num_slots else 1
        layout = KVLayout(
            kind="paged",
            slot_mapping=list(range(length)),
            query_lens=[length],
            seq_lens=[length],
            block_size=block_size,
            block_tables=[list(range(math.ceil(length / block_size)))],
        )
        batch = StepBatch(list(prompt), list(range(length)), layout, 1, _rows(length))
        return executor.execute(batch).float().cpu()

    def close(self) -> None:
        self.built = None  # type: ignore[assignment]
        gc.collect()  # the next engine's arena needs this one's memory: nothing may linger
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _rows(length: int) -> list[int]:
    if length <= MAX_LOGIT_ROWS:
        return list(range(length))
    step = (length - 1) / (MAX_LOGIT_ROWS - 1)
    return sorted({round(i * step) for i in range(MAX_LOGIT_ROWS)})


def _sample(requests: list[Request], size: int) -> list[Request]:
    """`size` requests spread evenly over the list (deterministic)."""
    if size >= len(requests):
        return list(requests)
    if size <= 0:
        return []
    step = len(requests) / size
    return [requests[int(i * step)] for i in range(size)]


def _preload_model(config: EngineConfig, init_std: float, cache: dict) -> None:
    if config.model not in PRESETS:
        raise KvbenchInputError("init_std applies to preset models (random weights) only")
    device = resolve_device(config.device)
    key = (config.model, config.dtype, str(device), config.seed)
    cache[key] = load_model(config.model, dtype=parse_dtype(config.dtype), device=device,
                            seed=config.seed, init_std=init_std)


def _token_agreement(ref: list[list[list[int]]], got: list[list[list[int]]]) -> dict[str, Any]:
    prefix_shares: list[float] = []
    equal = total = 0
    for ref_samples, got_samples in zip(ref, got, strict=True):
        for a, b in zip(ref_samples, got_samples, strict=True):
            same = [x == y for x, y in zip(a, b, strict=True)]
            lead = next((i for i, s in enumerate(same) if not s), len(same))
            prefix_shares.append(lead / len(same) if same else 1.0)
            equal += sum(same)
            total += len(same)
    return {
        "greedy_agreement_prefix": (
            sum(prefix_shares) / len(prefix_shares) if prefix_shares else None
        ),
        "greedy_agreement_overall": equal / total if total else None,
        "num_sequences_compared": len(prefix_shares),
        "num_tokens_compared": total,
    }


def _logit_error(ref: list[torch.Tensor], got: list[torch.Tensor]) -> dict[str, Any]:
    if not ref:
        return {
            "prefill_logit_abs_err_max": None, "prefill_logit_abs_err_mean": None,
            "prefill_logit_abs_mean": None, "prefill_top1_agreement": None,
            "prefill_top1_agreement_by_margin_quartile": [], "prefill_top1_margin_mean": None,
            "num_prefill_rows": 0,
        }
    r = torch.cat(ref)
    g = torch.cat(got)
    err = (g - r).abs()
    top2 = r.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    agree = (r.argmax(-1) == g.argmax(-1)).float()
    # top-1 agreement by quartile of the reference's top-1/top-2 margin: how often fp8 keeps
    # the choice where the model is sure (the top quartile) versus near-ties
    order = margin.argsort()
    quartiles = [float(agree[chunk].mean()) for chunk in order.chunk(4) if chunk.numel()]
    return {
        "prefill_logit_abs_err_max": float(err.max()),
        "prefill_logit_abs_err_mean": float(err.mean()),
        "prefill_logit_abs_mean": float(r.abs().mean()),  # scale of the errors above
        "prefill_top1_agreement": float(agree.mean()),
        "prefill_top1_agreement_by_margin_quartile": quartiles,
        "prefill_top1_margin_mean": float(margin.mean()),
        "num_prefill_rows": int(r.shape[0]),
    }
