"""`kvbench` command line. Exit codes: 0 ok, 2 bad usage/input, 1 failure while running, 130 Ctrl-C."""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import click

from kvbench.errors import KvbenchInputError, KvbenchRunError

DEFAULT_OUT = "results"


def _fail_usage(message: str) -> None:
    raise KvbenchInputError(message)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft=500ms,tpot=50ms` -> {"ttft": 500.0, "tpot": 50.0} (milliseconds)."""
    from kvbench.units import parse_duration_s

    if not text:
        return {}
    slo: dict[str, float] = {}
    for item in _split(text):
        key, sep, value = item.partition("=")
        key = key.strip().removesuffix(".p99").removesuffix(".mean")
        if not sep or key not in ("ttft", "tpot", "e2e"):
            _fail_usage(f"cannot read --slo item {item!r}: use ttft=500ms,tpot=50ms (or e2e=)")
        slo[key] = parse_duration_s(value) * 1e3
    return slo


def run_options(func=None, *, dtype_default: str = "float32"):
    """Options shared by `run` and `simulate` (vLLM's names where vLLM has the option)."""
    if func is None:
        return functools.partial(run_options, dtype_default=dtype_default)
    options = [
        click.option("--strategy", default="paged", show_default=True,
                     help="contiguous, paged, prefix, fp8; a comma list or 'all'"),
        click.option("--batching", default="continuous", show_default=True,
                     help="continuous or static (comma list allowed)"),
        click.option("--reserve", default="max", show_default=True,
                     help="contiguous reservation: max, pow2, exact (comma list allowed)"),
        click.option("--workload", default="chat", show_default=True,
                     help="built-in workload name or a .jsonl trace file"),
        click.option("--workload-param", "workload_params", multiple=True, metavar="KEY=VALUE",
                     help="workload parameter (see `kvbench list`), repeatable"),
        click.option("--num-requests", type=int, default=None,
                     help="requests to replay [default: 64; a trace: all of it]"),
        click.option("--model", default="tiny", show_default=True,
                     help="preset name or local Hugging Face folder"),
        click.option("--dtype", default=dtype_default, show_default=True,
                     help="float32, bfloat16, float16"),
        click.option("--kv-cache-dtype", default="auto", show_default=True,
                     help="auto (= --dtype) or fp8"),
        click.option("--kv-memory", default=None,
                     help="KV arena budget, e.g. 64MiB, 2GB [default: 64MiB off CUDA]"),
        click.option("--gpu-memory-utilization", type=float, default=None,
                     help="CUDA: share of device memory for the engine (as vLLM) [0.9]"),
        click.option("--block-size", type=int, default=16, show_default=True),
        click.option("--max-num-seqs", type=int, default=256, show_default=True),
        click.option("--max-num-batched-tokens", type=int, default=None,
                     help="token budget per step [default: max(2048, max-model-len)]"),
        click.option("--max-model-len", type=int, default=None,
                     help="[default: the model's maximum positions]"),
        click.option("--chunked-prefill/--no-chunked-prefill", default=False, show_default=True),
        click.option("--temperature", type=float, default=0.0, show_default=True,
                     help="0 = greedy"),
        click.option("--kv-scale", type=float, default=None,
                     help="fp8 KV: fixed scale for every layer [default: amax/224 of the first "
                          "write per layer]"),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--request-rate", default="inf", show_default=True,
                     help="Poisson arrival rate in requests/s; inf = all at t=0"),
        click.option("--burstiness", type=float, default=1.0, show_default=True,
                     help="gamma arrivals shape (1 = Poisson)"),
        click.option("--max-concurrency", type=int, default=None,
                     help="closed loop: at most this many requests in flight"),
        click.option("--warmup", type=int, default=2, show_default=True,
                     help="requests run first and excluded from every metric"),
        click.option("--slo", default=None, help="goodput targets, e.g. ttft=500ms,tpot=50ms"),
        click.option("--repeat", type=int, default=1, show_default=True,
                     help="run each configuration N times; report mean ± 95% CI"),
        click.option("--out", default=DEFAULT_OUT, show_default=True,
                     help="folder that receives results/<run-id>/"),
        click.option("--trace", is_flag=True, help="write trace.json (Chrome trace format)"),
        click.option("--quiet", is_flag=True, help="no progress or table; print the folder"),
        click.option("--json", "as_json", is_flag=True, help="print summary.json to stdout"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _expand_runs(params: dict[str, Any], engine_kind: str, gpu: str | None):
    """One RunConfig per strategy × reserve × batching in the comma lists."""
    from kvbench.bench.run_config import RunConfig
    from kvbench.config import EngineConfig
    from kvbench.strategies import STRATEGIES, strategy_info
    from kvbench.units import parse_rate
    from kvbench.workloads import is_trace, parse_workload_params

    strategies = list(STRATEGIES) if params["strategy"] == "all" else _split(params["strategy"])
    if not strategies:
        _fail_usage("--strategy is empty")
    for name in strategies:
        strategy_info(name)
    workload_params = (
        {} if is_trace(params["workload"])
        else parse_workload_params(params["workload"], params["workload_params"])
    )
    rate = parse_rate(params["request_rate"])
    runs = []
    for batching in _split(params["batching"]):
        for strategy in strategies:
            reserves = _split(params["reserve"]) if strategy == "contiguous" else ["max"]
            for reserve in reserves:
                engine = EngineConfig(
                    model=params["model"], strategy=strategy, batching=batching, reserve=reserve,
                    block_size=params["block_size"], dtype=params["dtype"],
                    kv_cache_dtype=params["kv_cache_dtype"], kv_memory=params["kv_memory"],
                    gpu_memory_utilization=params["gpu_memory_utilization"],
                    max_num_seqs=params["max_num_seqs"],
                    max_num_batched_tokens=params["max_num_batched_tokens"],
                    max_model_len=params["max_model_len"],
                    chunked_prefill=params["chunked_prefill"],
                    temperature=params["temperature"], seed=params["seed"],
                    kv_scale=params["kv_scale"],
                    device=params.get("device", "auto"),
                    attention_backend=params.get("attention_backend", "auto"),
                    cpu_threads=params.get("cpu_threads", 1),
                )
                runs.append(RunConfig(
                    engine=engine, workload=params["workload"],
                    num_requests=params["num_requests"], workload_params=workload_params,
                    request_rate=rate, burstiness=params["burstiness"],
                    max_concurrency=params["max_concurrency"], warmup=params["warmup"],
                    slo_ms=parse_slo(params["slo"]), trace=params["trace"],
                    engine_kind=engine_kind, gpu=gpu,
                ))
    return runs


def _run_id(labels: list[str], workload: str) -> str:
    stem = Path(workload).stem if workload.endswith(".jsonl") else workload
    what = labels[0] if len(labels) == 1 else "compare"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{what}-{stem}"


def _unique_folder(root: Path, run_id: str) -> Path:
    folder = root / run_id
    k = 2
    while folder.exists():
        folder = root / f"{run_id}-{k}"
        k += 1
    return folder


def execute_runs(params: dict[str, Any], engine_kind: str = "kvbench", gpu: str | None = None):
    from kvbench.bench.runner import prepare, run_one, strategy_label
    from kvbench.report.summary_table import render_summary

    runs = _expand_runs(params, engine_kind, gpu)
    labels = [strategy_label(r) for r in runs]
    if len(set(labels)) != len(labels):
        _fail_usage("the same strategy is listed twice")
    repeat = params.get("repeat", 1)
    if repeat < 1:
        _fail_usage("--repeat must be at least 1")
    model_cache: dict = {}
    prepared = [prepare(run, model_cache) for run in runs]  # every input checked up front
    quiet = params["quiet"]
    for _, workload in prepared[:1]:
        for note in (*workload.notes, workload.clip_message) if not quiet else ():
            if note:
                click.echo(f"kvbench: warning: {note}", err=True)
    root = _unique_folder(Path(params["out"]), _run_id(labels, params["workload"]))
    command = "kvbench " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    outcomes = []
    repeats: list[dict[str, Any]] = []
    for run, label, prep in zip(runs, labels, prepared, strict=True):
        base = root if len(runs) == 1 else root / label
        label_outcomes = []
        for k in range(repeat):
            if not quiet and not params["as_json"]:
                rep = f" (repeat {k + 1}/{repeat})" if repeat > 1 else ""
                click.echo(f"running {label}{rep} ...", err=True)
            folder = base if repeat == 1 else base / f"rep-{k + 1}"
            if k > 0:
                prep = prepare(run, model_cache)  # a fresh engine: identical configuration
            label_outcomes.append(run_one(run, folder, show_progress=not quiet,
                                          command=command, prepared=prep))
        prep = None  # the engine's memory goes back before anything else runs
        if _is_fp8(run):
            _add_accuracy_section(run, label_outcomes, model_cache)
        outcomes.append(label_outcomes[0])
        if repeat > 1:
            from kvbench.bench.repeat import repeat_summary
            from kvbench.bench.results import write_json

            stats = repeat_summary([o.summary for o in label_outcomes])
            write_json(base / "repeat.json", stats)
            repeats.append(stats)
    summaries = [o.summary for o in outcomes]
    if len(runs) > 1:
        _write_comparison(root, outcomes)
    _write_reports(root, outcomes, quiet)
    if params["as_json"]:
        data: Any = summaries[0] if len(summaries) == 1 else summaries
        if repeats:
            data = {"summaries": summaries, "repeats": repeats}
        click.echo(json.dumps(data, indent=2))
    elif quiet:
        click.echo(str(root))
    else:
        click.echo(render_summary(summaries))
        if repeats:
            from kvbench.report.summary_table import render_repeats

            click.echo("\n" + render_repeats(repeats))
        click.echo(f"\nresults: {root}")
    return outcomes


def _is_fp8(run) -> bool:
    return run.engine.strategy == "fp8" or run.engine.kv_cache_dtype in ("fp8", "fp8_e4m3")


def _add_accuracy_section(run, outcomes, model_cache: dict) -> None:
    """fp8 runs: agreement with the unquantized cache on the same requests, same budget."""
    if run.engine_kind != "kvbench":
        return
    import gc

    import torch

    from kvbench.bench.fp8_accuracy import measure_fp8_accuracy
    from kvbench.bench.results import write_json
    from kvbench.bench.runner import prepare

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    first = outcomes[0]
    _, workload = prepare(run, model_cache)
    accuracy = measure_fp8_accuracy(
        run.engine, workload.requests, kv_memory=first.summary["memory"]["kv_budget_bytes"],
        model_cache=model_cache,
    )
    for outcome in outcomes:
        outcome.summary["accuracy"] = accuracy
        write_json(outcome.folder / "summary.json", outcome.summary)


def _write_comparison(root: Path, outcomes) -> None:
    import pandas as pd

    from kvbench.bench.results import write_csv, write_json

    write_json(root / "comparison.json", {
        "runs": [{"label": o.label, "folder": o.folder.name} for o in outcomes],
        "summaries": [o.summary for o in outcomes],
    })
    rows = []
    for o in outcomes:
        s = o.summary
        rows.append({
            "label": o.label, "output_tok_s": s["throughput"].get("output_tok_s"),
            "ttft_p50_ms": s["latency_ms"]["ttft"]["p50"],
            "ttft_p99_ms": s["latency_ms"]["ttft"]["p99"],
            "tpot_p50_ms": s["latency_ms"]["tpot"]["p50"],
            "tpot_p99_ms": s["latency_ms"]["tpot"]["p99"],
            "utilization_mean": s["memory"]["utilization_mean"],
            "preemptions": s["scheduler"]["preemptions"],
            "prefix_hit_rate": s["scheduler"]["prefix_hit_rate"],
        })
    write_csv(root / "comparison.csv", pd.DataFrame(rows))


def _write_reports(root: Path, outcomes, quiet: bool) -> None:
    try:
        from kvbench.report.writer import write_report
    except ImportError:
        return
    for o in outcomes:
        write_report([o.folder], o.folder / "report.html")
    if len(outcomes) > 1:
        write_report([o.folder for o in outcomes], root / "report.html")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvbench")
def cli() -> None:
    """kvbench: measure what KV-cache strategies buy on your model, budget and traffic."""


@cli.command()
@run_options
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N")
@click.option("--attention-backend", default="auto", show_default=True,
              help="auto (triton on CUDA, torch on CPU), triton, torch")
@click.option("--cpu-threads", type=int, default=1, show_default=True,
              help="torch threads on the CPU")
@click.option("--engine", "engine_kind", type=click.Choice(["kvbench", "hf"]), default="kvbench",
              show_default=True, help="hf: replay through transformers' generate() instead")
def run(engine_kind: str, **params: Any) -> None:
    """Replay a workload through the engine with one or more strategies."""
    execute_runs(params, engine_kind=engine_kind)


@cli.command(name="list")
def list_command() -> None:
    """Strategies, batching policies, workloads and model presets."""
    from kvbench.models.presets import PRESETS
    from kvbench.report.text_table import format_table
    from kvbench.scheduling import POLICY_SUMMARIES
    from kvbench.strategies import STRATEGIES
    from kvbench.units import format_bytes
    from kvbench.workloads import WORKLOADS

    click.echo("strategies:")
    for info in STRATEGIES.values():
        click.echo(f"  {info.name:<12} {info.summary}")
    click.echo("\nbatching policies:")
    for name, summary in POLICY_SUMMARIES.items():
        click.echo(f"  {name:<12} {summary}")
    click.echo("\nworkloads (parameters: --workload-param KEY=VALUE):")
    for info in WORKLOADS.values():
        params = ", ".join(f"{k}={v}" for k, v in info.params.items())
        click.echo(f"  {info.name:<14} {info.summary}")
        if params:
            click.echo(f"  {'':<14} {params}")
    click.echo("\nmodel presets:")
    rows = []
    for c in PRESETS.values():
        rows.append([c.name, c.num_layers, c.hidden_size, f"{c.num_heads}/{c.num_kv_heads}",
                     c.head_dim, _params(c.num_parameters()), c.max_position_embeddings,
                     format_bytes(c.kv_bytes_per_token(2))])
    click.echo(format_table(
        ["preset", "layers", "hidden", "heads q/kv", "head dim", "params", "max len",
         "KV/token bf16"], rows))


def _params(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def _register_optional_commands() -> None:
    for module, attr in (
        ("kvbench.cli.estimate", "estimate_command"),
        ("kvbench.cli.simulate", "simulate_command"),
        ("kvbench.cli.report", "report_command"),
        ("kvbench.cli.compare", "compare_command"),
        ("kvbench.cli.sweep", "sweep_command"),
    ):
        try:
            command = getattr(__import__(module, fromlist=[attr]), attr)
        except (ImportError, AttributeError):
            continue
        cli.add_command(command)


_register_optional_commands()


def _error(message: str) -> None:
    click.echo(f"kvbench: error: {message}", err=True)


def main(argv: list[str] | None = None) -> int:
    from kvbench.bench.runner import RunInterrupted

    try:
        result = cli.main(args=argv, prog_name="kvbench", standalone_mode=False)
    except click.exceptions.UsageError as err:
        _error(err.format_message().splitlines()[0] if err.format_message() else str(err))
        return _exit(2)
    except KvbenchInputError as err:
        _error(str(err).splitlines()[0])
        return _exit(2)
    except RunInterrupted as err:
        _error(str(err))
        return _exit(130)
    except (KeyboardInterrupt, click.exceptions.Abort):
        _error("interrupted")
        return _exit(130)
    except KvbenchRunError as err:
        _error(str(err))
        return _exit(1)
    except click.exceptions.Exit as err:
        return _exit(err.exit_code)
    except click.exceptions.ClickException as err:
        _error(err.format_message())
        return _exit(err.exit_code)
    return _exit(result if isinstance(result, int) else 0)


def _exit(code: int) -> int:
    if __name__ == "__main__" or sys.argv and Path(sys.argv[0]).name == "kvbench":
        sys.exit(code)
    return code


__all__ = ["cli", "main", "run_options", "execute_runs"]
