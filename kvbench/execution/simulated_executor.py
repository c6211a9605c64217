"""`SimulatedExecutor`: the model replaced by a roofline cost model of a GPU; only the clock is modelled.

The engine, strategies and batching policies run unchanged: admission, preemption, memory
split and queueing are the real code's. `execute` computes nothing; it advances a
`SimulatedClock` by the modelled time of the step and returns placeholder logits.

Cost of one step (all sequences of the batch together), in `RooflineCostModel.cost`:

    FLOPs  = 2 x P_dense x T                       matmuls of every layer, T = tokens in the step
           + 2 x hidden x vocab x R                LM head, R = rows sampled
           + 4 x layers x heads x head_dim x A     attention: QK^T and PV
    A      = sum over sequences of q x (s - q) + q x (q + 1) / 2
                                                   query-key pairs under the causal mask
                                                   (q = query_lens[i], s = seq_lens[i])
    bytes  = W                                     weights, streamed once per step
           + kv_bytes_per_token x (sum(s) + sum(q))  KV read (whole context) and written
           + 2 x kv_bytes_per_token x copied slots   fork / copy-on-write copies
    time   = max(FLOPs / (peak x mfu), bytes / (bandwidth x bandwidth_efficiency))
           + step_overhead_s

P_dense counts the decoder layers' parameters (attention, MLP, norms); W also holds the LM
head and the final norm; the input embedding is a gather of T rows and left out, as are
activation reads and writes. Large prefills come out compute-bound, decodes bandwidth-bound
(weights plus every running sequence's KV). Float32 weights run at the TF32 rate (half the
bf16 peak). The constants are unvalidated (see `kvbench.execution.gpus`).

The clock: the simulated clock advances only by modelled time, inside `execute`. The
engine's own work (scheduling, layout, memory split) takes wall time that is *not* added:
that wall time is the simulator's cost, not the GPU's. The modelled per-step overhead
(`step_overhead_s`) stands for a real server's scheduling and launch cost and is part of the
advance in `execute`, so in `steps.csv` a simulated step's `step_ms` equals its modelled time
and `overhead_ms` is 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvbench.core.step_batch import StepBatch
from kvbench.execution.executor import Executor
from kvbench.execution.gpus import GPUSpec
from kvbench.models.config import ModelConfig


class SimulatedClock:
    """Simulated seconds; the engine's `clock=`. Moves only when told to."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = float(start_s)

    def __call__(self) -> float:
        return self.now_s

    def reset(self) -> None:
        """Back to zero: the run proper starts after warm-up."""
        self.now_s = 0.0

    def advance(self, dt_s: float) -> float:
        if dt_s < 0:
            raise ValueError(f"the simulated clock cannot go back ({dt_s} s)")
        self.now_s += dt_s
        return self.now_s

    def sleep(self, dt_s: float) -> None:
        """`time.sleep` for a runner: idle time passes at once."""
        self.advance(max(0.0, dt_s))

    def sleep_until(self, t_s: float) -> None:
        """Jump to `t_s` (e.g. the next arrival); never backwards."""
        if t_s > self.now_s:
            self.now_s = float(t_s)


@dataclass(frozen=True)
class StepCost:
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    overhead_s: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.overhead_s

    @property
    def compute_bound(self) -> bool:
        return self.compute_s >= self.memory_s


class RooflineCostModel:
    """Step time of one model on one GPU from tokens, context lengths and bytes moved."""

    def __init__(
        self,
        model: ModelConfig,
        gpu: GPUSpec,
        weight_element_bytes: int,
        kv_element_bytes: int,
    ) -> None:
        self.model = model
        self.gpu = gpu
        h, v = model.hidden_size, model.vocab_size
        embed = v * h * (1 if model.tie_word_embeddings else 2)
        self.dense_params = model.num_parameters() - embed - h  # decoder layers only
        self.lm_head_params = v * h
        self.weight_bytes = (self.dense_params + self.lm_head_params + h) * weight_element_bytes
        self.attention_flops_per_pair = 4 * model.num_layers * model.num_heads * model.head_dim
        self.kv_bytes_per_token = model.kv_bytes_per_token(kv_element_bytes)
        self.flops_per_s = gpu.peak_flops(weight_element_bytes) * gpu.mfu
        self.bytes_per_s = gpu.hbm_bandwidth_bytes_s * gpu.bandwidth_efficiency

    def cost(
        self,
        query_lens: Sequence[int],
        seq_lens: Sequence[int],
        num_sample_rows: int,
        num_copied_slots: int = 0,
    ) -> StepCost:
        num_tokens = sum(query_lens)
        context = sum(seq_lens)
        if num_tokens == len(query_lens):  # decode only: every q is 1, pairs = context
            pairs = context
        else:
            pairs = sum(
                q * (s - q) + q * (q + 1) // 2 for q, s in zip(query_lens, seq_lens, strict=True)
            )
        flops = (
            2 * self.dense_params * num_tokens
            + 2 * self.lm_head_params * num_sample_rows
            + self.attention_flops_per_pair * pairs
        )
        moved = self.weight_bytes + self.kv_bytes_per_token * (
            context + num_tokens + 2 * num_copied_slots
        )
        return StepCost(
            flops=float(flops),
            bytes=float(moved),
            compute_s=flops / self.flops_per_s,
            memory_s=moved / self.bytes_per_s,
            overhead_s=self.gpu.step_overhead_s,
        )


class SimulatedExecutor(Executor):
    """Advances `clock` by each step's modelled time; returns `[rows, 1]` zero logits.

    One logit column makes greedy sampling pick token 0 at no cost; the tokens never matter
    here because output lengths are fixed by the workload.
    """

    device = torch.device("meta")  # nothing runs anywhere

    def __init__(self, cost_model: RooflineCostModel, clock: SimulatedClock) -> None:
        self.cost_model = cost_model
        self.clock = clock
        self.last_cost: StepCost | None = None
        self.num_steps = 0
        self.compute_bound_steps = 0
        self.busy_s = 0.0
        self.total_flops = 0.0
        self.total_bytes = 0.0
        self._zeros = torch.zeros((256, 1))

    @property
    def gpu(self) -> GPUSpec:
        return self.cost_model.gpu

    def execute(self, batch: StepBatch) -> torch.Tensor:
        layout = batch.layout
        copied = sum(c.num_slots for c in layout.slot_copies) if layout.slot_copies else 0
        rows = len(batch.sample_rows)
        cost = self.cost_model.cost(layout.query_lens, layout.seq_lens, rows, copied)
        step_s = cost.time_s
        self.clock.advance(step_s)
        self.last_cost = cost
        self.num_steps += 1
        self.compute_bound_steps += cost.compute_bound
        self.busy_s += step_s
        self.total_flops += cost.flops
        self.total_bytes += cost.bytes
        if rows > self._zeros.shape[0]:
            self._zeros = torch.zeros((2 * rows, 1))
        return self._zeros[:rows]

    def synchronize(self) -> None:
        pass

    def stats(self) -> dict[str, float]:
        """Totals for a summary: modelled busy time, FLOPs and bytes, compute-bound steps."""
        return {
            "steps": self.num_steps,
            "compute_bound_steps": self.compute_bound_steps,
            "busy_s": self.busy_s,
            "total_flops": self.total_flops,
            "total_bytes": self.total_bytes,
        }


__all__ = ["RooflineCostModel", "SimulatedClock", "SimulatedExecutor", "StepCost"]
