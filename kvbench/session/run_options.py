"""`RunOptions`: every option of `kvbench run` and `kvbench simulate`, the one schema.

Each field carries its help text, command-line spelling and the `RunConfig` section it lands
in as metadata (`OptionSpec`). The CLI generates its click options from these fields, sweeps
take any point option as an axis under the field's name, and `kvbench.session.session` turns
an instance into runs (`build_run_config` fills each run's sections). A new option is one new
field here, declared with its section (`_engine`, `_workload`, `_replay`, `_executor`) and a
field of the same name in that section's class, whose default it takes.

Values are what the command line spells: comma lists stay strings (`strategy="paged,fp8"`),
`request_rate` is text (`"inf"`, `"4"`), sizes are text (`kv_memory="64MiB"`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvbench.core.engine_kind import EngineKind
from kvbench.errors import KvbenchInputError
from kvbench.session.run_config import SERVER_FRONTEND_LATENCY_MS, RunConfig, section_classes
from kvbench.session.vllm_defaults import (
    DEFAULT_DEFAULTS,
    DEFAULTS_CHOICES,
    VLLM,
    defaults_name,
    vllm_defaults,
)
from kvbench.simulator.gpus import DEFAULT_GPU
from kvbench.sizing.kv_budget import DEFAULT_GPU_MEMORY_UTILIZATION

# The commands that take these options (what runs a configuration is its `engine_kind`).
KINDS = ("run", "simulate")


@dataclass(frozen=True)
class OptionSpec:
    """How one `RunOptions` field appears on the command line, and where it lands in a run's
    `RunConfig`."""

    help: str = ""
    flag: str | None = None  # default: --field-name-with-dashes
    # vLLM's names for the same knob, accepted as well (`--enable-chunked-prefill`); the
    # field's name is the one `config.json` records.
    aliases: tuple[str, ...] = ()
    kinds: tuple[str, ...] = KINDS  # the commands that take it
    # The command's default where it differs from the field's (also for commands that do not
    # take the option: `simulate` always runs on the CPU with the torch backend).
    kind_defaults: dict[str, Any] = field(default_factory=dict)
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    negatable: bool = False  # a flag with a --no- form
    show_default: bool = True
    # False: an option of the session as a whole (repeats, output folder, SLO), not of one
    # run; a sweep cannot make it an axis.
    per_run: bool = True
    # The `RunConfig` section that receives the value (None: the session's own option), and
    # the field's name there (None: the option's name).
    section: str | None = None
    key: str | None = None


# A field's default is its section's: one place states it (`EngineConfig.block_size`).
_SECTION_DEFAULT: Any = object()


def _section_option(section: str | None) -> Callable[..., Any]:
    def option(help: str = "", *, default: Any = _SECTION_DEFAULT, **spec: Any) -> Any:
        return field(default=default,
                     metadata={"option": OptionSpec(help=help, section=section, **spec)})

    return option


_engine = _section_option("engine")
_workload = _section_option("workload")
_replay = _section_option("replay")
_executor = _section_option("executor")
_session = _section_option(None)


def _with_section_defaults(cls: type) -> type:
    """Give each field declared with `_SECTION_DEFAULT` its section field's default, in the
    command line's spelling (an enum's value)."""
    sections = section_classes()
    for name, value in list(vars(cls).items()):
        if not isinstance(value, dataclasses.Field) or value.default is not _SECTION_DEFAULT:
            continue
        spec: OptionSpec = value.metadata["option"]
        default = {f.name: f.default for f in dataclasses.fields(sections[spec.section])}[
            spec.key or name]
        value.default = default.value if isinstance(default, enum.Enum) else default
    return cls


@dataclass(frozen=True)
@_with_section_defaults
class RunOptions:
    """The options of `kvbench run` / `kvbench simulate` (vLLM's names where vLLM has one)."""

    strategy: str = _engine(
        "a strategy of `kvbench list` (contiguous, paged, prefix, fp8, ...); a comma list or "
        "'all'")
    batching: str = _engine(
        "a batching policy of `kvbench list` (continuous, static, ...); comma list allowed")
    queue_order: str = _engine(
        "a queue order of `kvbench list` (fcfs, sjf, ...): who waits at the head of the queue, "
        "under any --batching")
    reserve: str = _engine("contiguous reservation: max, pow2, exact (comma list allowed)")
    workload: str = _workload(
        "built-in workload name or a trace file: kvbench JSONL, Mooncake JSONL, Azure or "
        "BurstGPT CSV, ShareGPT JSON (docs/workloads.md)", key="name")
    time_scale: float = _workload(
        "multiply the workload's arrival times (0.5 replays a trace twice as fast)")
    tokenizer: str | None = _workload(
        "local Hugging Face tokenizer folder (needed for a ShareGPT JSON dataset)")
    workload_params: tuple[str, ...] = _workload(
        "workload parameter (see `kvbench list`), repeatable", default=(), key="params",
        flag="--workload-param", metavar="KEY=VALUE", show_default=False,
    )
    num_requests: int | None = _workload("requests to replay [default: 64; a trace: all of it]",
                                         aliases=("--num-prompts",))
    model: str = _engine("preset name, local Hugging Face folder or hub model id (org/name)")
    dtype: str = _engine("auto (bfloat16 on CUDA, float32 on the CPU), float32, bfloat16, "
                         "float16", default="auto", kind_defaults={"simulate": "bfloat16"})
    kv_cache_dtype: str = _engine("auto (= --dtype) or fp8")
    kv_memory: str | None = _engine("KV arena budget, e.g. 64MiB, 2GB [default: 64MiB off CUDA]",
                                    aliases=("--kv-cache-memory-bytes",))
    # A host-memory KV tier (docs/offload.md)
    kv_offload: str | None = _engine(
        "host-memory KV tier under the prefix cache (prefix, hybrid-prefix), e.g. 64GiB; a "
        "plain number is GiB, as vLLM's --kv-offloading-size", aliases=("--kv-offloading-size",))
    kv_offload_policy: str = _engine("the host tier's eviction: lru or arc (vLLM's)")
    preemption_mode: str = _engine(
        "what a preempted request loses: recompute (vLLM v1's only mode) or swap, its KV kept "
        "in the --kv-offload tier and loaded back (vLLM v0's swap; docs/offload.md)")
    mamba_cache_mode: str | None = _engine(
        "a state-space hybrid's prefix cache: none (no hit), align (a state checkpoint at each "
        "scheduled chunk's block-aligned end) or all (one at every block boundary) "
        "[default: vLLM's, align under a prefix-caching strategy, none otherwise]",
        choices=("none", "align", "all"), show_default=False)
    gpu_memory_utilization: float | None = _engine(
        "CUDA: share of device memory for the engine (as vLLM) "
        f"[{float(DEFAULT_GPU_MEMORY_UTILIZATION):g}]")
    block_size: int = _engine()
    max_num_seqs: int = _engine(
        "[default: vLLM's, 256; simulate: 1024 on a --gpu of at least 70 GiB that is not an "
        "A100; 256 under --defaults classic]", show_default=False)
    max_num_batched_tokens: int | None = _engine(
        "token budget per step [default: vLLM's, 2048; simulate: 8192 on a --gpu of at least "
        "70 GiB that is not an A100; max(2048, max-model-len) without chunked prefill or under "
        "--defaults classic]", show_default=False)
    max_model_len: int | None = _engine("[default: the model's maximum positions]")
    chunked_prefill: bool = _engine(negatable=True, aliases=("--enable-chunked-prefill",))
    async_scheduling: bool | None = _engine(
        "vLLM's async scheduling: step n + 1 is scheduled before step n's output is seen, so "
        "a finished request's seat and blocks come back a step later [default: on under "
        "--batching vllm-v1, which alone models it]", negatable=True, show_default=False)
    watermark: float = _engine(
        "share of the KV blocks admission keeps free for running sequences to grow into "
        "(vLLM's --watermark) [default: 0 as vLLM v1; 0.01 under --defaults classic]",
        metavar="FRACTION", show_default=False)
    temperature: float = _engine("0 = greedy")
    kv_scale: float | None = _engine(
        "fp8 KV: fixed scale for every layer [default: amax/224 of the first write per layer]")
    seed: int = _engine()
    request_rate: str = _replay(
        "Poisson arrival rate in requests/s (any workload: a conversation workload starts "
        "conversations at the rate that sends this many requests/s); inf = all at t=0",
        default="inf")
    conversation_rate: str = _replay(
        "conversations started per second, instead of --request-rate (a request outside "
        "any conversation is a conversation of one); inf = not given", default="inf")
    burstiness: float = _replay("gamma arrivals shape (1 = Poisson)")
    max_concurrency: int | None = _replay("closed loop: at most this many requests in flight")
    warmup: int = _replay("requests run first and excluded from every metric",
                          aliases=("--num-warmups",))
    trace: bool = _replay("write trace.json (Chrome trace format)", show_default=False)
    steps_every: int = _replay(
        "write every Nth step to steps.csv (the summary still counts every step)", metavar="N")
    fast_forward: bool = _replay(
        "run each stretch of decode-only steps that nothing can change in one move (the "
        "same results to the bit; --no-fast-forward steps one at a time)", kinds=("simulate",),
        negatable=True)
    frontend_latency_ms: float = _replay(
        "milliseconds from a request's send to the scheduler: vLLM's API server (HTTP, "
        "tokenization, the hand-off to the engine core and back), counted in TTFT and E2E; "
        "0 = none, as `vllm bench latency` (docs/simulator.md)", kinds=("simulate",),
        kind_defaults={"simulate": SERVER_FRONTEND_LATENCY_MS}, metavar="MS")
    slo: str | None = _replay(
        "goodput targets, e.g. ttft=500ms,tpot=50ms (or vLLM's --goodput 'ttft:500 tpot:50', "
        "milliseconds)", default=None, key="slo_ms", per_run=False, aliases=("--goodput",))
    repeat: int = _session("run each configuration N times; report mean ± 95% CI", default=1,
                           per_run=False)
    out: str = _session("folder that receives results/<run-id>/", default="results",
                        per_run=False, aliases=("--result-dir",))
    per_strategy_reports: bool = _session(
        "a multi-strategy run also writes report.html into each strategy's folder (each "
        "inlines plotly.js, ~5 MB)", default=False, per_run=False, show_default=False)
    defaults: str = _executor(
        "whose defaults the options not given take. vllm (the default): vLLM v1's (its scheduler = "
        "--batching vllm-v1 with chunked prefill and async scheduling, prefix caching = "
        "--strategy prefix, its --max-num-batched-tokens and --max-num-seqs, watermark 0, fp8 "
        "scale 1.0, one unmeasured request). classic: kvbench's earlier ones (--batching "
        "continuous without chunking, --strategy paged, watermark 0.01, two warm-up requests; "
        "'kvbench' is its former name). docs/cli.md, Defaults that differ from vLLM's",
        choices=DEFAULTS_CHOICES,
        # The commands take vLLM's; the field (a `RunOptions` or `RunConfig` built in Python,
        # or a config.json that predates the option) keeps the sections' classic values,
        # which are what such a configuration holds.
        kind_defaults={kind: DEFAULT_DEFAULTS for kind in KINDS})
    # `kvbench run` only
    device: str = _engine("auto, cpu, cuda, cuda:N", kinds=("run",),
                          kind_defaults={"simulate": "cpu"})
    attention_backend: str = _engine(
        "auto (triton on CUDA, torch on CPU), triton, torch", kinds=("run",),
        kind_defaults={"simulate": "torch"})
    cpu_threads: int = _engine("torch threads on the CPU", kinds=("run",))
    enforce_eager: bool = _engine(
        "CUDA: run decode steps eagerly; --no-enforce-eager captures them in CUDA graphs (not "
        "yet checked on a GPU). simulate: vLLM's flag (no CUDA graphs in its KV budget)",
        negatable=True, default=True, kind_defaults={"simulate": False})
    engine_kind: str = _executor(
        "hf: replay through transformers' generate() instead", key="kind", flag="--engine",
        kinds=("run",), choices=(EngineKind.MODEL.value, EngineKind.TRANSFORMERS.value),
        kind_defaults={"simulate": EngineKind.SIMULATED.value})
    # `kvbench simulate` only
    gpu: str | None = _executor(
        "GPU preset: a100-40gb, a100-80gb, h100-80gb, h200, l4, rtx-4090, b200, mi300x, h20, "
        "l40s, a10g, t4, rtx-3090",
        kinds=("simulate",), kind_defaults={"simulate": DEFAULT_GPU})
    gpu_spec: str | None = _executor(
        "a GPU described in a TOML file (docs/simulator.md); replaces --gpu",
        kinds=("simulate",), metavar="FILE.toml", show_default=False)
    tensor_parallel_size: int = _engine(
        "GPUs in one tensor-parallel group (as vLLM's -tp)", kinds=("simulate",),
        aliases=("-tp",))
    quantization: str | None = _engine(
        "vLLM's --quantization fp8: a float checkpoint's weights quantized as vLLM loads them "
        "(the KV budget and the step time)", kinds=("simulate",), metavar="fp8")
    vllm_version: str | None = _engine(
        "the vLLM release whose start-up sizes the KV budget (docs/estimate.md) "
        "[default: the current one]", kinds=("simulate",), metavar="X.Y")
    weights_memory: str | None = _engine(
        "weights per GPU, e.g. 15GiB, instead of the checkpoint's as loaded (the KV budget)",
        kinds=("simulate",))

    @classmethod
    def for_kind(cls, kind: str, **values: Any) -> RunOptions:
        """The options of `kvbench <kind>`: that command's defaults (vLLM's for the options
        `values` does not give, unless `defaults="classic"`), then `values`."""
        if kind not in KINDS:
            raise KvbenchInputError(f"unknown kind {kind!r} (choose from {', '.join(KINDS)})")
        defaults = {f.name: _spec(f).kind_defaults[kind] for f in dataclasses.fields(cls)
                    if kind in _spec(f).kind_defaults}
        if "defaults" in values:
            values = {**values, "defaults": defaults_name(values["defaults"])}
        if {**defaults, **values}["defaults"] == VLLM:
            defaults.update(vllm_defaults(kind, {**defaults, **values}))
        return cls(**{**defaults, **values})


@dataclass(frozen=True)
class OptionField:
    """One `RunOptions` field with its resolved type, for the CLI and the sweep."""

    name: str
    spec: OptionSpec
    base_type: type  # int, float, bool, str (the element type for `multiple`)
    optional: bool  # None is a value
    multiple: bool  # a repeatable option (a tuple)
    default: Any

    @property
    def flag(self) -> str:
        return self.spec.flag or "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        """Every spelling the command line takes: the flag, then vLLM's aliases."""
        return (self.flag, *self.spec.aliases)

    @property
    def is_flag(self) -> bool:
        return self.base_type is bool and not self.multiple

    def default_for(self, kind: str) -> Any:
        return self.spec.kind_defaults.get(kind, self.default)


def _spec(f: dataclasses.Field) -> OptionSpec:
    return f.metadata["option"]


@functools.cache
def option_fields() -> dict[str, OptionField]:
    """Every `RunOptions` field, by name, in declaration order."""
    hints = typing.get_type_hints(RunOptions)
    found: dict[str, OptionField] = {}
    for f in dataclasses.fields(RunOptions):
        base, optional, multiple = _unpack(hints[f.name])
        found[f.name] = OptionField(f.name, _spec(f), base, optional, multiple, f.default)
    return found


def per_run_fields() -> dict[str, OptionField]:
    """The fields of one run (what a sweep can vary), without the session's own."""
    return {name: f for name, f in option_fields().items() if f.spec.per_run}


def build_run_config(values: dict[str, Any]) -> RunConfig:
    """The `RunConfig` of one run from its option values, resolved (one strategy, the rate as
    a number, ...): each value goes into the section its field's `OptionSpec` names."""
    classes = section_classes()
    sections: dict[str, dict[str, Any]] = {name: {} for name in classes}
    for name, info in option_fields().items():
        if info.spec.section is not None:
            sections[info.spec.section][info.spec.key or name] = values[name]
    return RunConfig(**{name: cls(**sections[name]) for name, cls in classes.items()})


def option_value(run: RunConfig, name: str) -> Any:
    """The value that option `name` took in `run`, as its section holds it."""
    spec = option_fields()[name].spec
    return getattr(getattr(run, spec.section), spec.key or name)


def _unpack(hint: Any) -> tuple[type, bool, bool]:
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True, False
    if typing.get_origin(hint) is tuple:
        return args[0], False, True
    return hint, False, False
