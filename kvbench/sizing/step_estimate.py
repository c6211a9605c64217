"""Modelled step times behind `kvbench estimate --step`: the simulator's step-time model, step by
step and part by part, with nothing run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.models.config import ModelConfig
from kvbench.models.sizes import DTYPE_BYTES, WEIGHT_DTYPES, canonical_dtype, weights_dtype
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.step_time import StepTimeModel
from kvbench.sizing.estimate import text_table
from kvbench.workloads.bounds import MAX_TRACE_TOKENS

# The largest step `--step` times: more sequences than any engine batches (vLLM's
# max_num_seqs is a few hundred) and more tokens than any model's context
# (`kvbench.workloads.MAX_TRACE_TOKENS`) describe no real step; the bound is checked
# before the per-sequence lists are built.
MAX_STEP_BATCH = 1 << 16
MAX_STEP_TOKENS = MAX_TRACE_TOKENS


@dataclass(frozen=True)
class StepSpec:
    """One step to time: `decode:BxCTX` (B sequences at CTX tokens each) or `prefill:TOKENS`."""

    kind: str  # "decode" | "prefill"
    batch: int
    context: int  # tokens in the cache per sequence once the step's tokens are written
    tokens: int  # tokens computed by the step


def parse_step(text: str) -> StepSpec:
    """`decode:32x1024` or `prefill:2048` (a prompt of 2,048 tokens)."""
    kind, _, rest = str(text).strip().partition(":")
    kind = kind.strip().lower()
    try:
        if kind == "decode":
            b, _, ctx = rest.lower().partition("x")
            batch, context = int(b), int(ctx)
            spec = StepSpec("decode", batch, context, batch)
        elif kind == "prefill":
            tokens = int(rest)
            spec = StepSpec("prefill", 1, tokens, tokens)
        else:
            raise ValueError
    except ValueError:
        raise KvbenchInputError(
            f"cannot read --step {text!r}: use decode:BATCHxCONTEXT (e.g. decode:32x1024) "
            "or prefill:TOKENS (e.g. prefill:2048)"
        ) from None
    if spec.batch <= 0 or spec.context <= 0:
        raise KvbenchInputError(f"--step {text!r}: batch, context and tokens must be positive")
    if spec.batch > MAX_STEP_BATCH or spec.context > MAX_STEP_TOKENS:
        raise KvbenchInputError(
            f"--step {text!r}: at most {MAX_STEP_BATCH:,} sequences of at most "
            f"{MAX_STEP_TOKENS:,} tokens (no engine batches more, no model's context is longer)"
        )
    return spec


def estimate_steps(
    model: ModelConfig,
    gpu: Any,
    steps: list[StepSpec],
    tensor_parallel_size: int = 1,
    dtype: str = "bf16",
    kv_cache_dtype: str = "auto",
) -> dict[str, Any]:
    """Modelled time of each step on `gpu` x `tensor_parallel_size`, with its parts (ms)."""
    spec = get_gpu(gpu)
    dtype = canonical_dtype(dtype, WEIGHT_DTYPES)
    kv_dtype = dtype if str(kv_cache_dtype).lower() == "auto" else canonical_dtype(kv_cache_dtype)
    stored = weights_dtype(model, dtype)  # fp8 where the checkpoint is
    time_model = StepTimeModel(
        model, spec, DTYPE_BYTES[stored], DTYPE_BYTES[kv_dtype], tensor_parallel_size,
        DTYPE_BYTES[dtype],  # a hybrid's recurrent state: the model's dtype
    )
    out = []
    for step in steps:
        if step.kind == "decode":
            cost = time_model.cost([1] * step.batch, [step.context] * step.batch, step.batch)
        else:
            cost = time_model.cost([step.tokens], [step.context], 1)
        out.append({**asdict(step), "ms": cost.time_s * 1e3, "parts": cost.parts_ms()})
    return {
        "model": model.name,
        "gpu": spec.name,
        "tensor_parallel_size": tensor_parallel_size,
        "dtype": stored,
        "kv_cache_dtype": kv_dtype,
        "steps": out,
    }


def format_steps(result: dict[str, Any]) -> str:
    """One row per step: total and the largest parts (ms, per GPU of the group)."""
    names = [n for n in result["steps"][0]["parts"] if any(s["parts"][n] for s in result["steps"])]
    header = ("step", "ms", *names)
    rows = []
    for s in result["steps"]:
        label = (f"decode {s['batch']} x {s['context']}" if s["kind"] == "decode"
                 else f"prefill {s['tokens']}")
        rows.append((label, f"{s['ms']:.3f}", *(f"{s['parts'][n]:.3f}" for n in names)))
    title = (f"modelled step time: {result['model']} on {result['tensor_parallel_size']} x "
             f"{result['gpu']}, weights {result['dtype']}, KV {result['kv_cache_dtype']} (ms)")
    return "\n".join([title, "", *text_table(header, rows, right=tuple(range(1, len(header))))])
