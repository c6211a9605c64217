"""`--engine hf`: the workload through transformers' `generate()`, same weights, same files."""

from __future__ import annotations

import json
import shutil
import sys

import pandas as pd
import pytest

import kvbench
from kvbench.cli import main
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.errors import KvbenchInputError
from kvbench.results.run_folder import is_whole
from tests.conftest import random_prompts

pytest.importorskip("transformers")

from kvbench.build.engines import build_engine  # noqa: E402
from kvbench.build.transformers_engines import TransformersEngines  # noqa: E402

NEW_TOKENS = 24


def hf_outputs(model: str, prompts, output_lens, max_num_seqs: int, model_cache=None):
    built = build_engine(EngineConfig(model=model, max_num_seqs=max_num_seqs, device="cpu"),
                         TransformersEngines(), model_cache=model_cache)
    engine = built.engine
    for i, (prompt, n) in enumerate(zip(prompts, output_lens, strict=True)):
        engine.add_request(Request(i, 0.0, tuple(prompt), n))
    engine.run_to_completion()
    return engine, [engine.sequences[i][0].token_ids[len(p):] for i, p in enumerate(prompts)]


def test_greedy_tokens_equal_kvbench_for_a_checkpoint_folder(hf_checkpoint, tmp_path):
    """Left-padded static batches of mixed lengths. The folder's configs name as EOS a token
    that the greedy outputs contain: it must not stop them (lengths come from the workload)."""
    source, _ = hf_checkpoint
    prompts = random_prompts(32, 512, seed=3, min_len=1, max_len=30)
    output_lens = [NEW_TOKENS - (i % 5) for i in range(len(prompts))]
    want = [
        out[:n] for out, n in zip(
            kvbench.generate(prompts, NEW_TOKENS, model=str(source), kv_memory="4MiB"),
            output_lens, strict=True)
    ]
    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    eos = want[0][1]
    for name in ("config.json", "generation_config.json"):
        path = folder / name
        if path.exists():
            config = json.loads(path.read_text())
            config["eos_token_id"] = eos
            path.write_text(json.dumps(config))
    engine, got = hf_outputs(str(folder), prompts, output_lens, max_num_seqs=12)
    assert got == want
    assert [len(t) for t in got] == output_lens


def test_greedy_tokens_equal_kvbench_for_a_preset_with_the_same_weights():
    from tests.scheduling.helpers import Reference, model_cache

    reference = Reference()
    prompts = random_prompts(10, 2048, seed=4, min_len=1, max_len=50)
    output_lens = [1 + (7 * i) % 20 for i in range(len(prompts))]
    engine, got = hf_outputs("tiny", prompts, output_lens, max_num_seqs=4,
                             model_cache=model_cache())
    assert got == [reference.tokens(p, n) for p, n in zip(prompts, output_lens, strict=True)]


def test_timestamps_and_step_records_are_measured():
    from tests.scheduling.helpers import model_cache

    prompts = random_prompts(5, 2048, seed=5, min_len=3, max_len=20)
    output_lens = [3, 8, 1, 5, 2]
    engine, _ = hf_outputs("tiny", prompts, output_lens, max_num_seqs=3,
                           model_cache=model_cache())
    for i, n in enumerate(output_lens):
        seq = engine.sequences[i][0]
        times = seq.token_times_s
        assert len(times) == n and times == sorted(times)
        assert seq.admitted_s <= seq.first_token_s == times[0] and seq.finish_s == times[-1]
    # one record per forward: batches of 3 and 2 run max(3, 8, 1) and max(5, 2) steps
    steps = engine.steps
    assert len(steps) == 8 + 5
    assert [s.num_prefill_seqs for s in steps] == [3] + [0] * 7 + [2] + [0] * 4
    assert all(0 <= s.overhead_ms <= s.step_ms for s in steps)
    assert [s.num_running for s in steps[:8]] == [3, 2, 2, 1, 1, 1, 1, 1]
    assert engine.strategy is None and not engine.has_unfinished()


def test_run_with_engine_hf_writes_the_results_files(tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--engine", "hf", "--workload", "uniform", "--num-requests", "6",
                 "--max-num-seqs", "4", "--warmup", "1", "--out", str(out), "--quiet"]) == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    for name in ("config.json", "kvbench_summary.json", "requests.csv", "steps.csv"):
        assert (folder / name).is_file(), name
    assert is_whole(folder) and not folder.name.endswith(".partial")
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["label"] == "hf-generate" and summary["executor"] == "hf"
    assert summary["completed"] == 6 and summary["throughput"]["output_tok_s"] > 0
    assert summary["latency_ms"]["ttft"]["p50"] > 0 and summary["latency_ms"]["tpot"]["p50"] > 0
    memory = summary["memory"]
    assert memory["kv_budget_bytes"] is None and memory["utilization_mean"] is None
    assert all(v is None for v in memory["breakdown_mean"].values())
    assert summary["scheduler"]["batch_size_max"] == 4
    requests = pd.read_csv(folder / "requests.csv")
    assert (requests["output_tokens"] == requests["output_len"]).all()
    steps = pd.read_csv(folder / "steps.csv")
    assert steps["kv_token_bytes"].isna().all() and (steps["preemptions"] == 0).all()
    assert (steps["overhead_ms"] <= steps["step_ms"]).all()


def test_engine_hf_runs_on_the_same_cpu_threads_as_kvbench():
    # A baseline on more (or fewer) threads than kvbench would not be the same device.
    import torch

    from tests.scheduling.helpers import model_cache

    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            build_engine(EngineConfig(model="tiny", cpu_threads=threads), TransformersEngines(),
                         model_cache=model_cache())
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)


def test_missing_transformers_is_an_input_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(KvbenchInputError, match=r"pip install 'kvbench\[hf\]'"):
        build_engine(EngineConfig(), TransformersEngines())
    assert main(["run", "--engine", "hf", "--num-requests", "2", "--quiet"]) == 2
    assert "--engine hf needs transformers" in capsys.readouterr().err


def test_a_batch_never_pads_a_row_past_the_models_positions():
    """Each request fits alone, but a left-padded batch's rows all hold its longest prompt plus
    its longest output: the batch ends before the request that would pass the limit."""
    from kvbench.execution.transformers_engine import HFGenerateEngine
    from tests.scheduling.helpers import model_cache

    built = build_engine(EngineConfig(model="tiny", device="cpu"), TransformersEngines(),
                         model_cache=model_cache())
    assert built.engine.max_padded_len == 2048  # tiny's positions
    engine = HFGenerateEngine(built.engine.model, device=built.device, max_num_seqs=4,
                              max_model_len=64, max_padded_len=64)
    lengths = [(40, 4), (4, 30), (10, 20), (8, 2)]  # (prompt, output); 40 + 30 > 64
    prompts = random_prompts(len(lengths), 2048, seed=6, min_len=1, max_len=1)
    for i, ((prompt_len, output_len), prompt) in enumerate(zip(lengths, prompts, strict=True)):
        engine.add_request(Request(i, 0.0, tuple(prompt) * prompt_len, output_len))
    batches = []
    while engine.waiting:
        batches.append([seq.request.request_id for seq in engine.step()])
    assert batches == [[0], [1, 2, 3]]
    for i, (prompt_len, output_len) in enumerate(lengths):
        assert len(engine.sequences[i][0].token_ids) == prompt_len + output_len


def test_the_progress_of_an_hf_run_shows_no_kv_figure(tmp_path, monkeypatch, capsys):
    # transformers' cache has no arena: the progress line leaves the KV share out (no "nan%").
    monkeypatch.setattr("kvbench.session.progress.PLAIN_FIRST_S", 0.0)
    monkeypatch.setattr("kvbench.session.progress.PLAIN_MIN_GAP_S", 0.0)
    assert main(["run", "--engine", "hf", "--workload", "uniform", "--num-requests", "3",
                 "--warmup", "0", "--workload-param", "prompt_len=8",
                 "--workload-param", "output_len=4", "--max-num-seqs", "1",
                 "--out", str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if " requests (" in line]
    assert lines and all(line.startswith("hf-generate: ") for line in lines)
    assert not any("KV" in line or "nan" in line for line in lines)
