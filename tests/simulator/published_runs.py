"""Published vLLM serving measurements and the `kvbench simulate` command that replays each.

Each run states its model, GPU, vLLM version, input/output lengths and load; its figures are
copied from the source as printed (`vllm bench serve` or `vllm bench latency` output). The
replays use the `uniform` workload (fixed lengths, no shared prefixes: vLLM's `random` dataset
with its default `--random-range-ratio 0`), `--defaults vllm` (vLLM v1's engine defaults) and
`--batching vllm-v1` (with `simulate`'s default front-end latency, vLLM's API server's, but
for the `vllm bench latency` runs, which have no server: `--frontend-latency-ms 0`); all
requests arrive at once (`--request-rate inf`, the default of both
tools) unless `--max-concurrency` caps them, as vLLM's client does.

`docs/simulator.md` ("Checked against published serving runs") tables predicted against
published; `python -m tests.simulator.published_runs` prints that table from the current model.
`tests/simulator/test_prediction_regressions.py` pins every replay's prediction.
"""

from __future__ import annotations

import math
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

# The page that prints each run's figures, by name (`published_sources.toml`, beside this file).
SOURCES: dict[str, str] = tomllib.loads(
    Path(__file__).with_name("published_sources.toml").read_text(encoding="utf-8"))["sources"]
GPUSTACK_QWEN3_14B_A100 = SOURCES["gpustack-qwen3-14b-a100"]
GPUSTACK_QWEN3_32B_A100 = SOURCES["gpustack-qwen3-32b-a100"]
GPUSTACK_QWEN3_14B_H100 = SOURCES["gpustack-qwen3-14b-h100"]
GPUSTACK_QWEN3_32B_H100 = SOURCES["gpustack-qwen3-32b-h100"]
GPUSTACK_QWEN3_8B_H100_LATENCY = SOURCES["gpustack-qwen3-8b-h100-latency"]
BUILDKITE = SOURCES["vllm-ci-build-9515"]
RTX4090_MISTRAL = SOURCES["mushfiqrahman-mistral-7b-rtx4090"]
L4_QWEN = SOURCES["wmx-qwen-0-5b-l4"]
# Model configs and a trace the replays below read, by their path from the repository root
# (where the replays run).
REPOSITORY = Path(__file__).parents[2]
DATA = Path("tests/simulator/published_data")
# Most runs are of vLLM v0.11, which scheduled synchronously (async scheduling became
# vLLM's default in 0.14, and is `vllm-v1`'s default here); the RTX 4090 page names no
# version and is replayed as they are; the L4's v0.23 scheduled asynchronously.
VLLM_DEFAULTS = ["simulate", "--defaults", "vllm", "--batching", "vllm-v1",
                 "--no-async-scheduling", "--workload", "uniform"]
ASYNC_VLLM_DEFAULTS = [a for a in VLLM_DEFAULTS if a != "--no-async-scheduling"]


@dataclass(frozen=True)
class PublishedRun:
    """One published measurement: where it is, how it was run, what it printed."""

    name: str
    source: str  # URL of the page that prints the figures
    setting: str  # GPU, vLLM version, load, as the source states them
    args: list[str]  # `kvbench` arguments of the replay
    published: dict[str, float]  # figures as printed: output_tok_s, ttft_mean_ms, ...
    notes: str = ""
    low_concurrency: bool = field(default=False)

    @property
    def command(self) -> str:
        return "kvbench " + " ".join(self.args)


def _random_burst(model: str, gpu: str, prompt_len: int, output_len: int, requests: int,
                  *extra: str) -> list[str]:
    return [*VLLM_DEFAULTS, "--model", model, "--gpu", gpu,
            "--workload-param", f"prompt_len={prompt_len}",
            "--workload-param", f"output_len={output_len}",
            "--num-requests", str(requests), *extra]


def _gpustack_random(model: str, gpu: str, source: str, gpu_words: str, prompt_len: int,
                     output_len: int, published: dict[str, float], notes: str = ""
                     ) -> PublishedRun:
    return PublishedRun(
        name=f"{model} {gpu} random {prompt_len}/{output_len} x 500",
        source=source,
        setting=(f"{gpu_words}, vLLM v0.11.0 (`vllm serve Qwen/{model.title()}`), "
                 f"`vllm bench serve --dataset-name random --random-input-len {prompt_len} "
                 f"--random-output-len {output_len} --num-prompts 500`, all at once"),
        args=_random_burst(model, gpu, prompt_len, output_len, 500),
        published=published, notes=notes)


def _rtx4090_mistral(concurrency: int, published: dict[str, float]) -> PublishedRun:
    return PublishedRun(
        name=f"mistral-7b-v0.3 rtx-4090 random 256/128 concurrency {concurrency}",
        source=RTX4090_MISTRAL,
        setting=("1 x RTX 4090 (24GB), vLLM (version not stated; `--tokenizer-mode mistral`, "
                 "OpenAI-compatible server), mistralai/Mistral-7B-Instruct-v0.3, 256 input / "
                 f"128 output tokens, 300 prompts at an infinite rate, `--max-concurrency "
                 f"{concurrency}`"),
        args=[*VLLM_DEFAULTS[:-2], "--workload", str(DATA / "rtx4090-mistral-256-in.jsonl"),
              "--model", str(DATA / "mistral-7b-instruct-v0.3"), "--gpu", "rtx-4090",
              "--max-concurrency", str(concurrency)],
        published=published,
        notes=("the page's output tok/s over req/s is 100 tokens a request at every "
               "concurrency (210 / 2.09, 377 / 3.78, 644 / 6.44): outputs end at EOS, not all "
               "at 128 (no `--ignore-eos`); the replay's trace spreads them evenly over 72-128 "
               "(mean 100) in a seeded order"),
        low_concurrency=True)


def _l4_qwen(concurrency: int, published: dict[str, float]) -> PublishedRun:
    return PublishedRun(
        name=f"qwen2.5-0.5b l4 random 256/128 concurrency {concurrency}",
        source=L4_QWEN,
        setting=("1 x L4 (GKE g2-standard-4), vLLM v0.23.0 (V1), Qwen/Qwen2.5-0.5B-Instruct, "
                 "`--gpu-memory-utilization 0.6 --max-model-len 8192`, `vllm bench serve`, 256 "
                 "input / 128 output tokens, `--ignore-eos`, `--request-rate inf "
                 f"--max-concurrency {concurrency}`"),
        args=[*ASYNC_VLLM_DEFAULTS, "--model", str(DATA / "qwen2.5-0.5b-instruct"), "--gpu", "l4",
              "--gpu-memory-utilization", "0.6", "--max-model-len", "8192",
              "--workload-param", "prompt_len=256", "--workload-param", "output_len=128",
              "--num-requests", "100", "--max-concurrency", str(concurrency)],
        published=published,
        notes="the number of prompts is not stated (100 replayed)",
        low_concurrency=True)


PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    _gpustack_random("qwen3-14b", "a100-80gb", GPUSTACK_QWEN3_14B_A100, "1 x A100 80GB", 4000, 200, {
        "output_tok_s": 245.13, "ttft_mean_ms": 197625.03, "ttft_p50_ms": 196621.85,
        "tpot_mean_ms": 254.61, "tpot_p50_ms": 272.93}),
    _gpustack_random("qwen3-14b", "a100-80gb", GPUSTACK_QWEN3_14B_A100, "1 x A100 80GB", 2000, 100, {
        "output_tok_s": 284.64, "ttft_mean_ms": 86908.30, "ttft_p50_ms": 86575.09,
        "tpot_mean_ms": 301.73, "tpot_p50_ms": 334.17}),
    _gpustack_random("qwen3-32b", "a100-80gb", GPUSTACK_QWEN3_32B_A100, "1 x A100 80GB", 4000, 200, {
        "output_tok_s": 87.48, "ttft_mean_ms": 566579.70, "ttft_p50_ms": 564705.97,
        "tpot_mean_ms": 96.19, "tpot_p50_ms": 96.40}),
    _gpustack_random("qwen3-32b", "a100-80gb", GPUSTACK_QWEN3_32B_A100, "1 x A100 80GB", 2000, 100, {
        "output_tok_s": 120.27, "ttft_mean_ms": 208397.03, "ttft_p50_ms": 209108.79,
        "tpot_mean_ms": 143.23, "tpot_p50_ms": 143.96}),
    _gpustack_random("qwen3-14b", "h100-80gb", GPUSTACK_QWEN3_14B_H100, "1 x H100 SXM", 4000, 200, {
        "output_tok_s": 438.56, "ttft_mean_ms": 112716.92, "ttft_p50_ms": 110734.54,
        "tpot_mean_ms": 132.45, "tpot_p50_ms": 139.68},
        notes="fits `sustained_compute_fraction` of the H100"),
    _gpustack_random("qwen3-14b", "h100-80gb", GPUSTACK_QWEN3_14B_H100, "1 x H100 SXM", 2000, 100, {
        "output_tok_s": 505.51, "ttft_mean_ms": 50716.13, "ttft_p50_ms": 49138.28,
        "tpot_mean_ms": 206.51, "tpot_p50_ms": 231.62},
        notes="fits `sustained_compute_fraction` of the H100"),
    _gpustack_random("qwen3-32b", "h100-80gb", GPUSTACK_QWEN3_32B_H100, "1 x H100 (SXM, PCIe or NVL: "
                     "not stated)", 4000, 200, {
        "output_tok_s": 102.21, "ttft_mean_ms": 482284.21, "ttft_p50_ms": 483375.28,
        "tpot_mean_ms": 66.61, "tpot_p50_ms": 62.08},
        notes="GPU variant not stated; ~8 requests fit the KV cache"),
    _gpustack_random("qwen3-32b", "h100-80gb", GPUSTACK_QWEN3_32B_H100, "1 x H100 (SXM, PCIe or NVL: "
                     "not stated)", 2000, 100, {
        "output_tok_s": 152.42, "ttft_mean_ms": 163909.40, "ttft_p50_ms": 164148.38,
        "tpot_mean_ms": 86.62, "tpot_p50_ms": 84.24},
        notes="GPU variant not stated; ~17 requests fit the KV cache"),
    PublishedRun(
        name="qwen3-8b h100-80gb sharegpt concurrency 4",
        source=GPUSTACK_QWEN3_8B_H100_LATENCY,
        setting=("1 x H100 SXM, vLLM v0.11.0 (`vllm serve Qwen/Qwen3-8B`), `vllm bench serve "
                 "--dataset-name sharegpt --num-prompts 100 --max-concurrency 4`"),
        args=_random_burst("qwen3-8b", "h100-80gb", 233, 221, 100, "--max-concurrency", "4"),
        published={"output_tok_s": 496.88, "ttft_mean_ms": 64.00, "ttft_p50_ms": 60.26,
                   "tpot_mean_ms": 7.38, "tpot_p50_ms": 7.40},
        notes="ShareGPT lengths replaced by their means (23,260 / 100 in, 22,061 / 100 out)",
        low_concurrency=True),
    PublishedRun(
        name="llama-3.1-8b h200 latency batch 8",
        source=BUILDKITE,
        setting=("1 x H200, vLLM's CI (vLLM main at that build), `latency_llama8B_tp1`: "
                 "`vllm bench latency`, batch 8, 32 in / 128 out"),
        args=[*VLLM_DEFAULTS, "--model", "llama-3-8b", "--gpu", "h200",
              "--workload-param", "prompt_len=32", "--workload-param", "output_len=128",
              "--num-requests", "8", "--warmup", "0", "--frontend-latency-ms", "0"],
        published={"e2e_mean_ms": 833.421},
        notes="Llama-3.1-8B has llama-3-8b's shapes",
        low_concurrency=True),
    PublishedRun(
        name="llama-3-70b h200 tp 4 latency batch 8",
        source=BUILDKITE,
        setting=("4 x H200 (tensor parallel), vLLM's CI (vLLM main at that build), "
                 "`latency_llama70B_tp4`: `vllm bench latency`, batch 8, 32 in / 128 out"),
        args=[*VLLM_DEFAULTS, "--model", "llama-3-70b", "--gpu", "h200",
              "--tensor-parallel-size", "4",
              "--workload-param", "prompt_len=32", "--workload-param", "output_len=128",
              "--num-requests", "8", "--warmup", "0", "--frontend-latency-ms", "0"],
        published={"e2e_mean_ms": 2077.53},
        low_concurrency=True),
    _rtx4090_mistral(4, {"output_tok_s": 210, "ttft_mean_ms": 63, "ttft_p50_ms": 53}),
    _rtx4090_mistral(8, {"output_tok_s": 377, "ttft_mean_ms": 79, "ttft_p50_ms": 55}),
    _rtx4090_mistral(16, {"output_tok_s": 644, "ttft_mean_ms": 155, "ttft_p50_ms": 97}),
    _l4_qwen(1, {"output_tok_s": 168, "ttft_p50_ms": 27.0, "itl_p50_ms": 5.1,
                 "e2e_p50_ms": 679}),
    _l4_qwen(4, {"output_tok_s": 698, "ttft_p50_ms": 50.1, "itl_p50_ms": 5.3,
                 "e2e_p50_ms": 722}),
    _l4_qwen(8, {"output_tok_s": 1312, "ttft_p50_ms": 60.9, "itl_p50_ms": 5.5,
                 "e2e_p50_ms": 772}),
)

# Aims of docs/simulator.md: throughput and TPOT within 20%, TTFT within a factor of 2.
THROUGHPUT_AIM = 0.20
TTFT_FACTOR_AIM = 2.0


def within_aims(figure: str, predicted: float, published: float) -> bool:
    if figure.startswith("ttft"):
        return abs(math.log(predicted / published)) <= math.log(TTFT_FACTOR_AIM)
    return abs(predicted / published - 1) <= THROUGHPUT_AIM


FIGURE_TITLES = {
    "output_tok_s": "output tok/s", "ttft_mean_ms": "TTFT mean (ms)",
    "ttft_p50_ms": "TTFT median (ms)", "tpot_mean_ms": "TPOT mean (ms)",
    "tpot_p50_ms": "TPOT median (ms)", "itl_p50_ms": "ITL median (ms)",
    "e2e_p50_ms": "E2E median (ms)", "e2e_mean_ms": "batch latency (ms)",
}


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def _cell(figure: str, predicted: float, published: float) -> str:
    miss = "" if within_aims(figure, predicted, published) else " **miss**"
    error = predicted / published - 1
    return f"{_number(published)} → {_number(predicted)} ({error:+.1%}){miss}"


def table(predictions: dict[str, dict[str, float]]) -> str:
    """docs/simulator.md's table: per run and figure, published → predicted (error)."""
    head = "| # | run | " + " | ".join(FIGURE_TITLES.values()) + " |"
    lines = [head, "|---|---|" + "---|" * len(FIGURE_TITLES)]
    for number, run in enumerate(PUBLISHED_RUNS, 1):
        cells = [_cell(f, predictions[run.name][f], run.published[f]) if f in run.published
                 else "" for f in FIGURE_TITLES]
        lines.append(f"| {number} | {run.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    from tests.simulator.test_prediction_regressions import published_run_predictions

    print(table(published_run_predictions()))
    for number, run in enumerate(PUBLISHED_RUNS, 1):
        print(f"\n{number}. {run.name}: [source]({run.source}); {run.setting}"
              + (f"; {run.notes}" if run.notes else "") + f"\n   `{run.command}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
