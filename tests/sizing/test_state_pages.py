"""A state-space hybrid's pool as vLLM lays it out: the attention block size raised so one
attention page holds one layer's state (vllm/platforms/interface.py
`Platform._align_hybrid_block_size`), KV cache groups of equal pages, one block per state
group a request; and `kvbench estimate`'s figures from it."""

from __future__ import annotations

import json

import pytest

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.models.presets import PRESETS
from kvbench.sizing.estimate import EstimateInputs, estimate_kv
from kvbench.sizing.state_pages import raised_block_size, state_pages, state_refusal
from kvbench.sizing.vllm_startup import VllmFlags, vllm_startup
from tests.models.published_hybrid_configs import GRANITE_4_H_SMALL_CONFIG

GiB = 2**30


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# (preset, state bytes a layer, attention bytes a layer-token, block size by vLLM's formula:
# 16 x cdiv(state, 16 x attention token), attention groups, state groups)
CASES = [
    ("qwen3-next-80b-a3b", 1_097_728, 2 * 2 * 256 * 2, 544, 1, 3),
    ("granite-4.0-h-small", 2_147_840, 2 * 8 * 128 * 2, 528, 1, 9),
    ("nemotron-h-8b", 4_255_744, 2 * 8 * 128 * 2, 1040, 1, 6),
]


@pytest.mark.parametrize("preset, state, token, block, attention_groups, state_groups", CASES)
def test_block_size_is_raised_until_an_attention_page_holds_a_state(
        preset, state, token, block, attention_groups, state_groups):
    assert block == 16 * _cdiv(state, 16 * token)
    pages = state_pages(PRESETS[preset], 2, 2)
    assert pages.block_size == block and pages.page_bytes == block * token >= state
    assert pages.state_bytes_per_layer == state
    assert (pages.attention_groups, pages.state_groups, pages.padding_layers) == (
        attention_groups, state_groups, 0)
    assert pages.block_bytes == pages.page_bytes * pages.group_size


def test_an_fp8_kv_cache_raises_the_block_twice_as_far_and_keeps_the_state_dtype():
    bf16 = state_pages(PRESETS["granite-4.0-h-small"], 2, 2)
    fp8 = state_pages(PRESETS["granite-4.0-h-small"], 1, 2)
    assert fp8.state_bytes_per_layer == bf16.state_bytes_per_layer
    assert fp8.block_size == 16 * _cdiv(2_147_840, 16 * 2048) == 1056


def test_a_block_size_that_already_holds_the_state_is_kept():
    assert raised_block_size(1000, 100, 16) == 16
    assert raised_block_size(100_000, 100, 2048) == 2048
    # aligned to the given block, then to 16
    assert raised_block_size(100_000, 100, 64) == 1024


def test_estimate_capacity_counts_blocks_as_vllm_does():
    est = estimate_kv(EstimateInputs(model=PRESETS["qwen3-next-80b-a3b"], context=8192,
                                     kv_memory=40 * GiB))
    pages = est.state_pages
    blocks = 40 * GiB // pages.block_bytes
    per_request = _cdiv(8192, 544) + 3
    assert est.max_concurrency == blocks // per_request
    assert est.kv_capacity_tokens == blocks * 544
    assert est.kv_bytes_per_request == 8192 * 24576 + 36 * 1_097_728
    assert est.strategies["paged"].blocks_per_request == per_request
    assert list(est.strategies) == ["paged"]


def test_vllm_startup_of_a_hybrid_uses_the_raised_block_and_one_pool():
    model = PRESETS["nemotron-h-8b"]
    startup = vllm_startup(model, 80 * GiB, VllmFlags(max_model_len=8192))
    pool = startup.pool
    assert startup.block_size == 1040 and pool.block_size == 1040
    assert pool.num_blocks == startup.stages[0].available // pool.block_bytes
    assert pool.blocks_per_request == _cdiv(8192, 1040) + 6
    assert pool.max_concurrency == pool.num_blocks / pool.blocks_per_request


def test_vllm_refuses_a_max_model_len_whose_request_does_not_fit():
    pages = state_pages(PRESETS["qwen3-next-80b-a3b"], 2, 2)
    available = pages.bytes_per_request(262144) - 1
    why = state_refusal(pages, available, 262144)
    longest = 544 * ((available // pages.block_bytes) - 3)  # whole attention blocks left
    assert "max_model_len 262,144" in why and f"--max-model-len {longest})" in why
    assert pages.bytes_per_request(longest) <= available < pages.bytes_per_request(longest + 1)
    assert state_refusal(pages, available + 1, 262144) is None
    assert "No available memory" in state_refusal(pages, 0, 262144)


def test_pipeline_parallelism_is_refused_for_a_hybrid():
    with pytest.raises(KvbenchInputError, match="pipeline-parallel"):
        vllm_startup(PRESETS["granite-4.0-h-small"], 80 * GiB,
                     VllmFlags(pipeline_parallel_size=2))


def test_estimate_cli_on_a_published_config_folder(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(GRANITE_4_H_SMALL_CONFIG))
    assert main(["estimate", "--model", str(tmp_path), "--gpu", "h100-80gb",
                 "--context", "8192"]) == 0
    out = capsys.readouterr().out
    for text in ("state per sequence", "77,322,240 B", "528 tokens", "2,162,688 B",
                 "1 attention + 9 state", "paged (block 528)"):
        assert text in out
    assert main(["estimate", "--model", str(tmp_path), "--kv-memory", "20GiB",
                 "--context", "4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state_pages"]["block_size"] == 528
    assert data["max_concurrency"] == 20 * GiB // (528 * 4096 * 4) // (_cdiv(4096, 528) + 9)
