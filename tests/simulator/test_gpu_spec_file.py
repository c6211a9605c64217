"""`--gpu-spec FILE.toml`: a user's GPU becomes the same `GPUSpec` the presets are."""

from __future__ import annotations

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpu_spec_file import load_gpu_spec
from kvbench.simulator.step_time import StepTimeModel

GOOD = """
name = "lab-a100"
memory = "80GiB"
bandwidth_gb_s = 2039
[peak_tflops]
bf16 = 312
[interconnect]
preset = "nvlink3"
[efficiency]
gemm_peak_efficiency = 0.7
cpu_overhead_s = 0.002
"""


def _write(tmp_path, text, name="gpu.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_gpu_file_loads_into_a_gpu_spec_and_times_steps(tmp_path):
    spec = load_gpu_spec(_write(tmp_path, GOOD))
    preset = get_gpu("a100-80gb")
    assert spec.name == "lab-a100"
    assert (spec.memory_bytes, spec.peak_bf16_flops, spec.hbm_bandwidth_bytes_s) == (
        preset.memory_bytes, preset.peak_bf16_flops, preset.hbm_bandwidth_bytes_s)
    assert spec.interconnect == preset.interconnect
    assert spec.constants.gemm_peak_efficiency == 0.7
    assert spec.constants.cpu_overhead_s == 0.002
    # fields not given keep the A100 fit
    assert spec.constants.attn_decode_floor_s == preset.constants.attn_decode_floor_s
    assert get_gpu(str(tmp_path / "gpu.toml")) == spec
    model = get_preset("llama-2-70b")
    mine = StepTimeModel(model, spec, 2, 2, 2).cost([2048], [2048], 1)
    theirs = StepTimeModel(model, preset, 2, 2, 2).cost([2048], [2048], 1)
    assert mine.parts["gemm"] > theirs.parts["gemm"]  # lower peak efficiency: slower matmuls


@pytest.mark.parametrize(
    "text, message",
    [
        ("memory = '80GiB'\n[peak_tflops]\nbf16 = 312\n", "give bandwidth_gb_s"),
        ("memory = '80GiB'\nbandwidth_gb_s = 2039\n", r"give \[peak_tflops\]"),
        ("memory = '80GiB'\nbandwidth_gb_s = -1\n[peak_tflops]\nbf16 = 312\n", "positive"),
        ("memory = '80GiB'\nbandwidth_gb_s = 2039\ncolour = 'red'\n[peak_tflops]\nbf16 = 1\n",
         "unknown key"),
        (GOOD.replace("gemm_peak_efficiency = 0.7", "gemm_peak_efficiency = 1.5"), r"\(0, 1\]"),
        (GOOD.replace('preset = "nvlink3"', 'preset = "infiniband"'), "unknown interconnect"),
        ("memory = [", "not valid TOML"),
    ],
)
def test_bad_gpu_files_raise_one_clear_error(tmp_path, text, message):
    with pytest.raises(KvbenchInputError, match=message) as err:
        load_gpu_spec(_write(tmp_path, text))
    assert "gpu.toml" in str(err.value)


def test_a_missing_gpu_file_is_an_input_error(tmp_path):
    with pytest.raises(KvbenchInputError, match="no such file"):
        load_gpu_spec(tmp_path / "absent.toml")
