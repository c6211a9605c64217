"""Qwen3-Next (Gated DeltaNet and gated attention layers, experts beside a gated shared
expert) through kvbench's engine against transformers' Qwen3NextForCausalLM: greedy tokens
under `paged` in prefill + decode, chunked prefill, preemption and parallel sampling, the
recurrent states kept in the KV arena's state blocks (kvbench/execution/pooled_states.py)."""

from __future__ import annotations

import json

import pytest

from kvbench.build.engines import build_engine
from kvbench.cli import main
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from tests.conftest import random_prompts
from tests.models.engine_parity import (
    check_chunked_prefill,
    check_prefill_and_decode,
    check_state_preemption,
    check_state_prefix_hits,
    check_strategy_holds_state,
)
from tests.models.test_parity_hf import hf_greedy
from tests.models.test_qwen3_next import make_qwen3_next

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def qwen3_next(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3_next_engine")
    return folder, make_qwen3_next(folder)


def test_prefill_and_decode_match_transformers(qwen3_next):
    check_prefill_and_decode(*qwen3_next, 20, 140)


def test_chunked_prefill_matches_transformers(qwen3_next):
    """~190-token prompts under a 64-token step budget: each prompt's state carries over
    three or more chunks."""
    check_chunked_prefill(*qwen3_next, 150, 200)


def test_preemption_matches_transformers(qwen3_next):
    check_state_preemption(*qwen3_next)


def test_parallel_samples_copy_the_state(qwen3_next):
    """n = 2 greedy samples: the child forks after the prompt with its state blocks copied
    from the parent's; both continue as transformers does."""
    folder, hf_model = qwen3_next
    prompt = random_prompts(1, 512, seed=7, min_len=70, max_len=70)[0]
    engine = build_engine(EngineConfig(model=str(folder), device="cpu", strategy="paged",
                                       kv_memory="4MiB", temperature=0.0)).engine
    engine.add_request(Request(0, 0.0, tuple(prompt), 12, n=2))
    engine.run_to_completion()
    want = hf_greedy(hf_model, [prompt], 12)[0]
    assert [s.token_ids[len(prompt):] for s in engine.sequences[0]] == [want, want]


def test_kvbench_run_on_a_qwen3_next_folder(qwen3_next, tmp_path, capsys):
    folder, _ = qwen3_next
    assert main(["run", "--model", str(folder), "--strategy", "paged", "--workload",
                 "uniform", "--num-requests", "4", "--workload-param", "prompt_len=60",
                 "--workload-param", "output_len=8", "--kv-memory", "1MiB", "--quiet",
                 "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run / "kvbench_summary.json").read_text())
    assert (summary["completed"], summary["failed"]) == (4, 0)
    assert summary["memory"]["breakdown_mean"]["internal"] > 0


def test_prefix_hits_restore_state_checkpoints(qwen3_next):
    """`prefix` (vLLM's default `align`): greedy tokens equal transformers' with hits that
    copy a cached checkpoint into the running state, checkpoints copied from it."""
    folder, hf_model = qwen3_next
    check_state_prefix_hits(folder, hf_model)


@pytest.mark.parametrize("strategy", ["hybrid", "hybrid-prefix", "contiguous"])
def test_strategies_holding_the_state_match_transformers(qwen3_next, strategy):
    """The state where `strategy` holds it (`hybrid`: pages of its equal-page pool)."""
    folder, hf_model = qwen3_next
    check_strategy_holds_state(folder, hf_model, strategy, 40, 120)
