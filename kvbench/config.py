"""`EngineConfig`: every engine option, with one name in Python, the CLI and `config.json`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE, check_block_size
from kvbench.core.host_transfers import HOST_POLICIES, PREEMPTION_MODES
from kvbench.core.kv_cache_dtype import KV_CACHE_DTYPES
from kvbench.core.mamba_cache_mode import MAMBA_CACHE_MODES
from kvbench.errors import KvbenchInputError
from kvbench.units import parse_size_bytes

DEFAULT_CPU_KV_MEMORY = "64MiB"
MAX_OFFLOAD_BYTES = 1 << 46  # 64 TiB: no host holds more


def parse_offload_size(text: str | int) -> int:
    """`--kv-offload`: a size (`64GiB`, `500MB`), or a plain number of GiB as vLLM's
    --kv-offloading-size takes it; more than 0 and at most 64 TiB."""
    plain = str(text).strip()
    try:
        size = int(float(plain) * (1 << 30)) if not isinstance(text, int) else text
    except (ValueError, OverflowError):
        size = parse_size_bytes(plain)
    if not 0 < size <= MAX_OFFLOAD_BYTES:
        raise KvbenchInputError(
            f"--kv-offload must be more than 0 and at most 64TiB of host memory, got {text!r}")
    return size

# Seeds reach numpy and torch generators, which take a 64-bit integer.
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1


@dataclass
class EngineConfig:
    model: str = "tiny"
    strategy: str = "paged"
    batching: str = "continuous"
    queue_order: str = "fcfs"  # who waits at the head of the queue: fcfs | sjf | ...
    reserve: str = "max"  # contiguous: max | pow2 | exact
    block_size: int = DEFAULT_BLOCK_SIZE
    dtype: str = "float32"
    kv_cache_dtype: str = "auto"  # auto (= dtype) | fp8
    # fp8 KV cache: one scale for K and V of every layer (cache holds value / scale). None:
    # each layer's scales come from its first write (amax / 224, i.e. 2x headroom under e4m3's
    # 448) and are kept for the rest of the run.
    kv_scale: float | None = None
    kv_memory: int | str | None = None  # bytes; default 64MiB off CUDA
    gpu_memory_utilization: float | None = None  # CUDA: share of the device for the engine
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None  # default: max(2048, max_model_len)
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    chunked_prefill: bool = False
    # Share of the KV blocks admission keeps free for running sequences to grow into. 0.01
    # (vLLM v0's, whose scheduler `continuous` models); the commands take vLLM v1's 0 unless
    # given `--defaults classic` (kvbench.session.vllm_defaults).
    watermark: float = 0.01
    # vLLM's async scheduling: step n + 1 is scheduled before step n's output is seen.
    # None: on where the batching policy models it (`vllm-v1`, as vLLM since 0.14).
    async_scheduling: bool | None = None
    temperature: float = 0.0  # 0: greedy
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    attention_backend: str = "auto"  # auto | torch | triton
    # CPU only. One thread by default: the tiny model's matrices are too small to gain from
    # more, and spinning OpenMP threads make timings erratic on a shared machine.
    cpu_threads: int = 1
    # Simulation: GPUs in one tensor-parallel group (weights, KV heads and FLOPs split N ways).
    tensor_parallel_size: int = 1
    # CUDA + Triton: False captures decode steps in CUDA graphs per padded batch size (as vLLM).
    # None is each engine's default: eager on CUDA until the graph path has been checked
    # against eager on a GPU; the simulator's budget counts vLLM's graphs (vLLM's default).
    enforce_eager: bool | None = None
    # Simulation: the vLLM start-up that sizes the KV budget (kvbench.sizing.vllm_startup):
    # vLLM's --quantization of float weights, the release whose profiler it follows (None:
    # the current one) and a per-GPU weights size instead of the loaded weights'.
    quantization: str | None = None
    vllm_version: str | None = None
    weights_memory: int | str | None = None
    # A host-memory tier under a prefix cache (docs/offload.md): its bytes across the
    # tensor-parallel group (vLLM's --kv-offloading-size, GiB where no unit is given) and
    # its eviction policy (vLLM's `eviction_policy`).
    kv_offload: int | str | None = None
    kv_offload_policy: str = "lru"
    # What a preempted request loses: recompute (vLLM v1's only mode) or swap, its KV kept in
    # the host tier (`--kv-offload`, the swap space) and loaded back (vLLM v0's swap).
    preemption_mode: str = "recompute"
    # Where a state-space hybrid's prefix cache keeps state checkpoints (vLLM's
    # --mamba-cache-mode): none, align or all; None: vLLM's, align under a prefix-caching
    # strategy (`kvbench.strategies.prefix`), none otherwise.
    mamba_cache_mode: str | None = None

    def __post_init__(self) -> None:
        if self.kv_memory is not None:
            self.kv_memory = parse_size_bytes(self.kv_memory)
        if self.weights_memory is not None:
            self.weights_memory = parse_size_bytes(self.weights_memory)
        check_block_size(self.block_size)
        if self.kv_offload is not None:
            self.kv_offload = parse_offload_size(self.kv_offload)
        for flag, value, choices in (
                ("--kv-offload-policy", self.kv_offload_policy, HOST_POLICIES),
                ("--mamba-cache-mode", self.mamba_cache_mode, (None, *MAMBA_CACHE_MODES)),
                ("--preemption-mode", self.preemption_mode, PREEMPTION_MODES)):
            if value not in choices:
                raise KvbenchInputError(f"{flag} {value!r}: choose from "
                                        f"{', '.join(c for c in choices if c is not None)}")
        if self.preemption_mode == "swap" and self.kv_offload is None:
            raise KvbenchInputError("--preemption-mode swap keeps preempted requests' KV in the "
                                    "host tier: give --kv-offload SIZE (its swap space)")
        # None is "the default"; 0 would read as a length, so it is refused like -1.
        for flag, value, least in (("--max-num-seqs", self.max_num_seqs, 1),
                                   ("--max-num-batched-tokens", self.max_num_batched_tokens, 1),
                                   ("--max-model-len", self.max_model_len, 2),
                                   ("--tensor-parallel-size", self.tensor_parallel_size, 1),
                                   ("--cpu-threads", self.cpu_threads, 1)):
            if value is not None and value < least:
                why = " (one prompt and one output token)" if least == 2 else ""
                raise KvbenchInputError(f"{flag} must be at least {least}{why}, got {value}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise KvbenchInputError("--gpu-memory-utilization must be in (0, 1]")
        if self.gpu_memory_utilization is not None and self.kv_memory is not None:
            # Two answers to one question (the KV budget): which one wins would be a guess.
            raise KvbenchInputError("--kv-memory sets the KV budget itself; "
                                    "--gpu-memory-utilization would be ignored: give one of them")
        if not 0 <= self.watermark < 1:  # vLLM's range
            raise KvbenchInputError(f"--watermark must be in [0, 1), got {self.watermark}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise KvbenchInputError(
                f"--temperature must be a finite number >= 0, got {self.temperature}")
        if self.kv_scale is not None and not (math.isfinite(self.kv_scale) and self.kv_scale > 0):
            raise KvbenchInputError(
                f"--kv-scale must be a finite number > 0, got {self.kv_scale}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) \
                or not SEED_MIN <= self.seed <= SEED_MAX:
            raise KvbenchInputError(
                f"--seed must be an integer in [-2**63, 2**63 - 1] (a 64-bit seed), "
                f"got {self.seed}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise KvbenchInputError(
                f"--kv-cache-dtype {self.kv_cache_dtype!r} is not one kvbench models (choose "
                f"from {', '.join(KV_CACHE_DTYPES)}: its fp8 cache is e4m3; vLLM's others, "
                "fp8_e5m2, bfloat16, int8, ..., are refused)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> EngineConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names
        if unknown:
            raise KvbenchInputError(f"unknown engine options: {', '.join(sorted(unknown))}")
        return cls(**values)
