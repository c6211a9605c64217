"""The simulator's fast-forward against stepping one step at a time (`--no-fast-forward`).

Every registered strategy × batching policy × queue order is drawn (hypothesis), with
workloads, arrival rates, closed loops, parallel sampling, `--steps-every` and KV budgets
from roomy to so tight that sequences are preempted. Both replays of a scenario must write
the same `requests.csv`, `steps.csv` and `tokens.parquet` byte for byte and a
`kvbench_summary.json` equal to 1e-9 relative (docs/simulator.md, Fast-forward). The strategy's books are
recomputed from scratch at every step of the stepped replay and at the end of every run of
the fast-forwarded one (`KVBENCH_CHECK_ACCOUNTING`).
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbench.errors import KvbenchInputError, KvbenchRunError
from kvbench.scheduling import POLICIES, QUEUE_ORDERS
from kvbench.session.run_options import RunOptions
from kvbench.session.runner import prepare, run_one
from kvbench.session.session import expand_runs
from kvbench.strategies import STRATEGIES
from tests.scheduling.test_properties import SETTINGS

MAX_MODEL_LEN = 64
KV_BYTES_PER_TOKEN = 1024  # the tiny preset in bfloat16
FILES = ("requests.csv", "steps.csv", "tokens.parquet")


@st.composite
def scenarios(draw) -> dict:
    chunked = draw(st.booleans())
    workload = draw(st.sampled_from(["uniform", "parallel", "sharegpt", "chat"]))
    if workload == "uniform":
        prompt = draw(st.integers(1, 40))
        params = (f"prompt_len={prompt}", f"output_len={draw(st.integers(1, 60 - prompt))}")
    elif workload == "parallel":
        params = (f"n={draw(st.integers(2, 3))}", "prompt_len=2:20", "output_len=1:30")
    elif workload == "chat":
        params = ("system_prompt_len=16", "user_len=2:8", "output_len=1:12",
                  "turns_per_conversation=2")
    else:
        params = ("input_mean=12", "output_mean=20")
    strategy = draw(st.sampled_from(STRATEGIES.names()))
    return dict(
        model="tiny", gpu="a100-40gb", workload=workload, workload_params=params,
        num_requests=draw(st.integers(1, 12)), warmup=draw(st.sampled_from([0, 1])),
        request_rate=draw(st.sampled_from(["inf", "40", "400", "4000"])),
        max_concurrency=draw(st.sampled_from([None, None, 1, 3])),
        frontend_latency_ms=draw(st.sampled_from([0.0, 0.5, 17.0])),
        strategy=strategy, batching=draw(st.sampled_from(POLICIES.names())),
        queue_order=draw(st.sampled_from(QUEUE_ORDERS.names())),
        reserve=draw(st.sampled_from(["max", "pow2", "exact"])),
        block_size=draw(st.sampled_from([1, 4, 16])),
        chunked_prefill=chunked, max_model_len=MAX_MODEL_LEN,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=draw(st.sampled_from([4, 16, 64]) if chunked
                                    else st.sampled_from([64, 128])),
        kv_memory=str(draw(st.integers(MAX_MODEL_LEN, 6 * MAX_MODEL_LEN)) * KV_BYTES_PER_TOKEN),
        seed=draw(st.integers(0, 3)), steps_every=draw(st.sampled_from([1, 1, 3])),
        # None: the policy's default (async under vllm-v1); False: synchronous.
        async_scheduling=draw(st.sampled_from([None, False])),
    )


def _replay(folder, values: dict, fast_forward: bool) -> tuple[dict, dict[str, bytes]] | str:
    """The summary and files of a replay, or the error that stopped it."""
    (run,) = expand_runs(RunOptions.for_kind("simulate", fast_forward=fast_forward, **values))
    try:
        run_one(run, folder, show_progress=False)
    except (KvbenchInputError, KvbenchRunError) as err:  # a scenario no engine can run (a stall): both must say so
        return f"{type(err).__name__}: {err}".replace(str(folder), "FOLDER")
    files = {name: (folder / name).read_bytes() for name in FILES}
    return json.loads((folder / "kvbench_summary.json").read_text()), files


def _assert_close(a, b, path="summary") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _assert_close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) and math.isnan(b)):
        assert a == pytest.approx(b, rel=1e-9, abs=0.0), path
    else:
        assert a == b, path


@SETTINGS
@given(scenario=scenarios())
def test_fast_forward_writes_the_same_results_as_stepping(scenario, tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KVBENCH_CHECK_ACCOUNTING", "1")
        stepped = _replay(tmp_path_factory.mktemp("stepped"), scenario, fast_forward=False)
        forwarded = _replay(tmp_path_factory.mktemp("forwarded"), scenario, fast_forward=True)
    if isinstance(stepped, str):
        assert forwarded == stepped
        return
    _assert_close(forwarded[0], stepped[0])
    for name in FILES:
        assert forwarded[1][name] == stepped[1][name], name


@SETTINGS
@given(scenario=scenarios(), async_scheduling=st.booleans(), num_requests=st.integers(8, 30),
       request_rate=st.sampled_from(["400", "4000", "40000"]), max_num_seqs=st.integers(3, 8))
def test_fast_forward_under_vllm_v1_writes_the_same_results_as_stepping(
        scenario, async_scheduling, num_requests, request_rate, max_num_seqs,
        tmp_path_factory):
    """vLLM v1's scheduler, drawn every time, with arrivals while requests decode: mixed
    steps (decodes and prompts in one budget), and under async scheduling the sequences held
    while their last token is in flight, at every point of a run."""
    scenario = dict(scenario, batching="vllm-v1", async_scheduling=async_scheduling,
                    num_requests=num_requests, request_rate=request_rate,
                    max_num_seqs=max_num_seqs, max_concurrency=None)
    test_fast_forward_writes_the_same_results_as_stepping.hypothesis.inner_test(
        scenario=scenario, tmp_path_factory=tmp_path_factory)


def _count_steps(values: dict, folder) -> tuple[int, int, int]:
    """A fast-forwarded replay: the steps `Engine.step` ran, those the fast-forward ran, and
    the summary's."""
    (run,) = expand_runs(RunOptions.for_kind("simulate", **values))
    prepared = prepare(run)
    engine = prepared[0].engine
    calls = {"step": 0, "forwarded": 0}
    step, forward = engine.step, engine.fast_forward

    def counting_step():  # the rows it wrote: a step that scheduled nothing writes none
        before = engine.step_recorder.num_steps
        finished = step()
        calls["step"] += engine.step_recorder.num_steps - before
        return finished

    def counting_forward(*args):
        advanced, finished = forward(*args)
        calls["forwarded"] += advanced
        return advanced, finished

    engine.step, engine.fast_forward = counting_step, counting_forward
    run_one(run, folder, show_progress=False, prepared=prepared)
    steps = json.loads((folder / "kvbench_summary.json").read_text())["scheduler"]["steps"]
    return calls["step"], calls["forwarded"], steps


def test_fast_forward_runs_most_steps_of_a_decode_heavy_replay(tmp_path):
    """The equality above would hold for a fast-forward that never runs: here it must cover
    most steps of a replay whose requests decode for long, and still write the same files."""
    values = dict(model="tiny", gpu="a100-40gb", workload="uniform",
                  workload_params=("prompt_len=8", "output_len=48"), num_requests=6,
                  request_rate="inf", strategy="paged", max_model_len=MAX_MODEL_LEN,
                  kv_memory=str(1024 * KV_BYTES_PER_TOKEN), warmup=0)
    stepped_by_engine, forwarded, steps = _count_steps(values, tmp_path / "forwarded")
    assert stepped_by_engine + forwarded == steps
    assert forwarded > 0.8 * steps
    _, stepped = _replay(tmp_path / "stepped", values, fast_forward=False)
    for name in FILES:
        assert (tmp_path / "forwarded" / name).read_bytes() == stepped[name], name


def test_fast_forward_runs_the_steps_that_end_held_sequences_under_async_scheduling(tmp_path):
    """vLLM v1 under async scheduling with requests arriving while others decode: a step
    that follows a finish (its sequences held until then) and admits an arrival is a mixed
    step the fast-forward runs, so runs go on across finishes; the files are stepping's."""
    values = dict(model="tiny", gpu="a100-40gb", workload="sharegpt",
                  workload_params=("input_mean=10", "output_mean=30"), num_requests=100,
                  request_rate="1000", strategy="paged", batching="vllm-v1",
                  async_scheduling=None, max_model_len=MAX_MODEL_LEN,
                  kv_memory=str(2048 * KV_BYTES_PER_TOKEN), warmup=0)
    stepped_by_engine, forwarded, steps = _count_steps(values, tmp_path / "forwarded")
    assert stepped_by_engine + forwarded == steps
    assert forwarded > 0.95 * steps
    _, stepped = _replay(tmp_path / "stepped", values, fast_forward=False)
    for name in FILES:
        assert (tmp_path / "forwarded" / name).read_bytes() == stepped[name], name


def _tables_by_step(values: dict, fast_forward: bool, folder) -> dict[int, tuple]:
    """The strategy's block tables (or reservations) and free pool after every step the
    replay ends on (each step, or each fast-forwarded run), by step count."""
    (run,) = expand_runs(RunOptions.for_kind("simulate", fast_forward=fast_forward, **values))
    prepared = prepare(run)
    engine = prepared[0].engine
    strategy = engine.strategy
    seen: dict[int, tuple] = {}

    def snapshot() -> None:
        tables = getattr(strategy, "tables", None) or getattr(strategy, "group_ranges", {})
        pool = getattr(strategy, "pool", None)
        free = pool.free_blocks() if pool is not None else list(strategy.ranges.holes)
        seen[engine.step_recorder.num_steps] = (
            {k: list(v) if isinstance(v, list) else v for k, v in tables.items()}, free)

    step, forward = engine.step, engine.fast_forward

    def recorded_step():
        finished = step()
        snapshot()
        return finished

    def recorded_forward(*args):
        advanced, finished = forward(*args)
        if advanced:
            snapshot()
        return advanced, finished

    engine.step, engine.fast_forward = recorded_step, recorded_forward
    run_one(run, folder, show_progress=False, prepared=prepared)
    return seen


@pytest.mark.parametrize("batching", POLICIES.names())
@pytest.mark.parametrize("strategy", ["paged", "contiguous"])
def test_fast_forward_takes_the_same_blocks_and_admits_arrivals_as_stepping(
        strategy, batching, tmp_path):
    """Requests arriving every few steps, into a cache with room for them: each arrival must
    be admitted at the step it would be stepping one at a time (a run ends at the arrival and
    the next looks at the queue again), and the blocks each sequence holds after every run
    must be the very blocks, in the same order, that stepping gives it."""
    values = dict(model="tiny", gpu="a100-40gb", workload="uniform",
                  workload_params=("prompt_len=5", "output_len=40"), num_requests=8,
                  request_rate="300", strategy=strategy, batching=batching, block_size=4,
                  max_model_len=MAX_MODEL_LEN, kv_memory=str(400 * KV_BYTES_PER_TOKEN),
                  max_num_seqs=6, warmup=0, async_scheduling=False)  # fast-forwards
    forwarded = _tables_by_step(values, True, tmp_path / "forwarded")
    stepped = _tables_by_step(values, False, tmp_path / "stepped")
    assert len(forwarded) < len(stepped) / 2  # most steps ran inside runs
    for steps, books in forwarded.items():
        assert books == stepped[steps], f"after step {steps}"
    for name in FILES:
        assert ((tmp_path / "forwarded" / name).read_bytes()
                == (tmp_path / "stepped" / name).read_bytes()), name


@pytest.mark.parametrize("batching", POLICIES.names())
def test_fast_forward_preempts_the_sequences_stepping_preempts_and_gives_the_same_blocks(
        batching, tmp_path):
    """A cache too small for the running set: its decode steps run the pool dry again and
    again. The steps that must preempt run in the fast path (the victims, the most recently
    admitted first, then the survivors' blocks), and the tables and free list after each of
    them must be those of stepping one at a time."""
    values = dict(model="tiny", gpu="a100-40gb", workload="uniform",
                  workload_params=("prompt_len=6", "output_len=50"), num_requests=10,
                  request_rate="inf", strategy="paged", batching=batching, block_size=4,
                  max_model_len=MAX_MODEL_LEN, kv_memory=str(160 * KV_BYTES_PER_TOKEN),
                  max_num_seqs=8, warmup=0, async_scheduling=False)  # fast-forwards
    (run,) = expand_runs(RunOptions.for_kind("simulate", **values))
    prepared = prepare(run)
    engine = prepared[0].engine
    preempting = []
    forward = engine.fast_forward

    def preemptions() -> int:
        return sum(seq.preemptions for group in engine.sequences.values() for seq in group)

    def counting_forward(*args):
        before = preemptions()
        result = forward(*args)
        preempting.append(preemptions() - before)
        return result

    engine.fast_forward = counting_forward
    run_one(run, tmp_path / "counted", show_progress=False, prepared=prepared)
    assert sum(preempting) > 3  # the fast path preempted
    forwarded = _tables_by_step(values, True, tmp_path / "forwarded")
    stepped = _tables_by_step(values, False, tmp_path / "stepped")
    for steps, books in forwarded.items():
        assert books == stepped[steps], f"after step {steps}"
    for name in FILES:
        assert ((tmp_path / "forwarded" / name).read_bytes()
                == (tmp_path / "stepped" / name).read_bytes()), name
