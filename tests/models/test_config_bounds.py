"""A model config's sizes and shapes are checked before anything is sized or allocated: a
shape far beyond any published model, heads that do not divide the hidden size, a NaN norm
epsilon or a deeply nested config.json is one line, exit 2, at once."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.models.bounds import LIMITS
from kvbench.models.presets import PRESETS, get_preset
from kvbench.models.resolve_config import resolve_model_config

LLAMA = dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=160,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256)


def write_config(folder, **fields) -> str:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**LLAMA, **fields}))
    return str(folder)


HOSTILE = {
    "layers": (dict(num_hidden_layers=10**12), "num_hidden_layers 1,000,000,000,000 is above"),
    "hidden": (dict(hidden_size=2**40), "hidden_size 1,099,511,627,776 is above"),
    "vocab": (dict(vocab_size=10**12), "vocab_size 1,000,000,000,000 is above"),
    "positions": (dict(max_position_embeddings=10**15), "max_position_embeddings"),
    "intermediate": (dict(intermediate_size=2**40), "intermediate_size"),
    "heads": (dict(num_attention_heads=10**6, num_key_value_heads=1), "num_attention_heads"),
    "head_dim": (dict(head_dim=10**9), "head_dim"),
    "heads_not_dividing_hidden": (dict(hidden_size=250, num_attention_heads=8,
                                       num_key_value_heads=8), "does not divide hidden_size"),
    "kv_heads_not_dividing_heads": (dict(num_key_value_heads=3), "num_kv_heads=3"),
    "nan_eps": (dict(rms_norm_eps=float("nan")), "rms_norm_eps must be a finite positive"),
    "negative_eps": (dict(rms_norm_eps=-1e-5), "rms_norm_eps must be a finite positive"),
    "infinite_rope_theta": (dict(rope_theta=float("inf")), "rope_theta must be"),
    "window_layers_qwen2": (dict(model_type="qwen2", use_sliding_window=True, sliding_window=64,
                                 num_hidden_layers=10**12), "num_hidden_layers"),
    "moe_layers_qwen3_moe": (dict(model_type="qwen3_moe", num_hidden_layers=10**12),
                             "num_hidden_layers"),
    "experts": (dict(model_type="mixtral", num_local_experts=10**9), "num_local_experts"),
    "gpt_oss_layers": (dict(model_type="gpt_oss", num_hidden_layers=10**12),
                       "num_hidden_layers"),
    "gemma3_layers": (dict(model_type="gemma3_text", num_hidden_layers=10**12),
                      "num_hidden_layers"),
    "deepseek_layers": (dict(model_type="deepseek_v3", num_hidden_layers=10**12),
                        "num_hidden_layers"),
    "deepseek_latent": (dict(model_type="deepseek_v3", kv_lora_rank=10**12), "kv_lora_rank"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_config_is_refused_in_one_line_at_once(case, tmp_path):
    fields, message = HOSTILE[case]
    folder = write_config(tmp_path / "m", **fields)
    start = time.process_time()
    with pytest.raises(KvbenchInputError, match=message) as err:
        resolve_model_config(folder)
    assert time.process_time() - start < 1.0
    assert "\n" not in str(err.value)
    assert "bad value (" not in str(err.value)  # the reason itself, not wrapped in another


def test_head_dim_given_need_not_divide_hidden(tmp_path):
    folder = write_config(tmp_path / "m", hidden_size=250, num_attention_heads=8,
                          num_key_value_heads=8, head_dim=32)
    assert resolve_model_config(folder).head_dim == 32


def test_every_preset_is_within_the_limits():
    for name in PRESETS:
        config = get_preset(name)
        assert config.num_layers <= LIMITS["num_hidden_layers"]


def test_a_config_built_in_code_is_checked_too():
    with pytest.raises(KvbenchInputError, match="vocab_size"):
        dataclasses.replace(get_preset("tiny"), vocab_size=10**12)
    with pytest.raises(KvbenchInputError, match="does not divide"):
        dataclasses.replace(get_preset("tiny"), hidden_size=250, head_dim=0)


def test_deeply_nested_config_json_is_one_line(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(KvbenchInputError, match="nested too deeply"):
        resolve_model_config(str(folder))


@pytest.mark.parametrize("command", [
    ["estimate", "--context", "4096", "--gpu-memory", "80GiB"],
    ["simulate", "--strategy", "paged", "--num-requests", "4", "--quiet"],
    ["run", "--num-requests", "2", "--quiet"],
])
@pytest.mark.parametrize("fields", [dict(num_hidden_layers=10**12), dict(vocab_size=10**12)],
                         ids=["layers", "vocab"])
def test_cli_refuses_a_hostile_config_folder_at_once(command, fields, tmp_path, capsys):
    folder = write_config(tmp_path / "m", **fields)
    out = tmp_path / "out"
    start = time.monotonic()
    code = main([command[0], "--model", folder, *command[1:],
                 *(["--out", str(out)] if command[0] != "estimate" else [])])
    assert time.monotonic() - start < 10
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "above kvbench's limit" in err, err
    assert not out.exists() or not any(out.iterdir())
