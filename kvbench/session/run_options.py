"""`RunOptions`: every option of `kvbench run` and `kvbench simulate`, the one schema.

Each field carries its help text and command-line spelling as metadata (`OptionSpec`). The
CLI generates its click options from these fields, sweeps take any point option as an axis
under the field's name, and `kvbench.session.session` turns an instance into runs. A new option
is one new field here.

Values are what the command line spells: comma lists stay strings (`strategy="paged,fp8"`),
`request_rate` is text (`"inf"`, `"4"`), sizes are text (`kv_memory="64MiB"`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from kvbench.errors import KvbenchInputError
from kvbench.sizing.kv_budget import DEFAULT_GPU_MEMORY_UTILIZATION

KINDS = ("run", "simulate")


@dataclass(frozen=True)
class OptionSpec:
    """How one `RunOptions` field appears on the command line."""

    help: str = ""
    flag: str | None = None  # default: --field-name-with-dashes
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


def _option(default: Any, help: str = "", **spec: Any) -> Any:
    return field(default=default, metadata={"option": OptionSpec(help=help, **spec)})


@dataclass(frozen=True)
class RunOptions:
    """The options of `kvbench run` / `kvbench simulate` (vLLM's names where vLLM has one)."""

    strategy: str = _option(
        "paged", "a strategy of `kvbench list` (contiguous, paged, prefix, fp8, ...); a comma "
                 "list or 'all'")
    batching: str = _option(
        "continuous", "a batching policy of `kvbench list` (continuous, static, sjf, ...); "
                      "comma list allowed")
    reserve: str = _option("max", "contiguous reservation: max, pow2, exact (comma list allowed)")
    workload: str = _option(
        "chat", "built-in workload name or a trace file: kvbench JSONL, Mooncake JSONL, Azure "
                "or BurstGPT CSV, ShareGPT JSON (docs/workloads.md)")
    time_scale: float = _option(
        1.0, "multiply the workload's arrival times (0.5 replays a trace twice as fast)")
    tokenizer: str | None = _option(
        None, "local Hugging Face tokenizer folder (needed for a ShareGPT JSON dataset)")
    workload_params: tuple[str, ...] = _option(
        (), "workload parameter (see `kvbench list`), repeatable",
        flag="--workload-param", metavar="KEY=VALUE", show_default=False,
    )
    num_requests: int | None = _option(
        None, "requests to replay [default: 64; a trace: all of it]")
    model: str = _option("tiny", "preset name or local Hugging Face folder")
    dtype: str = _option("auto", "auto (bfloat16 on CUDA, float32 on the CPU), float32, "
                                 "bfloat16, float16",
                         kind_defaults={"simulate": "bfloat16"})
    kv_cache_dtype: str = _option("auto", "auto (= --dtype) or fp8")
    kv_memory: str | None = _option(
        None, "KV arena budget, e.g. 64MiB, 2GB [default: 64MiB off CUDA]")
    gpu_memory_utilization: float | None = _option(
        None, "CUDA: share of device memory for the engine (as vLLM) "
        f"[{float(DEFAULT_GPU_MEMORY_UTILIZATION):g}]")
    block_size: int = _option(16)
    max_num_seqs: int = _option(256)
    max_num_batched_tokens: int | None = _option(
        None, "token budget per step [default: max(2048, max-model-len)]")
    max_model_len: int | None = _option(None, "[default: the model's maximum positions]")
    chunked_prefill: bool = _option(False, negatable=True)
    temperature: float = _option(0.0, "0 = greedy")
    kv_scale: float | None = _option(
        None, "fp8 KV: fixed scale for every layer [default: amax/224 of the first write per "
              "layer]")
    seed: int = _option(0)
    request_rate: str = _option("inf", "Poisson arrival rate in requests/s; inf = all at t=0")
    burstiness: float = _option(1.0, "gamma arrivals shape (1 = Poisson)")
    max_concurrency: int | None = _option(
        None, "closed loop: at most this many requests in flight")
    warmup: int = _option(2, "requests run first and excluded from every metric")
    trace: bool = _option(False, "write trace.json (Chrome trace format)", show_default=False)
    steps_every: int = _option(
        1, "write every Nth step to steps.csv (the summary still counts every step)",
        metavar="N")
    slo: str | None = _option(None, "goodput targets, e.g. ttft=500ms,tpot=50ms", per_run=False)
    repeat: int = _option(1, "run each configuration N times; report mean ± 95% CI",
                          per_run=False)
    out: str = _option("results", "folder that receives results/<run-id>/", per_run=False)
    per_strategy_reports: bool = _option(
        False, "a multi-strategy run also writes report.html into each strategy's folder "
               "(each inlines plotly.js, ~5 MB)", per_run=False, show_default=False)
    # `kvbench run` only
    device: str = _option("auto", "auto, cpu, cuda, cuda:N", kinds=("run",),
                          kind_defaults={"simulate": "cpu"})
    attention_backend: str = _option(
        "auto", "auto (triton on CUDA, torch on CPU), triton, torch", kinds=("run",),
        kind_defaults={"simulate": "torch"})
    cpu_threads: int = _option(1, "torch threads on the CPU", kinds=("run",))
    enforce_eager: bool = _option(
        True, "CUDA: run decode steps eagerly; --no-enforce-eager captures them in CUDA graphs "
              "(not yet checked on a GPU)", kinds=("run",), negatable=True)
    engine_kind: str = _option(
        "kvbench", "hf: replay through transformers' generate() instead", flag="--engine",
        kinds=("run",), choices=("kvbench", "hf"))
    # `kvbench simulate` only
    gpu: str | None = _option(
        None, "GPU preset: a100-40gb, a100-80gb, h100-80gb, h200, l4, rtx-4090",
        kinds=("simulate",), kind_defaults={"simulate": "a100-80gb"})
    gpu_spec: str | None = _option(
        None, "a GPU described in a TOML file (docs/simulator.md); replaces --gpu",
        kinds=("simulate",), metavar="FILE.toml", show_default=False)
    tensor_parallel_size: int = _option(
        1, "GPUs in one tensor-parallel group (as vLLM's -tp)", kinds=("simulate",))

    @classmethod
    def for_kind(cls, kind: str, **values: Any) -> RunOptions:
        """The options of `kvbench <kind>`: that command's defaults, then `values`."""
        check_kind_name(kind)
        defaults = {f.name: _spec(f).kind_defaults[kind] for f in dataclasses.fields(cls)
                    if kind in _spec(f).kind_defaults}
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


def _unpack(hint: Any) -> tuple[type, bool, bool]:
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True, False
    if typing.get_origin(hint) is tuple:
        return args[0], False, True
    return hint, False, False


def check_kind_name(kind: str) -> None:
    if kind not in KINDS:
        raise KvbenchInputError(f"unknown kind {kind!r} (choose from {', '.join(KINDS)})")


__all__ = ["KINDS", "OptionField", "OptionSpec", "RunOptions", "option_fields", "per_run_fields"]
