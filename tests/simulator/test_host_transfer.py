"""The transfer-time model of a host KV tier's loads and stores."""

from __future__ import annotations

import pytest

from kvbench.simulator.host_link import HOST_LINKS, HostLink
from kvbench.simulator.host_transfer import (
    arena_fragments_per_block,
    tokens_per_second,
    transfer_seconds,
)

LINK = HostLink("round", "hand-computable", load_bytes_s=1e9, store_bytes_s=5e8,
                latency_s=1e-5, fragment_overhead_s=1e-6)


def test_a_transfer_is_a_fixed_latency_plus_fragments_plus_bytes_over_bandwidth():
    # 4 blocks of 1 MB, 2 fragments each: 10 us + 4 * (2 us + 1 ms)
    assert transfer_seconds(LINK, "load", 4, 10**6, 2) == pytest.approx(1e-5 + 4 * (2e-6 + 1e-3))
    # the store direction has its own bandwidth
    assert transfer_seconds(LINK, "store", 4, 10**6, 2) == pytest.approx(1e-5 + 4 * (2e-6 + 2e-3))


def test_nothing_to_move_takes_no_time():
    assert transfer_seconds(LINK, "load", 0, 10**6) == 0.0


def test_each_transfer_pays_its_latency():
    one = transfer_seconds(LINK, "load", 8, 4096, 1, num_transfers=1)
    four = transfer_seconds(LINK, "load", 8, 4096, 1, num_transfers=4)
    assert four - one == pytest.approx(3 * LINK.latency_s)


def test_time_grows_linearly_in_blocks_and_bytes():
    base = transfer_seconds(LINK, "load", 10, 2**16)
    assert transfer_seconds(LINK, "load", 20, 2**16) - LINK.latency_s == pytest.approx(
        2 * (base - LINK.latency_s))
    assert transfer_seconds(LINK, "load", 10, 2**17) > base


def test_per_layer_fragments_cost_more_than_one_contiguous_block():
    """vLLM's blog: per-layer fragments of 8-72 KB moved at a quarter to a fifth of the rate of
    0.5-2 MB cross-layer blocks on an H100 (PCIe 5); the model's per-fragment cost gives that
    ratio for a Llama-3-8B block of 16 tokens (32 layers, 8 KV heads of 128, bf16)."""
    link = HOST_LINKS["pcie5"]
    layers, block_bytes = 32, 16 * 32 * 2 * 8 * 128 * 2  # 2 MiB: every layer of a block
    per_layer = transfer_seconds(link, "store", 1000, block_bytes,
                                 arena_fragments_per_block(layers))
    cross_layer = transfer_seconds(link, "store", 1000, block_bytes)
    assert 2.0 < per_layer / cross_layer < 6.0


def test_arena_fragments_count_a_k_and_a_v_piece_per_layer_or_one_for_a_latent():
    assert arena_fragments_per_block(32) == 64
    assert arena_fragments_per_block(61, separate_v=False) == 61


def test_tokens_per_second_is_the_long_transfer_rate():
    # a token of 1 KB, blocks of 16 tokens, one fragment: 16 tokens per (1 us + 16 us)
    assert tokens_per_second(LINK, "load", 1000, 16) == pytest.approx(16 / (1e-6 + 16e-6))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        transfer_seconds(LINK, "load", -1, 10)
    with pytest.raises(ValueError):
        transfer_seconds(LINK, "load", 1, 10, fragments_per_block=0)
    with pytest.raises(ValueError):
        transfer_seconds(LINK, "up", 1, 10)
