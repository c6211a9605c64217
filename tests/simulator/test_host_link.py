"""Each GPU's link to host memory, in the presets and in a `--gpu-spec` file."""

from __future__ import annotations

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.gpu_spec_file import load_gpu_spec
from kvbench.simulator.gpus import GPU_PRESETS
from kvbench.simulator.host_link import HOST_LINKS, HostLink

BASE = """
memory = "80GiB"
bandwidth_gb_s = 2039
[peak_tflops]
bf16 = 312
"""


@pytest.mark.parametrize(("gpu", "link"), [
    ("a100-40gb", "pcie4"), ("a100-80gb", "pcie4"), ("l4", "pcie4"), ("rtx-4090", "pcie4"),
    ("rtx-3090", "pcie4"), ("l40s", "pcie4"), ("a10g", "pcie4"), ("t4", "pcie3"),
    ("h100-80gb", "pcie5"), ("h200", "pcie5"), ("h20", "pcie5"), ("b200", "pcie5"),
    ("mi300x", "pcie5"), ("gh200", "nvlink-c2c"),
])
def test_every_preset_carries_the_host_link_its_card_has(gpu, link):
    spec = get_gpu(gpu)
    assert spec.host_link is HOST_LINKS[link]
    assert spec.to_dict()["host_link"]["name"] == link


def test_every_preset_has_a_host_link():
    assert all(spec.host_link is not None for spec in GPU_PRESETS.values())


def test_effective_rates_sit_below_the_signalling_rate_and_rank_by_generation():
    signalling = {"pcie3": 15.75e9, "pcie4": 31.5e9, "pcie5": 63e9, "nvlink-c2c": 450e9}
    for name, link in HOST_LINKS.items():
        for direction in ("load", "store"):
            assert 0.5 * signalling[name] < link.bandwidth(direction) < signalling[name]
    order = ["pcie3", "pcie4", "pcie5", "nvlink-c2c"]
    loads = [HOST_LINKS[n].load_bytes_s for n in order]
    assert loads == sorted(loads)


def test_a_gh200_device_name_finds_the_gh200_preset_not_the_h200():
    from kvbench.simulator.calibrate import base_preset

    assert base_preset("NVIDIA GH200 480GB").name == "gh200"
    assert base_preset("NVIDIA H200").name == "h200"


def test_a_gpu_file_gives_its_own_host_link(tmp_path):
    path = tmp_path / "gpu.toml"
    path.write_text(BASE + "[host_link]\npreset = 'pcie5'\n", encoding="utf-8")
    assert load_gpu_spec(path).host_link == HOST_LINKS["pcie5"]
    path.write_text(BASE + "[host_link]\npreset = 'pcie5'\nload_gb_s = 40\nlatency_us = 0\n",
                    encoding="utf-8")
    link = load_gpu_spec(path).host_link
    assert (link.load_bytes_s, link.store_bytes_s, link.latency_s) == (
        40e9, HOST_LINKS["pcie5"].store_bytes_s, 0.0)
    path.write_text(BASE + "[host_link]\nload_gb_s = 20\nstore_gb_s = 18\n", encoding="utf-8")
    link = load_gpu_spec(path).host_link
    assert (link.load_bytes_s, link.store_bytes_s) == (20e9, 18e9)
    assert link.latency_s == HostLink.latency_s
    path.write_text(BASE, encoding="utf-8")
    assert load_gpu_spec(path).host_link is None


@pytest.mark.parametrize(("table", "message"), [
    ("preset = 'pcie9'", "unknown host_link preset"),
    ("load_gb_s = 20", "needs a preset or load_gb_s and store_gb_s"),
    ("preset = 'pcie4'\nload_gb_s = -3", "positive"),
    ("preset = 'pcie4'\nlatency_us = -1", ">= 0"),
    ("preset = 'pcie4'\nlanes = 16", "unknown key"),
])
def test_bad_host_link_tables_raise_one_clear_error(tmp_path, table, message):
    path = tmp_path / "gpu.toml"
    path.write_text(BASE + "[host_link]\n" + table + "\n", encoding="utf-8")
    with pytest.raises(KvbenchInputError, match=message) as err:
        load_gpu_spec(path)
    assert "gpu.toml" in str(err.value)


def test_a_host_link_refuses_impossible_figures():
    with pytest.raises(KvbenchInputError):
        HostLink("x", "x", 0.0, 1.0)
    with pytest.raises(KvbenchInputError):
        HostLink("x", "x", 1.0, 1.0, latency_s=-1.0)
    with pytest.raises(ValueError):
        HOST_LINKS["pcie4"].bandwidth("sideways")
