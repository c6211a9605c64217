"""`Summary` reads and writes `kvbench_summary.json` without changing a key, old folders included.

The files under data/ were written by the runner before `Summary` existed (commit 8707abe):
a prefix-cache run with an SLO (strategy counters, goodput) and an fp8 run (accuracy).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.errors import KvbenchInputError
from kvbench.results.summary import LatencyStats, Summary

DATA = Path(__file__).with_name("data")
FIXTURES = sorted(DATA.glob("summary_*.json"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _key_paths(value, prefix=()) -> list[tuple[str, ...]]:
    if isinstance(value, dict):
        paths = []
        for key, item in value.items():
            paths.append((*prefix, key))
            if key != "accuracy":  # free-form
                paths.extend(_key_paths(item, (*prefix, key)))
        return paths
    return []


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_summary_written_before_the_schema_round_trips_key_for_key(path):
    data = _load(path)
    again = Summary.from_dict(data).to_dict()
    assert again == data
    assert _key_paths(again) == _key_paths(data)  # same keys in the same order


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_written_file_is_byte_identical(path, tmp_path):
    Summary.from_json(path).write(tmp_path / "kvbench_summary.json")
    assert (tmp_path / "kvbench_summary.json").read_text() == path.read_text()


def test_sections_are_typed_and_strategy_counters_are_kept():
    summary = Summary.from_json(DATA / "summary_prefix_slo.json")
    assert isinstance(summary.latency_ms.ttft, LatencyStats)
    assert summary.latency_ms.ttft.p99 == _load(DATA / "summary_prefix_slo.json")[
        "latency_ms"]["ttft"]["p99"]
    assert summary.goodput is not None and summary.goodput.slo_ms == {"ttft": 2000.0,
                                                                       "tpot": 500.0}
    assert summary.scheduler.extra["evictions"] >= 0  # the prefix cache's own counters
    assert summary.lookup(("scheduler", "cache_hit_rate")) == summary.scheduler.extra[
        "cache_hit_rate"]
    assert Summary.from_json(DATA / "summary_fp8_slo.json").accuracy["kv_cache_dtype"] == \
        "fp8_e4m3"


def test_an_older_summary_lacking_newer_keys_loads_with_none():
    data = _load(DATA / "summary_prefix_slo.json")
    old = copy.deepcopy(data)
    del old["latency_ms"]["prefill"], old["goodput"], old["clipped_requests"]
    del old["memory"]["prompt_blocks_max"], old["scheduler"]["waiting_mean"]
    del old["load"], old["latency_ms"]["client_wait"]
    summary = Summary.from_dict(old)
    assert summary.clipped_requests is None and summary.goodput is None
    assert summary.memory.prompt_blocks_max is None and summary.scheduler.waiting_mean is None
    assert summary.latency_ms.prefill.p99 is None
    assert summary.latency_ms.client_wait.p50 is None
    assert summary.load.request_rate is None and summary.load.achieved_request_rate is None
    written = summary.to_dict()
    assert "goodput" not in written  # a section only some runs have stays out
    assert written["clipped_requests"] is None  # a known key comes back as null
    assert written["load"]["achieved_conversation_rate"] is None
    assert written["latency_ms"]["ttft"] == data["latency_ms"]["ttft"]


def test_unknown_keys_survive_a_round_trip_at_every_level():
    data = _load(DATA / "summary_fp8_slo.json")
    data["from_a_newer_version"] = {"x": 1}
    data["memory"]["hbm_bytes"] = 123
    data["latency_ms"]["ttft"]["p999"] = 9.5
    data["latency_ms"]["tbt"] = {"p50": 1.0}
    again = Summary.from_dict(data).to_dict()
    assert again == data


def test_from_json_rejects_what_is_not_a_summary(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{")
    for name in ("list.json", "broken.json", "missing.json"):
        with pytest.raises(KvbenchInputError, match="cannot read"):
            Summary.from_json(tmp_path / name)


# Keys a prefix-cache run writes that the fixture predates: the structural ceiling of the hit
# rate (results/README.md) and the counters it comes from.
ADDED_SINCE = (("scheduler", "prefix_hit_ceiling"), ("scheduler", "cache_ceiling_tokens"),
               ("scheduler", "cache_hit_ceiling"))


def test_the_runner_writes_the_same_keys_as_before(tmp_path, capsys):
    """A fresh simulated run has exactly the fixture's key paths (the strategy's counters
    aside), and batch_size_mean is the plain mean over steps of prefill + decode sequences."""
    assert main(["simulate", "--strategy", "prefix", "--workload", "prefix-repeat",
                 "--num-requests", "6", "--slo", "ttft=2000ms,tpot=500ms", "--quiet",
                 "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.rglob("kvbench_summary.json")
    fresh = _load(path)
    fixture = _load(DATA / "summary_prefix_slo.json")
    assert [k for k in _key_paths(fresh) if k not in ADDED_SINCE] == _key_paths(fixture)
    assert set(ADDED_SINCE) <= set(_key_paths(fresh))
    steps = pd.read_csv(path.with_name("steps.csv"))
    batch = steps["num_prefill_seqs"] + steps["num_decode_seqs"]
    assert fresh["scheduler"]["batch_size_mean"] == pytest.approx(batch.mean())
    assert fresh["scheduler"]["batch_size_max"] == batch.max()
