"""Async scheduling (vLLM's default since 0.14) under `vllm-v1`: step n + 1 is scheduled
before step n's output is seen, so a request that sampled its last token keeps its seat and
blocks for one more step; the tokens and their times are those of the synchronous engine.
Fast-forward keeps the results of stepping (files byte for byte, the summary to 1e-9)."""

from __future__ import annotations

import json

import pytest

from kvbench.build.engine_build import effective_config
from kvbench.config import EngineConfig
from kvbench.errors import KvbenchInputError
from kvbench.session.run_options import RunOptions
from kvbench.session.runner import prepare, run_one
from kvbench.session.session import expand_runs
from tests.scheduling.helpers import (
    TINY_BYTES_PER_SLOT,
    drive,
    generated,
    make_engine,
    prompt_of,
    request,
)
from tests.scheduling.test_vllm_v1 import record_schedules
from tests.simulator.test_fast_forward import _assert_close


def test_on_by_default_where_the_policy_models_it():
    assert effective_config(EngineConfig(batching="vllm-v1")).async_scheduling is True
    assert effective_config(EngineConfig(batching="continuous")).async_scheduling is False
    assert effective_config(
        EngineConfig(batching="vllm-v1", async_scheduling=False)).async_scheduling is False
    with pytest.raises(KvbenchInputError, match="--async-scheduling is modelled for"):
        effective_config(EngineConfig(batching="continuous", async_scheduling=True))
    assert make_engine(batching="vllm-v1", max_model_len=64).async_scheduling
    assert not make_engine(batching="static", max_model_len=64).async_scheduling


def _two_requests_one_seat(async_scheduling: bool):
    engine = make_engine(batching="vllm-v1", max_model_len=64, max_num_seqs=1,
                         async_scheduling=async_scheduling)
    steps = record_schedules(engine)
    ended_at: dict[int, int] = {}
    engine.add_request(request(0, prompt_of(0, 4), 3))
    engine.add_request(request(1, prompt_of(1, 4), 2))
    n = 0
    while engine.has_unfinished():
        for seq in engine.step():
            ended_at[seq.request.request_id] = n
        n += 1
    return engine, steps, ended_at


def test_a_finished_request_gives_its_seat_back_a_step_later():
    sync, sync_steps, sync_ended = _two_requests_one_seat(False)
    asyn, async_steps, async_ended = _two_requests_one_seat(True)
    assert sync_steps == [[(0, 4)], [(0, 1)], [(0, 1)], [(1, 4)], [(1, 1)]]
    # step 3: request 0's last token is in flight, it is not scheduled and keeps the seat;
    # the step ends it (seen), and request 1 comes in at step 4; the last step only sees
    # request 1's last token
    assert async_steps == [[(0, 4)], [(0, 1)], [(0, 1)], [], [(1, 4)], [(1, 1)], []]
    assert (sync_ended, async_ended) == ({0: 2, 1: 4}, {0: 3, 1: 6})
    for r in (0, 1):
        assert generated(asyn, r) == generated(sync, r)
    # Token times are the ends of the steps that computed them, as synchronously.
    a0, s0 = asyn.sequences[0][0], sync.sequences[0][0]
    assert a0.token_times_s[-1] == a0.finish_s
    assert len(a0.token_times_s) == len(s0.token_times_s) == 3


def test_tight_pool_under_async_scheduling_keeps_the_books():
    """A pool that preempts, with requests whose last token is in flight among the victims'
    candidates: every request still produces its tokens, the pool ends whole."""
    engine = make_engine(batching="vllm-v1", strategy="prefix", block_size=4, watermark=0.0,
                         max_model_len=64, kv_memory=48 * TINY_BYTES_PER_SLOT, max_num_batched_tokens=16,
                         async_scheduling=True)
    arrivals = [(i // 2, request(i, prompt_of(i % 3, 6 + i % 5), 4 + i % 7)) for i in range(10)]
    drive(engine, arrivals)
    assert sum(s.preemptions for g in engine.sequences.values() for s in g) > 0
    for i in range(10):
        assert len(generated(engine, i)[0]) == 4 + i % 7


def test_fast_forward_writes_what_stepping_writes(tmp_path):
    """Decode runs fast-forward under async scheduling too; the step that sees the last
    tokens is the engine's own: the files are those of stepping, byte for byte."""
    values = dict(model="tiny", gpu="a100-40gb", workload="sharegpt", batching="vllm-v1",
                  workload_params=("input_mean=12", "output_mean=30"), num_requests=12,
                  request_rate="400", strategy="paged", max_model_len=64, warmup=0,
                  kv_memory=str(200 * 1024), max_num_seqs=5)
    files = {}
    for ff in (True, False):
        (run,) = expand_runs(RunOptions.for_kind("simulate", fast_forward=ff, **values))
        assert effective_config(run.engine).async_scheduling  # vllm-v1's default
        prepared = prepare(run)
        engine = prepared[0].engine
        forwarded = []
        forward = engine.fast_forward

        def counting(*args, forward=forward, forwarded=forwarded):
            advanced, finished = forward(*args)
            forwarded.append(advanced)
            return advanced, finished

        engine.fast_forward = counting
        folder = tmp_path / str(ff)
        run_one(run, folder, show_progress=False, prepared=prepared)
        files[ff] = {name: (folder / name).read_bytes()
                     for name in ("requests.csv", "steps.csv", "tokens.parquet")}
        files[ff]["summary"] = json.loads((folder / "kvbench_summary.json").read_text())
        if ff:
            steps = files[ff]["summary"]["scheduler"]["steps"]
            assert sum(forwarded) > steps / 2  # most steps ran in runs
    summaries = {ff: files[ff].pop("summary") for ff in files}
    assert files[True] == files[False]
    _assert_close(summaries[True], summaries[False])  # sums in another order: 1e-9


def test_defaults_vllm_takes_vllm_v1s_scheduler_and_its_async_scheduling():
    vllm = RunOptions.for_kind("simulate", defaults="vllm")
    assert (vllm.batching, vllm.async_scheduling) == ("vllm-v1", None)  # None: on under it
    (run,) = expand_runs(vllm)
    assert effective_config(run.engine).async_scheduling is True
    # without chunked prefill vLLM v1 is not what `vllm-v1` models: kvbench's continuous
    assert RunOptions.for_kind("simulate", defaults="vllm",
                               chunked_prefill=False).batching == "continuous"
    assert RunOptions.for_kind("simulate", defaults="vllm",
                               async_scheduling=False).async_scheduling is False
