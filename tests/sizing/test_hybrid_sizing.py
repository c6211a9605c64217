"""`hybrid`'s page layout and sizes: vLLM's uniform-page-size grouping of a Gemma-3-27B
shape, the per-sequence slots the capacity formula charges, and `kvbench estimate`'s row."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kvbench.cli.estimate import estimate_command
from kvbench.core.kv_allocation import hybrid_allocation
from kvbench.models.config import ModelConfig
from kvbench.sizing.capacity import kv_capacity, sequence_slots

# Gemma-3-27B's text model: 62 layers, every sixth full attention, a 1024-token window.
GEMMA3_27B = ModelConfig(
    name="gemma-3-27b-shape", vocab_size=262208, hidden_size=5376, intermediate_size=21504,
    num_layers=62, num_heads=32, num_kv_heads=16, head_dim=128,
    max_position_embeddings=131072, sliding_window=1024,
    layer_types=tuple("full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                      for i in range(62)),
)
BF16 = 2
LAYER_TOKEN_BYTES = 2 * 16 * 128 * BF16


def test_gemma3_27b_groups_as_vllm_does():
    """10 full layers set the group size; the 52 window layers make six groups of 9,9,9,9,8,8
    dealt round-robin (vLLM's layers[i::num_groups]), padding 8 layer-positions."""
    allocation = hybrid_allocation(GEMMA3_27B.kv_groups(BF16))
    assert allocation.group_size == 10
    assert [len(g.layers) for g in allocation.groups] == [10, 9, 9, 9, 9, 8, 8]
    assert allocation.windows == (None,) + (1024,) * 6
    assert allocation.groups[0].layers == (5, 11, 17, 23, 29, 35, 41, 47, 53, 59)
    window_layers = [i for i in range(62) if (i + 1) % 6]
    assert allocation.groups[1].layers == tuple(window_layers[0::6])
    assert allocation.padding_layers == 8
    assert allocation.slot_bytes == 10 * LAYER_TOKEN_BYTES
    # every layer once: a tensor position and a group each
    seen = sorted(layer for g in allocation.groups for layer in g.layers)
    assert seen == list(range(62))
    assert max(allocation.tensor_of_layer()) == 9


def test_groups_within_a_quarter_pad_to_the_largest():
    model = ModelConfig(name="m", vocab_size=64, hidden_size=64, intermediate_size=64,
                        num_layers=17, num_heads=4, num_kv_heads=2, max_position_embeddings=64,
                        sliding_window=8,
                        layer_types=("sliding_attention", "full_attention") * 8
                        + ("sliding_attention",))
    allocation = hybrid_allocation(model.kv_groups(BF16))  # 8 full, 9 sliding: 9 < 1.25 x 8
    assert allocation.group_size == 9
    assert [len(g.layers) for g in allocation.groups] == [8, 9]
    assert allocation.padding_layers == 1


def test_a_window_group_is_charged_at_most_its_window_and_a_block():
    allocation = hybrid_allocation(GEMMA3_27B.kv_groups(BF16))
    # 32k context, block 16: the full group 32768 slots, each window group 1024 + 16
    assert sequence_slots(32768, 16, allocation) == 32768 + 6 * 1040
    # a context shorter than the window: every group holds the context, block-rounded
    assert sequence_slots(100, 16, allocation) == 7 * 112
    assert sequence_slots(100, 16) == 112


def test_estimate_prints_hybrids_concurrency_from_the_same_budget(tmp_path):
    folder = tmp_path / "gemma"
    folder.mkdir()
    hf = {"model_type": "mistral", "vocab_size": 262208, "hidden_size": 5376,
          "intermediate_size": 21504, "num_hidden_layers": 62, "num_attention_heads": 32,
          "num_key_value_heads": 16, "head_dim": 128, "max_position_embeddings": 131072,
          "sliding_window": 1024, "layer_types": list(GEMMA3_27B.layer_types)}
    (folder / "config.json").write_text(json.dumps(hf))
    result = CliRunner().invoke(estimate_command, ["--model", str(folder), "--context", "32768",
                                                   "--kv-memory", "16GiB", "--json"])
    assert result.exit_code == 0, result.output
    fits = json.loads(result.output)["strategies"]
    budget = 16 * 2**30
    paged_bytes = 62 * LAYER_TOKEN_BYTES
    assert fits["paged"]["max_concurrency"] == kv_capacity(budget, paged_bytes, 32768) == 1
    slots = 32768 + 6 * 1040
    assert fits["hybrid"]["tokens_per_request"] == slots
    assert fits["hybrid"]["max_concurrency"] == kv_capacity(budget, 10 * LAYER_TOKEN_BYTES,
                                                            slots) == 5
