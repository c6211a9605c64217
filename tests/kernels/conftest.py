"""Kernel tests run on CUDA when a GPU is present, otherwise in Triton's CPU interpreter.

TRITON_INTERPRET must be set before the kernels are decorated (first import of the kernel
modules), whichever test module is collected first; the ahead-of-time builds
(test_aot_compile.py) run in a subprocess without it.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
