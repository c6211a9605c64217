"""A simulated step's phases in the Chrome trace, drawn on the simulated clock.

The simulated clock moves only by the step-time model's time, all of it inside the forward,
so the engine's own `schedule`, `layout` and `sample` ranges would take no time in a
simulated trace. The model does charge the host its per-step `cpu_overhead` (scheduling,
input preparation, sampling: docs/simulator.md), without telling its parts apart, so the
trace draws it as four equal phases, `schedule`, `layout`, `prepare` (plus the modelled KV
slot copies) and `sample`, around the forward, `prefill` (any prefill in the batch) or
`decode` as in a real run, whose children are the model's parts with time in this step.
They fill the step exactly: the step's total and `steps.csv` are the model's, unchanged.
"""

from __future__ import annotations

from kvbench.core.step_batch import StepBatch
from kvbench.simulator.step_time import StepTime
from kvbench.tracing import TraceRecorder

# The engine's ranges a simulated executor draws itself (`Executor.drawn_trace_ranges`).
DRAWN_RANGES = frozenset({"schedule", "layout", "sample"})
# The forward's parts under the range names a real run's kernels have, where they have one.
_FORWARD_PARTS = (
    ("gemm", "gemm"), ("attention_prefill", "prefill_attention"),
    ("attention_decode", "decode_attention"), ("kv_write", "write_kv"),
    ("elementwise", "elementwise"), ("all_reduce", "all_reduce"),
    ("layer_floor", "layer_floor"), ("lm_head", "lm_head"),
)


def draw_step(recorder: TraceRecorder, start_s: float, cost: StepTime, batch: StepBatch) -> None:
    """Draw the step that ran `batch` from `start_s` for `cost.time_s` on the recorder."""
    parts = cost.parts
    end_s = start_s + cost.time_s
    host_s = parts["cpu_overhead"] / 4
    t = start_s

    def phase(name: str, seconds: float, args: dict, nested: int = 0) -> None:
        nonlocal t
        stop = min(t + seconds, end_s)
        recorder.complete(name, t, stop, args, nested=nested)
        t = stop

    phase("schedule", host_s, {"modelled": "cpu_overhead / 4"})
    phase("layout", host_s, {"modelled": "cpu_overhead / 4"})
    phase("prepare", host_s + parts["kv_copy"], {"modelled": "cpu_overhead / 4 + kv_copy",
                                                 "tokens": batch.num_tokens})
    forward_s = sum(parts[part] for part, _ in _FORWARD_PARTS)
    forward_start = t
    recorder.complete(
        "prefill" if batch.num_prefill_seqs else "decode", t, min(t + forward_s, end_s),
        {"prefill_seqs": batch.num_prefill_seqs, "decode_seqs": batch.num_decode_seqs,
         "tokens": batch.num_tokens},
    )
    for part, name in _FORWARD_PARTS:
        if parts[part] > 0:
            phase(name, parts[part], {"modelled": part}, nested=1)
    t = min(forward_start + forward_s, end_s)
    phase("sample", end_s - t, {"modelled": "cpu_overhead / 4"})
