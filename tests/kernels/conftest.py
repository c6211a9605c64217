"""Kernel tests run on CUDA when a GPU is present, otherwise in Triton's CPU interpreter
(tests/conftest.py sets TRITON_INTERPRET before any test module imports the kernels); the
ahead-of-time builds (test_aot_compile.py) run in a subprocess without it.
"""

from __future__ import annotations

import pytest
import torch


def pytest_addoption(parser):
    parser.addoption(
        "--device", choices=("auto", "cuda"), default="auto",
        help="kernel tests: 'cuda' fails at once unless a CUDA device is visible (the tests "
             "then run on it), so a GPU run cannot fall back to the interpreter unnoticed",
    )


def pytest_configure(config):
    if config.getoption("--device") == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda: torch sees no CUDA device")
