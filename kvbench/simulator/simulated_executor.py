"""`SimulatedExecutor`: the model replaced by a step-time model of a GPU; only the clock is modelled.

The engine, strategies and batching policies run unchanged; a step computes nothing and
advances a `SimulatedClock` by its modelled time (`step_time.StepTimeModel`, host overhead
included, overlapped under async scheduling: docs/simulator.md), so in `steps.csv` a step's
`step_ms` is its modelled time and `overhead_ms` 0: the engine's own wall time is the
simulator's cost, not the GPU's. Sampling answers token 0 without logits or token inputs
(`reads_token_inputs = False`); only `execute`, for callers that sample themselves, builds
zero logits and imports torch. With `--trace` a step's modelled parts are drawn on the
simulated clock as its phases (`step_trace.draw_step`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbench.core.executor import DeviceKind, Executor
from kvbench.core.host_transfers import HostTransfers
from kvbench.core.sampling_params import SamplingParams
from kvbench.core.step_batch import StepBatch
from kvbench.errors import KvbenchInputError
from kvbench.simulator.gpus import GPUSpec
from kvbench.simulator.host_link_model import HostLinkModel
from kvbench.simulator.step_time import StepTime, StepTimeModel, overlapped_cpu_overhead_s
from kvbench.simulator.step_trace import DRAWN_RANGES, draw_step
from kvbench.tracing import get_recorder

if TYPE_CHECKING:
    import torch


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

    def sleep_until(self, t_s: float) -> None:
        """Jump to `t_s` (e.g. the next arrival); never backwards."""
        if t_s > self.now_s:
            self.now_s = float(t_s)


# Nothing runs anywhere: the type torch gives a device that holds shapes, not data.
SIMULATED_DEVICE = DeviceKind("meta")
_ONE_ZERO = [0]  # a sampled row of one token, shared: the engine only reads rows


class SimulatedExecutor(Executor):
    """Advances `clock` by each step's modelled time; returns `[rows, 1]` zero logits.

    One logit column makes greedy sampling pick token 0 at no cost; the tokens never matter
    here because output lengths are fixed by the workload.
    """

    device = SIMULATED_DEVICE
    reads_token_inputs = False  # the step's cost needs its lengths, not its token ids
    reads_kv_tables = False  # nor where their KV lives
    drawn_trace_ranges = DRAWN_RANGES  # the modelled host phases, drawn on the simulated clock
    # `kvbench.engine.fast_forward.RunExecutor`: every decode step's cost is the model's and
    # its tokens 0, so a run of them is advanced at once from the sum of the lengths alone,
    # unless a window makes the cost depend on each length.
    decode_runs = True
    decode_run_token = 0

    def __init__(self, cost_model: StepTimeModel, clock: SimulatedClock,
                 overlap_cpu_overhead: bool = False) -> None:
        self.decode_runs = not cost_model.has_windows
        self.cost_model = cost_model
        self.clock = clock
        self.last_cost: StepTime | None = None
        self.num_steps = 0
        self.compute_bound_steps = 0
        self.busy_s = 0.0
        self.total_flops = 0.0
        self.total_bytes = 0.0
        self._zeros: torch.Tensor | None = None  # built at the first `execute`
        # A host tier's copies (`host_link`, set by the factory with `--kv-offload`)
        self.host: HostLinkModel | None = None
        self.overlap_cpu_overhead = overlap_cpu_overhead
        self._last_end_s = -1.0  # when the last step ended, and its time on the GPU
        self._last_gpu_s = 0.0

    def _overlap_after_gpu_s(self, start_s: float) -> float | None:
        """The previous step's GPU time where this step's host work overlaps it (async
        scheduling, steps back to back), else None: the overhead is charged whole."""
        if self.overlap_cpu_overhead and start_s == self._last_end_s:
            return self._last_gpu_s
        return None

    @property
    def gpu(self) -> GPUSpec:
        return self.cost_model.gpu

    def advance(self, batch: StepBatch, num_decodes: int = 0, decodes_context: int = 0) -> int:
        """Advance the clock by the step's modelled time; the number of rows to sample.
        `num_decodes`: decode rows the batch does not list, holding `decodes_context` tokens
        in all (`execute_mixed_step`)."""
        layout = batch.layout
        copied = sum(c.num_slots for c in layout.slot_copies) if layout.slot_copies else 0
        rows = len(batch.sample_rows) + num_decodes
        start_s = self.clock.now_s
        cost = self.cost_model.cost(layout.query_lens, layout.seq_lens, rows, copied,
                                    num_decodes, decodes_context)
        previous_gpu_s = self._overlap_after_gpu_s(start_s)
        if previous_gpu_s is not None:
            cost = cost.with_cpu_overhead(overlapped_cpu_overhead_s(
                self.cost_model.gpu.constants.cpu_overhead_s, previous_gpu_s))
        step_s = cost.time_s
        if layout.host_transfers is not None:  # stores the step cannot hide lengthen it
            step_s = max(step_s, self.host.start(layout.host_transfers, start_s) - start_s)
        self.clock.advance(step_s)
        self._last_end_s = self.clock.now_s
        self._last_gpu_s = cost.gpu_s
        self.last_cost = cost
        self.num_steps += 1
        self.compute_bound_steps += cost.compute_bound
        self.busy_s += step_s
        self.total_flops += cost.flops
        self.total_bytes += cost.bytes
        recorder = get_recorder()
        if recorder is not None:  # `--trace`: the step's modelled phases
            draw_step(recorder, start_s, cost, batch)
        return rows

    def advance_decode_run(
        self, num_seqs: int, context_tokens: int, max_steps: int, until_s: float
    ) -> list[float]:
        """`advance` of each of a run of decode-only steps, in order: the same clock and
        totals, step by step, as that many `advance` calls (no trace: the engine runs the
        steps one at a time when one is recorded)."""
        ends, sums, compute_bound, cost = self.cost_model.decode_run_costs(
            num_seqs, context_tokens, max_steps, self.clock.now_s, until_s,
            (self.busy_s, self.total_flops, self.total_bytes),
            self._overlap_after_gpu_s(self.clock.now_s))
        if ends:
            self.clock.now_s = self._last_end_s = ends[-1]
            self._last_gpu_s = cost.gpu_s
            self.busy_s, self.total_flops, self.total_bytes = sums
            self.compute_bound_steps += compute_bound
            self.num_steps += len(ends)
            self.last_cost = cost
        return ends

    def execute_mixed_step(self, batch: StepBatch, sampling: SamplingParams, num_decodes: int,
                           decodes_context: int) -> list[list[int]]:
        """`execute_and_sample` of `batch` with `num_decodes` decode rows more, given by
        their lengths' sum (`RunExecutor`); the tokens of the batch's own sampled rows."""
        self.advance(batch, num_decodes, decodes_context)
        if not sampling.forks:  # one shared row, C speed; the keys are never built
            return [_ONE_ZERO] * sampling.num_rows
        return [[0] * len(row) for row in sampling.keys]

    def execute_and_sample(self, batch: StepBatch, sampling: SamplingParams) -> list[list[int]]:
        """Run the step; every requested token is 0, and no logits exist."""
        return self.execute_mixed_step(batch, sampling, 0, 0)

    def execute(self, batch: StepBatch) -> torch.Tensor:
        # torch: only a caller that asks for logits
        import torch

        rows = self.advance(batch)
        if self._zeros is None or rows > self._zeros.shape[0]:
            self._zeros = torch.zeros((max(256, 2 * rows), 1))
        return self._zeros[:rows]

    def synchronize(self) -> None:
        pass

    def keep_host_tier(self, num_blocks: int, block_size: int, block_bytes: int) -> None:
        """Time the tier's copies on the GPU's host link: one GPU's share of a block (each
        GPU of a tensor-parallel group moves its own over its own link)."""
        link = self.gpu.host_link
        if link is None:
            raise KvbenchInputError(
                f"--kv-offload: GPU {self.gpu.name} has no host link to time copies on; give a "
                "--gpu-spec file with a [host_link] table (docs/simulator.md)")
        self.host = HostLinkModel(link, block_bytes // self.cost_model.tensor_parallel_size)

    def transfer_host(self, transfers: HostTransfers) -> None:
        self.host.start(transfers, self.clock.now_s)

    def finished_host_jobs(self) -> list[int]:
        return self.host.finished(self.clock.now_s) if self.host is not None else []

    def wait_host_jobs(self) -> None:
        if self.host is not None:
            self.clock.sleep_until(self.host.next_end_s())

    def reset_stats(self) -> None:
        # The warm-up's times (its link queues' ends, its last step's end) would otherwise
        # hold the run's first copies and steps back to the warm-up's end on the new clock.
        if self.host is not None:
            self.host.restart()
        self._last_end_s = -1.0

    def stats(self) -> dict[str, float]:
        """Totals for a summary: modelled busy time, FLOPs and bytes, compute-bound steps."""
        return {
            "steps": self.num_steps,
            "compute_bound_steps": self.compute_bound_steps,
            "busy_s": self.busy_s,
            "total_flops": self.total_flops,
            "total_bytes": self.total_bytes,
            **(self.host.stats() if self.host is not None else {}),
        }
