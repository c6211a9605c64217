"""`StepRecord`: one row of `steps.csv`."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)  # one per step of a long simulation: no per-instance dict
class StepRecord:
    step: int
    t_s: float  # step start, seconds since the run's first arrival
    step_ms: float
    overhead_ms: float  # time in the step outside the model forward
    num_prefill_seqs: int
    num_decode_seqs: int
    num_batched_tokens: int
    num_prefill_tokens: int
    num_running: int
    num_waiting: int
    kv_token_bytes: int
    kv_reserved_bytes: int
    kv_internal_bytes: int
    kv_external_bytes: int
    kv_free_bytes: int
    kv_cached_bytes: int
    preemptions: int
    kv_utilization: float | None
    kv_prompt_blocks: int | None = None  # distinct KV blocks holding prompt tokens (paged kinds)
    gpu_used_bytes: int | None = None  # CUDA only (pynvml), null elsewhere
    torch_allocated_bytes: int | None = None
    torch_reserved_bytes: int | None = None
    # A host KV tier's copies (`--kv-offload`; null without one): the blocks whose store and
    # load the step started (a step that ran nothing makes no row: its copies count in the
    # next), and the sequences waiting for a load at the step's end.
    host_store_blocks: int | None = None
    host_load_blocks: int | None = None
    host_load_waiting: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)
