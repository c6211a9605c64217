"""A sequence whose KV is loading from a host tier (`--kv-offload`) is never scheduled, by
any batching policy: the policy skips it (vLLM's scheduler skips `WAITING_FOR_REMOTE_KVS`
requests itself), so the step's token budget goes to others, and the engine runs exactly
what the policy schedules. Checked on every schedule of a simulated run whose returning
histories load back from the host tier while other requests run; the decode fast-forward
never takes part with a host tier."""

from __future__ import annotations

import pytest

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.workloads import load_workload


@pytest.fixture(scope="module")
def requests():
    """Conversations whose turns return (their histories evicted from the GPU meanwhile),
    arriving while other requests run."""
    return load_workload("chat", 48, seed=3, vocab_size=32000, num_system_prompts=8,
                         turns_per_conversation=4, system_prompt_len=512,
                         think_time_s=0.5).requests


@pytest.mark.parametrize("batching, options", [
    ("continuous", {}),
    ("continuous", {"chunked_prefill": True, "max_num_batched_tokens": 512}),
    ("static", {}),
    ("static", {"chunked_prefill": True, "max_num_batched_tokens": 512}),
    ("vllm-v1", {"max_num_batched_tokens": 512}),
    ("vllm-v1", {"async_scheduling": False}),
])
def test_no_policy_schedules_a_sequence_waiting_for_its_kv(requests, batching, options):
    config = EngineConfig(model="llama-2-7b", dtype="bfloat16", strategy="prefix",
                          batching=batching, kv_memory="1GiB", max_model_len=4096,
                          kv_offload="16GiB", **options)
    engine = build_engine(config, executor=SimulatedExecutors("a100-80gb")).engine
    loading = engine.strategy.host_tier.loading
    schedule = engine.policy.schedule
    seen = {"steps with a sequence waiting": 0, "of them scheduling others": 0}

    def checked(now_s):
        out = schedule(now_s)
        for seq, n in out.scheduled:
            assert seq.seq_id not in loading, f"{batching} scheduled {seq.seq_id} while it loads"
            assert n > 0
        if loading:
            seen["steps with a sequence waiting"] += 1
            seen["of them scheduling others"] += bool(out.scheduled)
        return out

    engine.policy.schedule = checked
    for request in requests:
        engine.add_request(request)
    engine.run_to_completion()
    assert engine.fast_forward() == (0, [])
    assert engine.strategy.is_whole()
    assert engine.strategy.stats()["host_loaded_blocks"] > 0
    assert seen["steps with a sequence waiting"] > 0, seen
    if batching != "static":  # (a static batch's members wait for each other's prefills)
        assert seen["of them scheduling others"] > 0, seen
    assert all(s.first_token_s is not None for seqs in engine.sequences.values()
               for s in seqs)
