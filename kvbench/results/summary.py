"""`kvbench_summary.json` as typed objects: a `Summary` and its sections, written and read back.

The JSON keys are the field names, in field order. A key this version does not know is kept
in its section's `extra` and written back after the known keys, so `from_dict(d).to_dict() ==
d` for a file of this version or a newer one (the scheduler's `extra` also holds the cache
strategy's own counters). A known key missing from an older file loads as None (a missing
section as an empty one); `goodput` and `accuracy` stay out of the file when None. See
docs/design.md (the results contract) for what each figure means.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from kvbench.errors import KvbenchInputError

# Not `summary.json`: vLLM's sweep plotters read every such file under a folder as a list of
# their own run records (results/README.md, File names).
SUMMARY_FILE = "kvbench_summary.json"
# What older kvbench versions named it; read back when it holds a JSON object (a vLLM sweep's
# holds a list).
LEGACY_SUMMARY_FILE = "summary.json"


def read_json_object(path: Path | str) -> dict[str, Any]:
    """A JSON file holding an object (KvbenchInputError naming the file otherwise)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise KvbenchInputError(f"cannot read {path}: {err}") from None
    if not isinstance(data, dict):
        raise KvbenchInputError(f"cannot read {path}: not a JSON object")
    return data


def summary_file(folder: Path | str) -> Path | None:
    """The summary of the run folder `folder` (`SUMMARY_FILE`, or an older kvbench's
    `summary.json`); None when it holds neither."""
    folder = Path(folder)
    if (folder / SUMMARY_FILE).is_file():
        return folder / SUMMARY_FILE
    legacy = folder / LEGACY_SUMMARY_FILE
    try:
        with legacy.open("rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        return None
    return legacy if head.startswith(b"{") else None


@dataclass(kw_only=True)
class Section:
    """A JSON object with known keys (the dataclass fields) and kept unknown ones."""

    extra: dict[str, Any] = field(default_factory=dict)

    # Fields holding a nested section: name -> its class.
    PARTS: ClassVar[dict[str, type[Section]]] = {}
    # Fields left out of the JSON when None (sections only some runs have).
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Self:
        data = data or {}
        known = cls.keys()
        values: dict[str, Any] = {}
        for key in known:
            value = data.get(key)
            part = cls.PARTS.get(key)
            if part is not None and (value is not None or key not in cls.OPTIONAL):
                value = part.from_dict(value if isinstance(value, Mapping) else None)
            values[key] = value
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**values, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self.keys():
            value = getattr(self, key)
            if value is None and key in self.OPTIONAL:
                continue
            out[key] = value.to_dict() if isinstance(value, Section) else value
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out

    def get(self, key: str) -> Any:
        """The value under a JSON key: a field, else a kept unknown key (None when absent)."""
        if key != "extra" and key in self.keys():
            return getattr(self, key)
        return self.extra.get(key)


@dataclass(kw_only=True)
class Throughput(Section):
    """Rates over the makespan (first arrival to last completion) of completed requests."""

    output_tok_s: float | None = None
    total_tok_s: float | None = None  # prompt + output tokens
    requests_s: float | None = None


@dataclass(kw_only=True)
class LatencyStats(Section):
    """One latency's distribution over requests (ITL: over token gaps), in milliseconds."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


# The latencies of `requests.csv` (each a `<name>_ms` column) that `latency_ms` summarizes.
REQUEST_LATENCIES = ("ttft", "tpot", "e2e", "queue", "prefill", "host_load", "prefill_compute")


@dataclass(kw_only=True)
class Latencies(Section):
    """`latency_ms`, over samples (ITL: over token gaps), with vLLM's definitions and TTFT's
    parts: queue + host_load + prefill_compute = TTFT, host_load + prefill_compute = prefill;
    `client_wait` outside them all (docs/design.md, Metrics)."""

    ttft: LatencyStats = field(default_factory=LatencyStats)
    tpot: LatencyStats = field(default_factory=LatencyStats)
    itl: LatencyStats = field(default_factory=LatencyStats)
    e2e: LatencyStats = field(default_factory=LatencyStats)
    queue: LatencyStats = field(default_factory=LatencyStats)
    prefill: LatencyStats = field(default_factory=LatencyStats)
    host_load: LatencyStats = field(default_factory=LatencyStats)
    prefill_compute: LatencyStats = field(default_factory=LatencyStats)
    client_wait: LatencyStats = field(default_factory=LatencyStats)

    PARTS: ClassVar[dict[str, type[Section]]] = dict.fromkeys(
        (*REQUEST_LATENCIES, "itl", "client_wait"), LatencyStats)


@dataclass(kw_only=True)
class MemoryBreakdown(Section):
    """Time-weighted mean share of the KV arena in each state (they sum to 1)."""

    token: float | None = None
    reserved: float | None = None
    internal: float | None = None
    external: float | None = None
    free: float | None = None
    cached: float | None = None


@dataclass(kw_only=True)
class Memory(Section):
    """KV-cache memory: budget, capacity, utilization (token bytes / held bytes, weighted by
    step duration; `_saturated` over the steps with a waiting queue) and the device's peaks."""

    kv_budget_bytes: int | None = None
    kv_capacity_tokens: int | None = None
    kv_bytes_per_token: int | None = None
    kv_cache_dtype: str | None = None
    utilization_mean: float | None = None
    utilization_saturated: float | None = None
    breakdown_mean: MemoryBreakdown = field(default_factory=MemoryBreakdown)
    # Mean held bytes / mean computed tokens of the sequences holding memory.
    kv_held_bytes_per_token: float | None = None
    # Per KV group (allocation group under `hybrid`, and `contiguous` on a windowed model):
    # its layers, window, slot bytes and step-weighted mean bytes of each part of the split
    # (`kvbench.engine.group_memory`).
    kv_groups: list[dict[str, Any]] | None = None
    peak_gpu_bytes: int | None = None
    prompt_blocks_max: int | None = None
    gpu_used_bytes_max: int | None = None
    torch_reserved_bytes_max: int | None = None

    PARTS: ClassVar[dict[str, type[Section]]] = {"breakdown_mean": MemoryBreakdown}


@dataclass(kw_only=True)
class Scheduler(Section):
    """What the batching policy did (`batch_size_mean`: sequences a step ran, a plain mean over
    steps; docs/design.md, Metrics). `extra` holds the cache strategy's own counters."""

    steps: int | None = None
    preemptions: int | None = None
    prefix_hit_rate: float | None = None  # cached prompt tokens / prompt tokens
    # The best hit rate the block layout allows, over the prefix cache's lookups: prompt
    # tokens in full blocks some earlier sequence held (a cache that never evicts and, for a
    # state-space hybrid, a state checkpoint at every block) / tokens looked up; left out
    # without a prefix cache that computes it (`kvbench.strategies.prefix`)
    prefix_hit_ceiling: float | None = None
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    batch_size_mean: float | None = None
    batch_size_max: int | None = None
    waiting_mean: float | None = None  # waiting-queue length, mean over steps
    prefill_tokens_computed: int | None = None
    overhead_ms_total: float | None = None
    overhead_fraction: float | None = None  # overhead / total step time

    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"prefix_hit_ceiling"})  # prefix only


@dataclass(kw_only=True)
class Load(Section):
    """The load offered (rates per second, null when infinite; whichever of `--request-rate`
    and `--conversation-rate` was given sets both) and the rates the client achieved, from the
    send times (results/README.md, kvbench_summary.json)."""

    request_rate: float | None = None
    conversation_rate: float | None = None
    max_concurrency: int | None = None
    conversations: int | None = None
    achieved_request_rate: float | None = None
    achieved_conversation_rate: float | None = None


@dataclass(kw_only=True)
class Goodput(Section):
    """Requests meeting every per-request SLO (`--slo`), their share and rate."""

    slo_ms: dict[str, float] | None = None
    requests_meeting_slo: int | None = None
    fraction_meeting_slo: float | None = None
    goodput_requests_s: float | None = None


@dataclass(kw_only=True)
class Summary(Section):
    """One run's `kvbench_summary.json`."""

    label: str | None = None
    status: str | None = None  # complete, interrupted, failed
    strategy: str | None = None
    batching: str | None = None
    reserve: str | None = None
    block_size: int | None = None
    workload: str | None = None
    model: str | None = None
    dtype: str | None = None
    device: str | None = None
    executor: str | None = None
    seed: int | None = None
    num_requests: int | None = None
    completed: int | None = None
    failed: int | None = None
    warmup_requests_excluded: int | None = None
    clipped_requests: int | None = None
    duration_s: float | None = None
    throughput: Throughput = field(default_factory=Throughput)
    latency_ms: Latencies = field(default_factory=Latencies)
    memory: Memory = field(default_factory=Memory)
    scheduler: Scheduler = field(default_factory=Scheduler)
    load: Load = field(default_factory=Load)
    goodput: Goodput | None = None
    # fp8 runs: agreement with an unquantized cache (kvbench.session.fp8_accuracy), free-form.
    accuracy: dict[str, Any] | None = None

    PARTS: ClassVar[dict[str, type[Section]]] = {
        "throughput": Throughput, "latency_ms": Latencies, "memory": Memory,
        "scheduler": Scheduler, "load": Load, "goodput": Goodput,
    }
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"goodput", "accuracy"})

    def lookup(self, path: tuple[str, ...]) -> Any:
        """The value at a JSON key path, e.g. ("latency_ms", "ttft", "p99"); None if absent."""
        value: Any = self
        for key in path:
            if isinstance(value, Section | Mapping):
                value = value.get(key)
            else:
                return None
        return value

    @classmethod
    def from_json(cls, path: Path | str) -> Summary:
        """Read a `kvbench_summary.json` (KvbenchInputError when it is not one)."""
        return cls.from_dict(read_json_object(path))

    @classmethod
    def of_folder(cls, folder: Path | str) -> Summary:
        """The run folder's summary (`summary_file`; KvbenchInputError without one)."""
        return cls.from_json(summary_file(folder) or Path(folder) / SUMMARY_FILE)

    def write(self, path: Path | str) -> None:
        """Write atomically (NaN and infinity as null)."""
        from kvbench.results.files import write_json  # (reading summaries needs no numpy)

        write_json(Path(path), self.to_dict())


def as_summary(summary: Summary | Mapping[str, Any] | None) -> Summary | None:
    """A Summary from either form (callers that still hold the JSON dict pass it as is)."""
    if summary is None or isinstance(summary, Summary):
        return summary
    return Summary.from_dict(summary)
