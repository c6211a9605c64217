"""The shipped step-time constants reproduce the measured kernel profiles they were fitted on.

The points are medians from Vidur's published A100-80GB / H100-80GB vLLM profiles
(scripts/simulator_calibration_points.csv; docs/simulator.md).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "simulator_calibration.py"


@pytest.fixture(scope="module")
def calibration():
    spec = importlib.util.spec_from_file_location("simulator_calibration", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_whole_layers_are_within_ten_percent_of_the_measured_ops(calibration):
    rows = calibration.step_table(calibration.load_points())
    assert len(rows) == 7  # 5 decodes, 2 prefills of Llama-2-70B at TP 2 on A100-80GB
    for name, measured, model, _old in rows:
        assert abs(model / measured - 1) < 0.10, name
    # the roofline it replaces was further off on every one of them
    assert all(abs(old / m - 1) > abs(model / m - 1) for _, m, model, old in rows)


def test_matmuls_and_attention_follow_the_profiles(calibration):
    table = {(gpu, op): (n, mean, worst)
             for gpu, op, n, mean, worst in calibration.error_table(calibration.load_points())}
    for gpu in ("a100-80gb", "h100-80gb"):
        assert table[(gpu, "gemm")][1] < 0.10  # mean abs error over 200 matmul timings
    assert table[("a100-80gb", "attn_decode")][1] < 0.15
    assert table[("a100-80gb", "attn_prefill")][1] < 0.20
