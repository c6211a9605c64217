"""A simulated step's phases in the Chrome trace, drawn on the simulated clock.

The engine's own ranges take no simulated time, so the step draws its modelled parts itself,
back to back, filling the step: `cpu_overhead` as four equal host phases around the forward
and the forward's parts inside it (docs/simulator.md, the `--trace` paragraph).
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
