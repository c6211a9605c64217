"""The `accuracy` section of fp8 runs: token agreement and prefill logit error against the
unquantized cache."""

from __future__ import annotations

import warnings

import pytest

from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.session.fp8_accuracy import _rows, _sample, _token_agreement, measure_fp8_accuracy
from kvbench.workloads import load_workload

MODELS: dict = {}


@pytest.fixture(scope="module")
def chat_requests():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_workload("chat", 6, 0, 2048, max_model_len=2048).requests


def test_accuracy_section_on_chat_is_present_and_plausible(chat_requests):
    acc = measure_fp8_accuracy(
        EngineConfig(strategy="fp8", kv_memory="8MiB"), chat_requests, sample_size=3,
        model_cache=MODELS,
    )
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


def test_prefix_with_fp8_and_peaked_weights(chat_requests):
    """`prefix --kv-cache-dtype fp8` is measured too; `init_std` loads other weights."""
    config = EngineConfig(strategy="prefix", kv_cache_dtype="fp8", kv_memory="8MiB")
    acc = measure_fp8_accuracy(config, chat_requests[:2], sample_size=1, init_std=0.05,
                               model_cache={})
    assert acc["init_std"] == 0.05 and acc["num_requests_compared"] == 2
    assert acc["prefill_logit_abs_err_mean"] > 0


def test_unquantized_config_is_refused():
    with pytest.raises(KvbenchInputError, match="fp8"):
        measure_fp8_accuracy(EngineConfig(strategy="paged"), [])


def test_requests_that_do_not_fit_are_left_out():
    requests = [Request(0, 0.0, tuple(range(1, 20)), 4), Request(1, 0.0, tuple(range(600)), 4)]
    # 128 KiB: 64 fp32 slots for the reference, 256 fp8 slots; 600 tokens fit neither
    acc = measure_fp8_accuracy(EngineConfig(strategy="fp8", kv_memory=64 * 2048), requests,
                               model_cache=MODELS)
    assert acc["num_requests_compared"] == 1 and acc["num_requests_skipped"] == 1


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
