"""The `accuracy` section of fp8 runs: token agreement and prefill logit error against the
unquantized cache, measured on the run's own engine and tokens."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.engine_kind import EngineKind
from kvbench.core.request import Request
from kvbench.execution.model_executor import ModelExecutor
from kvbench.models.loader import load_model
from kvbench.session.fp8_accuracy import _rows, _sample, _token_agreement, measure_fp8_accuracy
from kvbench.session.run_config import ExecutorConfig, RunConfig
from kvbench.session.runner import measures_fp8_accuracy
from kvbench.workloads import load_workload

MODELS: dict = {}


@pytest.fixture(scope="module")
def chat_requests():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_workload("chat", 6, 0, 2048, max_model_len=2048).requests


def finished_run(config: EngineConfig, requests, models=MODELS):
    """The engine of `config` after it ran `requests` (as a run leaves it)."""
    built = build_engine(config, model_cache=models)
    for request in requests:
        built.engine.add_request(request)
    built.engine.run_to_completion()
    return built


def test_accuracy_section_on_chat_is_present_and_plausible(chat_requests):
    config = EngineConfig(strategy="fp8", kv_memory="8MiB")
    acc = measure_fp8_accuracy(finished_run(config, chat_requests), config, chat_requests,
                               sample_size=3)
    assert acc["kv_cache_dtype"] == "fp8_e4m3"
    assert acc["reference_kv_cache_dtype"] == "float32"
    assert acc["reference_strategy"] == "paged"
    assert acc["num_requests_compared"] == 6 and acc["num_requests_skipped"] == 0
    assert acc["num_tokens_compared"] == sum(r.output_len for r in chat_requests)
    assert 0 <= acc["greedy_agreement_prefix"] <= 1
    assert 0 <= acc["greedy_agreement_overall"] <= 1
    assert acc["num_prefill_rows"] > 0
    # e4m3 keeps the logits within a few percent of their scale; a broken dequantization
    # (wrong scale, garbage) would give errors of the order of the logits themselves
    assert 0 < acc["prefill_logit_abs_err_mean"] < 0.1 * acc["prefill_logit_abs_mean"]
    assert acc["prefill_logit_abs_err_mean"] <= acc["prefill_logit_abs_err_max"]
    assert acc["prefill_top1_agreement"] > 0.8
    quartiles = acc["prefill_top1_agreement_by_margin_quartile"]
    assert len(quartiles) == 4 and quartiles[-1] >= quartiles[0]  # flips are near-ties
    assert "flat logits" in acc["note"]
    assert len(acc["kv_scales"]["k"]) == 4 and all(s > 0 for s in acc["kv_scales"]["v"])


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_reference_of_an_unquantized_run_is_the_run_itself(chat_requests, temperature):
    # Measured on a run whose cache is not quantized, the reference chooses, position by
    # position and with the run's seeds, the tokens the run generated: any misalignment of
    # positions, logits or sampling keys would show as disagreement.
    config = EngineConfig(strategy="paged", kv_memory="8MiB", temperature=temperature)
    acc = measure_fp8_accuracy(finished_run(config, chat_requests), config, chat_requests,
                               sample_size=2)
    assert acc["greedy_agreement_prefix"] == 1.0 and acc["greedy_agreement_overall"] == 1.0
    assert acc["num_tokens_compared"] == sum(r.output_len for r in chat_requests)
    assert acc["prefill_logit_abs_err_max"] < 1e-4 * acc["prefill_logit_abs_mean"]
    assert acc["kv_scales"] == {}


def test_prefix_with_fp8_and_peaked_weights(chat_requests):
    """`prefix --kv-cache-dtype fp8` is measured too, on a model of larger weights."""
    config = EngineConfig(strategy="prefix", kv_cache_dtype="fp8", kv_memory="8MiB")
    models = {("tiny", "float32", "cpu", 0): load_model("tiny", init_std=0.05)}
    acc = measure_fp8_accuracy(finished_run(config, chat_requests[:2], models), config,
                               chat_requests[:2], sample_size=1)
    assert acc["num_requests_compared"] == 2
    assert acc["prefill_logit_abs_err_mean"] > 0


def test_the_runs_of_the_model_with_an_fp8_cache_measure_it():
    def run(kind=EngineKind.MODEL, **engine):
        return RunConfig(engine=EngineConfig(**engine), executor=ExecutorConfig(kind=kind))

    assert measures_fp8_accuracy(run(strategy="fp8"))
    assert measures_fp8_accuracy(run(strategy="prefix", kv_cache_dtype="fp8"))
    assert not measures_fp8_accuracy(run(strategy="paged"))
    assert not measures_fp8_accuracy(run(EngineKind.SIMULATED, strategy="fp8"))


def test_requests_the_run_did_not_finish_are_left_out():
    requests = [Request(0, 0.0, tuple(range(1, 20)), 4), Request(1, 0.0, tuple(range(1, 40)), 4)]
    config = EngineConfig(strategy="fp8", kv_memory=64 * 2048)
    built = finished_run(config, requests[:1])
    acc = measure_fp8_accuracy(built, config, requests)
    assert acc["num_requests_compared"] == 1 and acc["num_requests_skipped"] == 1
    assert acc["num_tokens_compared"] == 4


def test_long_sequences_are_prefilled_in_chunks_of_the_step_budget(monkeypatch):
    # A reference step never exceeds --max-num-batched-tokens (what the budget allowed the
    # activations); chunked, its logits are those of one whole prefill.
    requests = [Request(0, 0.0, tuple(range(1, 60)), 6)]
    whole = EngineConfig(strategy="fp8", kv_memory="1MiB", max_model_len=128)
    chunked = dataclasses.replace(whole, max_num_batched_tokens=16, chunked_prefill=True)
    runs = {c.max_num_batched_tokens: finished_run(c, requests) for c in (whole, chunked)}
    steps: list[int] = []
    execute = ModelExecutor.execute

    def recorded(self, batch):
        steps.append(batch.num_tokens)
        return execute(self, batch)

    monkeypatch.setattr(ModelExecutor, "execute", recorded)
    results = [measure_fp8_accuracy(runs[None], whole, requests)]
    assert steps == [59, 64]  # the prompt through the run's cache, then the reference's
    steps.clear()
    results.append(measure_fp8_accuracy(runs[16], chunked, requests))
    assert max(steps) == 16 and sum(steps) == 59 + 64
    assert results[0]["num_prefill_rows"] == results[1]["num_prefill_rows"] == 59
    # (the reference's figures: the two runs' fp8 scales come from differently sized first
    # writes)
    for key in ("prefill_logit_abs_mean", "prefill_top1_margin_mean"):
        assert results[1][key] == pytest.approx(results[0][key], rel=1e-4), key


def test_token_agreement_counts_prefix_and_overall():
    ref = [[[1, 2, 3, 4]], [[5, 6], [7, 8]]]
    got = [[[1, 2, 9, 4]], [[5, 6], [0, 8]]]
    result = _token_agreement(ref, got)
    assert result["greedy_agreement_prefix"] == pytest.approx((2 / 4 + 1 + 0) / 3)
    assert result["greedy_agreement_overall"] == pytest.approx(6 / 8)
    assert result["num_sequences_compared"] == 3


def test_sampled_rows_and_requests_are_spread_and_deterministic():
    assert _rows(5) == [0, 1, 2, 3, 4]
    rows = _rows(1000)
    assert rows[0] == 0 and rows[-1] == 999 and len(rows) == 64
    requests = list(range(10))
    assert _sample(requests, 3) == [0, 3, 6] and _sample(requests, 20) == requests
