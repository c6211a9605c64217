"""Each KV group's part of the memory split over a run, and KV held per token: step-weighted
means in bytes, from one split for every layer (paged) or one split per allocation group
(hybrid)."""

from __future__ import annotations

import pytest

from kvbench.core.decode_run_rows import DecodeRunRows
from kvbench.engine.group_memory import GroupMemory, GroupShape
from kvbench.strategies.base import MemorySplit


def test_one_table_for_every_layer_gives_every_group_the_same_slots():
    full, window = GroupShape((3,), None, 100), GroupShape((0, 1, 2), 8, 300)
    sums = GroupMemory((full, window), bytes_per_slot=400, per_group_splits=False)
    sums.add(1.0, MemorySplit(token=10, reserved=2, internal=3, free=85))
    sums.add(3.0, MemorySplit(token=20, reserved=0, internal=5, free=75))
    out = sums.summary()
    f, w = out["kv_groups"]
    assert f["token_bytes_mean"] == pytest.approx((10 * 1 + 20 * 3) / 4 * 100)
    assert w["internal_bytes_mean"] == pytest.approx((3 * 1 + 5 * 3) / 4 * 300)
    assert w["free_bytes_mean"] == pytest.approx((85 + 75 * 3) / 4 * 300)
    assert (f["held_bytes_max"], w["held_bytes_max"]) == (25 * 100, 25 * 300)
    # held slots x 400 B over the tokens: (15 + 25 x 3) / (10 + 20 x 3) slots per token
    assert out["kv_held_bytes_per_token"] == pytest.approx(400 * 90 / 70)


def test_hybrid_groups_keep_their_own_split_and_the_pool_keeps_the_free_slots():
    shapes = (GroupShape((1,), None, 64), GroupShape((0,), 4, 64))
    sums = GroupMemory(shapes, bytes_per_slot=64, per_group_splits=True)
    groups = (MemorySplit(token=40, reserved=1, internal=7), MemorySplit(token=6, internal=2))
    split = MemorySplit(token=46, reserved=1, internal=9, free=944, groups=groups,
                        sequence_tokens=40)
    sums.add(2.0, split)
    f, w = sums.summary()["kv_groups"]
    assert (f["token_bytes_mean"], w["token_bytes_mean"]) == (40 * 64, 6 * 64)
    assert (f["held_bytes_max"], w["held_bytes_max"]) == (48 * 64, 8 * 64)
    assert f["free_bytes_mean"] is None and w["free_bytes_mean"] is None
    # 56 held slots of 64 B for 40 tokens of context (not the 46 token slots)
    assert sums.summary()["kv_held_bytes_per_token"] == pytest.approx(56 * 64 / 40)
    sums.reset()
    assert sums.summary()["kv_held_bytes_per_token"] is None


def test_a_decode_run_and_a_one_step_run_sum_as_their_steps_one_at_a_time():
    shape = (GroupShape((0,), None, 128),)
    stepped, run = (GroupMemory(shape, bytes_per_slot=128, per_group_splits=False)
                    for _ in range(2))
    dts, tokens, held, will = [0.5, 0.25, 0.125], range(10, 16, 2), [16, 16, 32], [12, 14, 20]
    for dt, token, h, w in [*zip(dts, tokens, held, will, strict=True), (0.75, 18, 32, 22)]:
        stepped.add_parts(dt, token, w - token, h - w, 1, 100 - 1 - h)
    books = [(0, 16, 12, 0), (1, 16, 14, 0), (2, 32, 20, 0)]
    three = DecodeRunRows(0, 1.0, [1.5, 1.75, 1.875], 2, 0, 8, books, (0, 0, 0), 1, 0, False,
                          100, 128, 0, 2)
    one = DecodeRunRows(3, 1.875, [2.625], 2, 0, 16, [], (32, 22, 0), 1, 0, False, 100, 128,
                        0, 2)
    run.add_decode_run(three)
    run.add_decode_run(one)
    assert run.summary() == stepped.summary()
    hybrid = GroupMemory(shape, bytes_per_slot=128, per_group_splits=True)
    with pytest.raises(ValueError):
        hybrid.add_decode_run(one)
