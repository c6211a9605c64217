"""How much an fp8 KV cache changes the model's output: the `accuracy` section of fp8 runs.

Measured at the end of the run, on its own engine and tokens, against the same model reading
an unquantized cache through one executor over a one-sequence arena (docs/design.md, One build
path; a state-space hybrid's state in blocks past the sequence's KV, `_state_blocks`): greedy agreement of the generated tokens (until the first divergence, and overall) and
the prefill logits' error. On random weights the logits are nearly flat, so token agreement
understates a trained model's; the logit error is the figure that carries over
(docs/findings.md, fp8 KV cache).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from kvbench.build.engine_build import BuiltEngine, EnginePlan, EngineShape
from kvbench.build.model_executors import ModelExecutors
from kvbench.config import EngineConfig
from kvbench.core.layout import KVLayout
from kvbench.core.request import Request
from kvbench.core.step_batch import StepBatch
from kvbench.execution.model_executor import ModelExecutor
from kvbench.execution.pooled_states import state_blocks_for
from kvbench.execution.sampling import sample_tokens

MAX_LOGIT_ROWS = 64  # prompt positions whose logits are compared, per sampled request
BLOCK = 16  # the reference's block size (a paged layout over consecutive slots)

NOTE = (
    "Random-weight models have nearly flat logits (see prefill_top1_margin_mean), so tiny "
    "logit errors flip greedy choices: token agreement on them understates the agreement of a "
    "trained model; the logit error is the figure that carries over. The unquantized cache's "
    "token at each position is its choice after the run's tokens so far (sampled with the "
    "run's seeds when temperature > 0)."
)


def measure_fp8_accuracy(built: BuiltEngine, config: EngineConfig, requests: list[Request],
                         sample_size: int = 8) -> dict[str, Any]:
    """Compare the finished run of `built` (the engine of `config`, with an fp8 cache) with
    the unquantized cache, over the `requests` whose sequences all finished."""
    engine = built.engine
    run_executor: ModelExecutor = engine.executor
    sequences = engine.sequences
    compared = [r for r in requests
                if r.request_id in sequences
                and all(seq.finish_s is not None for seq in sequences[r.request_id])]
    sample = _sample(compared, sample_size)
    chunk = config.max_num_batched_tokens or max(2048, built.max_model_len)
    fp8_logits = [_logits(run_executor, list(r.prompt_token_ids), _rows(r.prompt_len), chunk)
                  for r in sample]
    kv_scales = run_executor.arena.scales()

    longest = max((r.prompt_len + r.output_len for r in compared), default=1)
    kv_slots = math.ceil(longest / BLOCK) * BLOCK
    reference = _reference_executor(built, config, kv_slots)
    if built.model_config.hybrid is not None:  # room past the KV for the sequence's state
        reference = _reference_executor(
            built, config, kv_slots + BLOCK * _state_block_count(reference))
    sampled = {r.request_id for r in sample}
    ref_logits: list[torch.Tensor] = []
    ref_tokens: list[list[list[int]]] = []
    run_tokens: list[list[list[int]]] = []
    for request in compared:
        prompt_len = request.prompt_len
        ref_samples, run_samples = [], []
        for seq in sequences[request.request_id]:
            tokens = list(seq.token_ids)
            generated = tokens[prompt_len:]
            # the logits that chose each generated token: at the position before it
            decided = list(range(prompt_len - 1, len(tokens) - 1))
            prompt_rows = (_rows(prompt_len)
                           if request.request_id in sampled and seq.sample_index == 0 else [])
            rows = sorted(set(decided) | set(prompt_rows))
            logits = _logits(reference, tokens[:-1], rows, chunk)
            at = {row: i for i, row in enumerate(rows)}
            keys = [(request.request_id, seq.sample_index, p + 1) for p in decided]
            ref_samples.append(sample_tokens(logits[[at[p] for p in decided]],
                                             engine.temperature, engine.seed,
                                             keys if engine.temperature else []))
            run_samples.append(generated)
            if prompt_rows:
                ref_logits.append(logits[[at[p] for p in prompt_rows]])
        ref_tokens.append(ref_samples)
        run_tokens.append(run_samples)
    ref_kv_dtype = str(reference.arena.dtype).removeprefix("torch.")
    del reference  # its arena: one sequence's KV
    return {
        "kv_cache_dtype": "fp8_e4m3",
        "reference_kv_cache_dtype": ref_kv_dtype,
        "reference_strategy": "paged",
        **_token_agreement(ref_tokens, run_tokens),
        **_logit_error(ref_logits, fp8_logits),
        "temperature": engine.temperature,
        "num_requests_compared": len(compared),
        "num_requests_skipped": len(requests) - len(compared),
        "kv_scales": kv_scales,
        "note": NOTE,
    }


def _reference_executor(built: BuiltEngine, config: EngineConfig,
                        num_slots: int) -> ModelExecutor:
    """The run's model and attention backend over an unquantized arena of `num_slots`."""
    reference = dataclasses.replace(config, strategy="paged", kv_cache_dtype="auto",
                                    kv_scale=None, enforce_eager=True)
    factory = ModelExecutors()
    # One table serves every layer (`paged`): the plan holds no allocation groups, and no
    # budget (its arena is sized by `num_slots`).
    shape = EngineShape(reference, built.model_config, built.max_model_len, 0)
    plan = EnginePlan(shape, built.device, built.engine.executor.model,
                      factory.kv_dtype(reference), 0, None, num_slots=num_slots)
    return factory.executor(plan, None)


def _logits(executor: ModelExecutor, tokens: list[int], rows: list[int],
            chunk: int) -> torch.Tensor:
    """Logits `[len(rows), vocab]` (float32, CPU) at positions `rows` of `tokens` prefilled
    alone into slots 0.. of the executor's arena, `chunk` tokens a step at most (as the run
    prefilled: no step larger than the activations the budget allowed for)."""
    length = len(tokens)
    states = _state_block_count(executor)
    block = BLOCK if states or math.ceil(length / BLOCK) * BLOCK <= executor.arena.num_slots else 1
    # a hybrid's state: the blocks after the sequence's KV (the arena holds both)
    state_blocks = ([list(range(math.ceil(length / block), math.ceil(length / block) + states))]
                    if states else None)
    out = []
    for start in range(0, length, chunk):
        end = min(start + chunk, length)
        wanted = [row - start for row in rows if start <= row < end]
        layout = KVLayout(kind="paged", slot_mapping=list(range(start, end)),
                          query_lens=[end - start], seq_lens=[end], block_size=block,
                          block_tables=[list(range(math.ceil(end / block)))],
                          state_blocks=state_blocks)
        batch = StepBatch(tokens[start:end], list(range(start, end)), layout, 1,
                          wanted or [end - start - 1])
        logits = executor.execute(batch).float().cpu()
        if wanted:
            out.append(logits)
    return torch.cat(out) if out else torch.empty(0)


def _state_block_count(executor: ModelExecutor) -> int:
    """`BLOCK`-slot blocks of the executor's arena one sequence's recurrent state takes (0
    for a model without)."""
    hybrid = executor.config.hybrid
    if hybrid is None:
        return 0
    return state_blocks_for(executor.arena.pool_tensors, BLOCK, hybrid.recurrent,
                            hybrid.recurrent_layers, next(executor.model.parameters()).dtype)


def _rows(length: int) -> list[int]:
    if length <= MAX_LOGIT_ROWS:
        return list(range(length))
    step = (length - 1) / (MAX_LOGIT_ROWS - 1)
    return sorted({round(i * step) for i in range(MAX_LOGIT_ROWS)})


def _sample(requests: list[Request], size: int) -> list[Request]:
    """`size` requests spread evenly over the list (deterministic)."""
    if size >= len(requests):
        return list(requests)
    step = len(requests) / size
    return [requests[int(i * step)] for i in range(size)]


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
