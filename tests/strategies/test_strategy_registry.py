"""The strategy registry: one file registers a strategy; everything else finds it there."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest

import kvbench.strategies as strategies_package
from kvbench.build.engine_build import effective_config, keeps_fp8_cache
from kvbench.config import EngineConfig
from kvbench.core.kv_cache_dtype import is_fp8_cache
from kvbench.errors import KvbenchInputError
from kvbench.strategies import STRATEGIES, registry
from kvbench.strategies.contiguous import ContiguousStrategy
from kvbench.strategies.paged import PagedStrategy


def test_every_shipped_strategy_is_registered_in_the_listed_order():
    # strategies in registration (import) order, then the variants
    names = STRATEGIES.names()
    assert sorted(names[:-1]) == ["contiguous", "hybrid", "hybrid-prefix", "paged", "prefix"]
    assert names[-1] == "fp8"
    assert all(summary for _, summary in STRATEGIES.describe())


def test_options_dataclass_takes_the_config_values_it_names():
    contiguous = registry.make_strategy("contiguous", 512, 64, reserve="pow2", block_size=4,
                                        watermark=0.2, namespace="x")
    assert isinstance(contiguous, ContiguousStrategy) and contiguous.reserve == "pow2"
    paged = registry.make_strategy("paged", 512, 64, reserve="pow2", block_size=4)
    assert isinstance(paged, PagedStrategy) and paged.block_size == 4


def test_fp8_is_paged_with_an_fp8_cache():
    entry = STRATEGIES.get("fp8")
    assert entry.base == "paged" and is_fp8_cache(entry.engine_overrides["kv_cache_dtype"])
    assert type(registry.make_strategy("fp8", 512, 64, block_size=8)) is PagedStrategy
    assert keeps_fp8_cache(EngineConfig(strategy="fp8"))
    assert keeps_fp8_cache(EngineConfig(strategy="prefix", kv_cache_dtype="fp8"))
    assert not keeps_fp8_cache(EngineConfig(strategy="paged"))
    explicit = effective_config(EngineConfig(strategy="fp8", kv_cache_dtype="fp8_e4m3"))
    assert explicit.kv_cache_dtype == "fp8_e4m3", "an explicit --kv-cache-dtype stays"


def test_unknown_strategy_is_a_user_error_naming_the_choices():
    with pytest.raises(KvbenchInputError, match="unknown strategy 'buddy'.*contiguous, paged"):
        registry.make_strategy("buddy", 512, 64)


def test_a_new_strategy_is_one_file(tmp_path, monkeypatch):
    """A module dropped into the package registers itself: no other file is edited."""
    module = tmp_path / "exact_fit.py"
    module.write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from kvbench.strategies.contiguous import ContiguousStrategy
        from kvbench.strategies.registry import register_strategy

        @dataclass(frozen=True)
        class ExactOptions:
            pass

        @register_strategy("exact-fit", "contiguous with exact reservations", ExactOptions)
        class ExactFit(ContiguousStrategy):
            name = "exact-fit"

            def __init__(self, num_slots, max_model_len):
                super().__init__(num_slots, max_model_len, reserve="exact")
    '''))
    monkeypatch.setattr(strategies_package, "__path__", [*strategies_package.__path__,
                                                         str(tmp_path)])
    monkeypatch.setattr(STRATEGIES, "_discovered", False)
    monkeypatch.setattr(STRATEGIES, "_entries", dict(STRATEGIES._entries))
    monkeypatch.delitem(sys.modules, "kvbench.strategies.exact_fit", raising=False)
    assert "exact-fit" in STRATEGIES.names()
    assert STRATEGIES.names()[-1] == "fp8", "variants stay after the strategies"
    built = registry.make_strategy("exact-fit", 512, 64, reserve="max", block_size=16)
    assert built.reserve == "exact" and dataclasses.is_dataclass(
        STRATEGIES.get("exact-fit").options)
    sys.modules.pop("kvbench.strategies.exact_fit", None)


def test_what_a_strategy_reads_comes_from_its_registered_options():
    assert registry.reads_option("contiguous", "reserve")
    assert not registry.reads_option("contiguous", "block_size")
    assert registry.reads_option("paged", "block_size")
    assert registry.reads_option("fp8", "block_size")  # a variant reads what its base reads
    assert not registry.reads_option("prefix", "reserve")
