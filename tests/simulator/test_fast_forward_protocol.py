"""Fast-forward is opt-in (`kvbench.engine.fast_forward`): a strategy or batching policy that
does not declare decode runs is one file like any other, and a simulation with it runs by
stepping, with the same results as `--no-fast-forward`."""

from __future__ import annotations

import sys
import textwrap

import pytest

import kvbench.scheduling as scheduling_package
import kvbench.strategies as strategies_package
from kvbench.engine.fast_forward import RunExecutor, RunPolicy, RunStrategy, takes_part
from kvbench.scheduling import POLICIES
from kvbench.session.run_options import RunOptions
from kvbench.session.runner import prepare, run_one
from kvbench.session.session import expand_runs
from kvbench.strategies import STRATEGIES

FILES = ("requests.csv", "steps.csv", "tokens.parquet")

# A strategy written against `CacheStrategy` alone: a slot per token, taken as it is computed.
PER_TOKEN = '''
    from dataclasses import dataclass

    from kvbench.strategies.base import CacheStrategy, MemorySplit, split_held
    from kvbench.strategies.registry import register_strategy


    @dataclass(frozen=True)
    class PerTokenOptions:
        pass


    @register_strategy("per-token", "a slot per token, taken as it is computed", PerTokenOptions)
    class PerTokenStrategy(CacheStrategy):
        name = "per-token"

        def __init__(self, num_slots, max_model_len):
            super().__init__(num_slots, max_model_len)
            self.free_slots = list(range(num_slots))
            self.tables = {}

        def required_slots(self, seq):
            return seq.final_kv_len

        def can_admit(self, seq, num_running):
            return seq.num_uncomputed <= len(self.free_slots)

        def admit(self, seq):
            self.tables[seq.seq_id] = []
            if not self.allocate(seq, seq.num_uncomputed):
                raise AssertionError("admitted without room")
            return 0

        def allocate(self, seq, num_new_tokens):
            table = self.tables[seq.seq_id]
            need = seq.num_computed + num_new_tokens - len(table)
            if need > len(self.free_slots):
                return False
            for _ in range(need):
                self._log_table(seq.seq_id, len(table), self.free_slots[-1])
                table.append(self.free_slots.pop())
            self._account(seq, len(table))
            return True

        def free(self, seq):
            table = self.tables.pop(seq.seq_id, None)
            if table is not None:
                self.free_slots += table
                self._account(seq, 0)
                self._log_drop(seq.seq_id)

        def fork(self, parent, child):
            return None  # no sharing: a child prefills on its own

        def slot_of(self, seq, position):
            return self.tables[seq.seq_id][position]

        def memory_split_from_scratch(self, running, head_waiting):
            parts = [split_held(len(self.tables.get(s.seq_id, ())), s.num_computed,
                                s.final_kv_len) for s in running]
            token, reserved, internal = (sum(p) for p in zip(*parts)) if parts else (0, 0, 0)
            held = sum(len(table) for table in self.tables.values())
            return MemorySplit(token, reserved, internal, 0, self.num_slots - held)

        def is_whole(self):
            return len(self.free_slots) == self.num_slots
'''

# A batching policy written against `BatchingPolicy` alone: prefill-first, as `continuous`.
PROMPTS_FIRST = '''
    from kvbench.scheduling.base import BatchingPolicy, ScheduleOutput
    from kvbench.scheduling.registry import register_policy


    @register_policy("prompts-first", "whole prompts when the head fits, else every decode")
    class PromptsFirst(BatchingPolicy):
        def schedule(self, now_s):
            out = ScheduleOutput()
            self._admit_whole_prompts(now_s, out)
            if not out.scheduled:
                self._schedule_decodes(list(self.running), out)
            if not out.scheduled:
                self._admit_whole_prompts(now_s, out)
            return out
'''


def _drop_in(monkeypatch, tmp_path, package, registry, name: str, source: str) -> None:
    """`source` as module `name` of `package`, found by `registry` as a shipped one is."""
    registry.names()  # the shipped ones found first: the patched entries start from them
    folder = tmp_path / package.__name__
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    monkeypatch.setattr(registry, "_discovered", False)
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    monkeypatch.delitem(sys.modules, f"{package.__name__}.{name}", raising=False)


def _replay(folder, values: dict, fast_forward: bool) -> tuple[int, dict[str, bytes]]:
    """The steps fast-forward ran, and the files the replay wrote."""
    (run,) = expand_runs(RunOptions.for_kind("simulate", fast_forward=fast_forward, **values))
    prepared = prepare(run)
    engine = prepared[0].engine
    forwarded = [0]
    forward = engine.fast_forward

    def counting_forward(*args):
        advanced, finished = forward(*args)
        forwarded[0] += advanced
        return advanced, finished

    engine.fast_forward = counting_forward
    run_one(run, folder, show_progress=False, prepared=prepared)
    return forwarded[0], {name: (folder / name).read_bytes() for name in FILES}


@pytest.mark.parametrize("new", ["strategy", "policy"])
def test_a_new_strategy_or_policy_without_decode_runs_steps_with_the_same_results(
        new, tmp_path, monkeypatch):
    if new == "strategy":
        _drop_in(monkeypatch, tmp_path, strategies_package, STRATEGIES, "per_token", PER_TOKEN)
        strategy, batching = "per-token", "continuous"
    else:
        _drop_in(monkeypatch, tmp_path, scheduling_package, POLICIES, "prompts_first",
                 PROMPTS_FIRST)
        strategy, batching = "paged", "prompts-first"
    monkeypatch.setenv("KVBENCH_CHECK_ACCOUNTING", "1")
    values = dict(model="tiny", gpu="a100-40gb", workload="uniform",
                  workload_params=("prompt_len=6", "output_len=40"), num_requests=10,
                  request_rate="300", strategy=strategy, batching=batching,
                  max_model_len=64, kv_memory=str(200 * 1024), max_num_seqs=6, warmup=0)
    forwarded, files = _replay(tmp_path / "forwarded", values, fast_forward=True)
    assert forwarded == 0  # it stepped
    _, stepped = _replay(tmp_path / "stepped", values, fast_forward=False)
    assert files == stepped
    # and a part that takes part, in the same replay, runs most steps in runs
    shipped = dict(values, strategy="paged", batching="continuous")
    forwarded, _ = _replay(tmp_path / "shipped", shipped, fast_forward=True)
    assert forwarded > 0
    sys.modules.pop("kvbench.strategies.per_token", None)
    sys.modules.pop("kvbench.scheduling.prompts_first", None)


def test_what_declares_decode_runs_offers_the_protocol():
    """Every shipped strategy and policy that declares decode runs has what the protocol
    names; the declaration is not inherited (`prefix` is `paged`, windowed `contiguous` is
    `contiguous`, and neither takes part)."""
    from kvbench.simulator.simulated_executor import SimulatedExecutor
    from kvbench.strategies.contiguous_windows import WindowedContiguousStrategy
    from kvbench.strategies.prefix import PrefixCachingStrategy

    declared = {"paged", "contiguous", "continuous", "static", "vllm-v1"}
    for registry, protocol in ((STRATEGIES, RunStrategy), (POLICIES, RunPolicy)):
        for name in registry.names():
            entry = registry.get(name)
            cls = getattr(entry, "factory", None) or entry.cls
            if not isinstance(cls, type):
                continue  # a variant: its base is checked
            part = cls.__new__(cls)
            assert takes_part(part) == (name in declared), name
            assert isinstance(part, protocol) or not takes_part(part), name
    for cls in (PrefixCachingStrategy, WindowedContiguousStrategy):
        assert not takes_part(cls.__new__(cls))
    executor = SimulatedExecutor.__new__(SimulatedExecutor)
    assert takes_part(executor) and isinstance(executor, RunExecutor)
