"""Bad model folders: one KvbenchInputError line naming the file and the tensor, no traceback."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.models.loader import load_model

transformers = pytest.importorskip("transformers")

WEIGHTS = "model.safetensors"
EMBED = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def good_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture
def folder(good_folder, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(good_folder, copy)
    return copy


def rewrite(folder, change) -> None:
    tensors = load_file(str(folder / WEIGHTS))
    change(tensors)
    save_file(tensors, str(folder / WEIGHTS))


def test_good_folder_loads(folder):
    model, config = load_model(str(folder))
    assert config.num_layers == 1 and model.model.embed_tokens.weight.shape == (128, 32)


def test_not_a_safetensors_file(folder, capsys):
    (folder / WEIGHTS).write_bytes(b"this is not a safetensors file at all")
    out = folder.parent / "out"
    code = main(["run", "--model", str(folder), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert WEIGHTS in err and "not a readable safetensors file" in err


def test_truncated_file_names_the_file(folder):
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(KvbenchInputError, match=WEIGHTS):
        load_model(str(folder))


def test_wrong_shape_names_the_tensor(folder):
    rewrite(folder, lambda t: t.__setitem__(EMBED, torch.zeros(100, 32)))
    with pytest.raises(KvbenchInputError, match=rf"{WEIGHTS}: tensor {EMBED} has shape \(100, 32\)"):
        load_model(str(folder))


def test_missing_tensor_is_named(folder):
    rewrite(folder, lambda t: t.pop("model.norm.weight"))
    with pytest.raises(KvbenchInputError, match="lacks weights: model.norm.weight"):
        load_model(str(folder))


def test_integer_weights_are_refused(folder):
    rewrite(folder, lambda t: t.__setitem__(EMBED, torch.zeros(128, 32, dtype=torch.int8)))
    with pytest.raises(KvbenchInputError, match=rf"tensor {EMBED} is int8"):
        load_model(str(folder))


def test_half_precision_weights_load(folder):
    """float16/bfloat16 checkpoints are ordinary: cast to the run's dtype."""
    rewrite(folder, lambda t: t.update({k: v.to(torch.bfloat16) for k, v in t.items()}))
    model, _ = load_model(str(folder))
    assert model.model.embed_tokens.weight.dtype == torch.float32


def test_unexpected_bias_names_the_config_key(folder):
    rewrite(folder, lambda t: t.__setitem__("model.layers.0.self_attn.q_proj.bias",
                                            torch.zeros(32)))
    with pytest.raises(KvbenchInputError, match="does not set attention_bias"):
        load_model(str(folder))


def test_tensor_in_two_shards_is_refused(folder):
    tensors = load_file(str(folder / WEIGHTS))
    save_file({EMBED: tensors[EMBED]}, str(folder / "extra.safetensors"))
    with pytest.raises(KvbenchInputError, match=rf"tensor {EMBED} is also in"):
        load_model(str(folder))


def test_config_json_not_an_object(folder):
    (folder / "config.json").write_text(json.dumps([1, 2]))
    with pytest.raises(KvbenchInputError, match="not a JSON object"):
        load_model(str(folder))


@pytest.mark.parametrize("path", ["/nonexistent", "./no-such-model", "org/model"])
def test_path_like_model_says_no_such_folder(path, capsys, tmp_path):
    code = main(["run", "--model", path, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "no such folder" in err and "unknown model preset" not in err
    assert not (tmp_path / "out").exists()


def test_unknown_name_still_says_unknown_preset():
    with pytest.raises(KvbenchInputError, match="unknown model preset 'llama-9'"):
        load_model("llama-9")


def test_estimate_says_no_such_folder_too(capsys):
    code = main(["estimate", "--model", "/nonexistent", "--context", "2048"])
    assert code == 2 and "no such folder" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_by_tensor_name(folder, bad):
    """A damaged checkpoint would give NaN logits and every figure after them."""

    def damage(tensors):
        tensors[EMBED][3, 5] = bad

    rewrite(folder, damage)
    with pytest.raises(KvbenchInputError, match=rf"{WEIGHTS}: tensor {EMBED} holds"):
        load_model(str(folder))


def test_a_weight_past_float16s_range_is_refused_at_float16(folder):
    """Finite in float32, infinite once copied to the run's float16."""
    rewrite(folder, lambda t: t[EMBED].__setitem__((0, 0), 1e6))
    load_model(str(folder))  # float32: finite
    with pytest.raises(KvbenchInputError, match=r"0 NaN and 1 infinite values \(in float16\)"):
        load_model(str(folder), dtype=torch.float16)
