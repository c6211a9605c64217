"""The simulator's torch-free dtype names and sizes are torch's own."""

from __future__ import annotations

import pytest
import torch

from kvbench.config import EngineConfig
from kvbench.errors import KvbenchInputError
from kvbench.execution.kv_budget import kv_cache_torch_dtype
from kvbench.models.dtype_names import (
    ELEMENT_BYTES,
    FP8_NAME,
    MODEL_DTYPE_NAMES,
    element_bytes,
    kv_cache_dtype_name,
    model_dtype_name,
)
from kvbench.models.loader import parse_dtype


def test_every_dtype_spelling_names_the_dtype_torch_loads():
    for spelling, name in MODEL_DTYPE_NAMES.items():
        assert str(parse_dtype(spelling)) == f"torch.{name}"
    assert str(torch.float8_e4m3fn) == f"torch.{FP8_NAME}"


@pytest.mark.parametrize("name", sorted(ELEMENT_BYTES))
def test_element_bytes_agree_with_torch(name):
    dtype = getattr(torch, name)
    assert element_bytes(name) == torch.empty((), dtype=dtype).element_size()
    assert element_bytes(dtype) == element_bytes(name)  # a torch dtype is read by its name


@pytest.mark.parametrize("dtype", ["float32", "bf16", "half"])
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8", "fp8_e4m3"])
def test_kv_cache_dtype_name_is_the_model_engines_kv_dtype(dtype, kv_cache_dtype):
    config = EngineConfig(dtype=dtype, kv_cache_dtype=kv_cache_dtype)
    torch_dtype = kv_cache_torch_dtype(config, parse_dtype(dtype))
    # results record str(kv_dtype) without "torch.": the same string from either engine
    assert kv_cache_dtype_name(config) == str(torch_dtype).removeprefix("torch.")


def test_unknown_dtype_is_refused_as_the_model_loader_refuses_it():
    with pytest.raises(KvbenchInputError) as ours:
        model_dtype_name("int8")
    with pytest.raises(KvbenchInputError) as loaders:
        parse_dtype("int8")
    assert str(ours.value) == str(loaders.value)
