"""A new queue order is one file that registers itself, and it runs under every batching
policy (docs/design.md, Extending kvbench)."""

from __future__ import annotations

import sys
import textwrap

import pytest

import kvbench.scheduling as scheduling_package
from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.scheduling import POLICIES, QUEUE_ORDERS

MODULE = "kvbench.scheduling.longest_first"


@pytest.fixture
def longest_first(tmp_path, monkeypatch):
    (tmp_path / "longest_first.py").write_text(textwrap.dedent('''
        from kvbench.scheduling.queue_order import QueueOrder
        from kvbench.scheduling.registry import register_queue_order

        @register_queue_order("ljf", "longest job first")
        class LongestFirst(QueueOrder):
            def key(self, seq):
                return (-(seq.request.prompt_len + seq.request.output_len),
                        seq.request.arrival_s)
    '''))
    monkeypatch.setattr(scheduling_package, "__path__",
                        [*scheduling_package.__path__, str(tmp_path)])
    for registry in (QUEUE_ORDERS, POLICIES):
        monkeypatch.setattr(registry, "_discovered", False)
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield
    sys.modules.pop(MODULE, None)


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_a_new_queue_order_is_found_and_orders_admission_under_any_policy(
        longest_first, batching):
    assert "ljf" in QUEUE_ORDERS.names()
    config = EngineConfig(model="tiny", batching=batching, queue_order="ljf", max_num_seqs=1,
                          kv_memory="2MiB", max_model_len=512)
    engine = build_engine(config, executor=SimulatedExecutors("a100-80gb")).engine
    lengths = [30, 90, 10, 60]
    for i, n in enumerate(lengths):
        engine.add_request(Request(i, 0.0, tuple(range(1, n)), 4))
    engine.run_to_completion()
    first_tokens = {rid: group[0].first_token_s for rid, group in engine.sequences.items()}
    served = sorted(first_tokens, key=first_tokens.get)
    assert served == sorted(range(4), key=lambda i: -lengths[i])  # longest job first
