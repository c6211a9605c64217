"""Memory is checked before it is taken: a run that cannot fit is refused with its figures."""

from __future__ import annotations

import pytest
import torch

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.host_memory import cpu_available_bytes
from kvbench.errors import KvbenchInputError
from kvbench.models.loader import load_model
from kvbench.models.memory_check import check_memory, memory_need
from kvbench.models.presets import get_preset
from kvbench.sizing.estimate import EstimateInputs, estimate_kv

GiB = 2**30
CPU = torch.device("cpu")


def machine_with(free_bytes: int):
    return lambda _device: free_bytes


def test_weights_are_the_figure_estimate_prints_less_vllms_rotary_cache():
    """The check counts the parameters kvbench's model allocates; `kvbench estimate` prints the
    weights as vLLM loads them, which add its rotary cos/sin cache (max positions x rotary
    dim at the dtype) and nothing else for this dense model: the two agree to the byte."""
    model = get_preset("llama-2-7b")
    for dtype, size in (("fp32", 4), ("bf16", 2)):
        est = estimate_kv(EstimateInputs(model=model, context=4096, concurrency=1,
                                         gpu_memory=80 * GiB, dtype=dtype))
        weights = memory_need(model, dtype).weights_bytes
        assert weights == model.num_parameters() * size
        rotary_cache = model.max_position_embeddings * model.head_dim * size
        assert est.weights_bytes == weights + rotary_cache


def test_llama_2_7b_float32_refused_on_a_24_gib_machine():
    """The figures and the way out are in the line; nothing is allocated."""
    with pytest.raises(KvbenchInputError) as err:
        load_model("llama-2-7b", dtype=torch.float32, available=machine_with(22 * GiB))
    line = str(err.value)
    assert "\n" not in line
    assert "llama-2-7b in float32 needs 25.10 GiB" in line
    assert "22.00 GiB available" in line and "--dtype bfloat16" in line


def test_run_counts_activations_and_kv(monkeypatch):
    """build_engine's check adds a full prefill's activations and the KV budget to the weights:
    a machine with room for the weights alone is still refused, and --kv-memory is named."""
    without_kv = memory_need(get_preset("tiny"), "fp32", 2048, 256).total_bytes
    monkeypatch.setattr("kvbench.models.memory_check.available_bytes",
                        machine_with(without_kv + 2**20))
    with pytest.raises(KvbenchInputError, match=r"KV 64\.00 MiB.*--kv-memory below 1\.00 MiB"):
        build_engine(EngineConfig(model="tiny", kv_memory="64MiB"))


def test_fits_when_there_is_room():
    need = memory_need(get_preset("tiny"), torch.float32, 2048, 8, 2**26)
    check_memory(need, CPU, machine_with(need.total_bytes))  # exactly enough: no error
    with pytest.raises(KvbenchInputError):
        check_memory(need, CPU, machine_with(need.total_bytes - 1))


def test_unknown_availability_is_not_a_refusal():
    check_memory(memory_need(get_preset("llama-3-70b"), "fp32"), CPU, machine_with(None))


def test_bfloat16_halves_the_weights():
    model = get_preset("llama-3-8b")
    assert memory_need(model, torch.bfloat16).weights_bytes * 2 == memory_need(
        model, torch.float32).weights_bytes


def test_meminfo_is_read(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n")
    assert cpu_available_bytes(meminfo) == 1000 * 1024


def test_meminfo_missing_falls_back_to_sysconf(tmp_path):
    assert cpu_available_bytes(tmp_path / "absent") > 0


def test_bfloat16_model_is_never_materialised_in_float32(monkeypatch):
    """The check allows bfloat16's bytes: the loader must not allocate float32 weights first."""
    made = []
    original = torch.nn.Module.to_empty

    def spy(module, *, device, recurse=True):
        made.extend(p.dtype for p in module.parameters())
        return original(module, device=device, recurse=recurse)

    monkeypatch.setattr(torch.nn.Module, "to_empty", spy)
    model, _ = load_model("tiny", dtype=torch.bfloat16)
    assert made and set(made) == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize(("seqs", "tokens", "flag"), [
    (1_000_000_000, 2048, "--max-num-seqs"),
    (256, 1_000_000_000, "--max-num-batched-tokens"),
])
def test_the_refusal_names_the_size_at_fault(seqs, tokens, flag):
    """The logits of a billion sequences, or a billion tokens' activations, are the need:
    the way out is that flag at a value that fits, not --dtype bfloat16."""
    model = get_preset("tiny")
    need = memory_need(model, "fp32", tokens, seqs, 2**26)
    with pytest.raises(KvbenchInputError) as err:
        check_memory(need, CPU, machine_with(22 * GiB))
    line = str(err.value)
    assert f"use {flag} " in line and "--dtype" not in line
    fits = int(line.split(f"use {flag} ")[1].split(" ")[0].replace(",", ""))
    smaller = memory_need(model, "fp32", fits if flag.endswith("tokens") else tokens,
                          fits if flag.endswith("seqs") else seqs, 2**26)
    check_memory(smaller, CPU, machine_with(22 * GiB))  # the value it names fits
