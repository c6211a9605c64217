"""Public trace formats replay as they are published: Mooncake, Azure, BurstGPT, ShareGPT JSON."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.workloads import (
    TraceRowsSkippedWarning,
    detect_trace_format,
    load_workload,
)
from kvbench.workloads.mooncake import BLOCK_TOKENS
from tests.conftest import make_word_tokenizer

DATA = Path(__file__).parent / "data"
VOCAB = 1000


def load(name: str, *, tokenizer=None, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRowsSkippedWarning)
        return load_workload(str(DATA / name), None, 0, VOCAB, tokenizer=tokenizer, **kwargs)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("mooncake.jsonl", "mooncake"), ("azure.csv", "azure"), ("burstgpt.csv", "burstgpt"),
     ("sharegpt.json", "sharegpt-json")],
)
def test_format_is_detected_from_the_content(name, kind, tmp_path):
    assert detect_trace_format(DATA / name) == kind
    renamed = tmp_path / "trace.data"  # the name does not matter, the content does
    shutil.copy(DATA / name, renamed)
    assert detect_trace_format(renamed) == kind


def test_mooncake_replays_lengths_and_millisecond_timestamps():
    requests = load("mooncake.jsonl").requests
    assert [r.prompt_len for r in requests] == [1100, 1300, 700, 300, 1024]
    assert [r.output_len for r in requests] == [12, 8, 30, 5, 16]
    assert [r.arrival_s for r in requests] == pytest.approx([0.0, 0.0, 1.52, 3.052, 4.1])


def test_mooncake_hash_ids_become_identical_prompt_blocks():
    r = [q.prompt_token_ids for q in load("mooncake.jsonl").requests]
    b = BLOCK_TOKENS
    # hash ids [0, 1, 2] / [0, 1, 3] / [0, 4] / [5] / [0, 1]
    assert r[0][: 2 * b] == r[1][: 2 * b] == r[4][: 2 * b]  # blocks 0 and 1 shared
    assert r[0][2 * b : 2 * b + 10] != r[1][2 * b : 2 * b + 10]  # block 2 vs block 3
    assert r[2][:b] == r[0][:b] and r[2][b : 2 * b] != r[0][b : 2 * b]
    assert r[3][:10] != r[0][:10]
    # a partial last block is that block's first tokens: request 2 = block 0 + 188 of block 4
    assert len(r[2]) == 700
    # the same seed gives the same tokens; another seed other tokens
    again = load("mooncake.jsonl").requests
    assert [q.prompt_token_ids for q in again] == r
    other = load_workload(str(DATA / "mooncake.jsonl"), None, 1, VOCAB).requests
    assert other[0].prompt_token_ids != r[0]


def test_azure_datetimes_become_seconds_from_the_first_row():
    requests = load("azure.csv").requests
    assert [r.prompt_len for r in requests] == [374, 396, 879, 91, 1410]
    assert [r.output_len for r in requests] == [44, 109, 55, 16, 8]
    assert [r.arrival_s for r in requests] == pytest.approx(
        [0.0, 4.314579, 4.618385, 5.151189, 9.423611], abs=1e-6
    )


def test_burstgpt_leaves_failed_rows_out_and_says_how_many():
    result = load_workload(str(DATA / "burstgpt.csv"), None, 0, VOCAB)
    (note,) = result.notes  # printed by the CLI as `kvbench: warning: ...`
    assert re.search(r"burstgpt.csv: 1 rows left out \(failed requests.*; 4 replayed$", note)
    requests = result.requests
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the note comes back in `notes`, not as a warning
        assert load_workload(str(DATA / "burstgpt.csv"), None, 0, VOCAB).requests == requests
    assert [r.prompt_len for r in requests] == [472, 417, 1360, 291]
    assert [r.output_len for r in requests] == [18, 276, 229, 67]
    assert [r.arrival_s for r in requests] == [0.0, 113.0, 135.0, 136.0]


def test_time_scale_multiplies_trace_times():
    fast = load("burstgpt.csv", time_scale=0.5).requests
    assert [r.arrival_s for r in fast] == [0.0, 56.5, 67.5, 68.0]
    with pytest.raises(KvbenchInputError, match="--time-scale must be > 0"):
        load("burstgpt.csv", time_scale=0)


def test_lengths_are_clipped_to_the_model():
    result = load("azure.csv", max_model_len=512)
    assert result.num_clipped == 2
    assert all(r.prompt_len + r.output_len <= 512 for r in result.requests)


def test_num_requests_keeps_the_first_replayed_rows():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRowsSkippedWarning)
        requests = load_workload(str(DATA / "burstgpt.csv"), 2, 0, VOCAB).requests
    assert [r.prompt_len for r in requests] == [472, 417]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A tiny word-level Hugging Face tokenizer, built here and saved as a folder."""
    return make_word_tokenizer(tmp_path_factory.mktemp("tokenizer"),
                               (DATA / "sharegpt.json").read_text())


def test_sharegpt_json_takes_the_first_exchange_of_each_conversation(tokenizer_dir):
    result = load_workload(str(DATA / "sharegpt.json"), None, 0, VOCAB, tokenizer=tokenizer_dir)
    assert len(result.notes) == 1 and "1 rows left out" in result.notes[0]
    requests = result.requests
    # a2 has one turn and is skipped; words and punctuation are tokens ("cache?" is two)
    assert [r.prompt_len for r in requests] == [6, 6, 7, 7]
    assert [r.output_len for r in requests] == [16, 3, 14, 4]
    assert requests[0].prompt_token_ids == requests[1].prompt_token_ids  # same text, same ids
    assert all(r.arrival_s == 0.0 for r in requests)
    small = load_workload(str(DATA / "sharegpt.json"), None, 0, 5, tokenizer=tokenizer_dir)
    assert all(0 <= t < 5 for r in small.requests for t in r.prompt_token_ids)


def test_sharegpt_json_without_a_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(KvbenchInputError, match=r"needs --tokenizer DIR") as info:
        load_workload(str(DATA / "sharegpt.json"), None, 0, VOCAB)
    assert "\n" not in str(info.value)
    with pytest.raises(KvbenchInputError, match=r"--tokenizer .*: not a folder"):
        load_workload(str(DATA / "sharegpt.json"), None, 0, VOCAB, tokenizer=tmp_path / "no")
    with pytest.raises(KvbenchInputError, match=r"not a Hugging Face tokenizer folder"):
        load_workload(str(DATA / "sharegpt.json"), None, 0, VOCAB, tokenizer=tmp_path)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
         '{"timestamp": 1, "input_length": -3, "output_length": 2}\n',
         r"bad.jsonl:2: input_length must be an integer >= 0"),
        ("bad.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": "x"}\n',
         r"bad.jsonl:1: hash_ids must be a list of integers"),
        ("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n"
         "yesterday,10,2\nnow,1,1\n",
         r"bad.csv:3: TIMESTAMP must be a date-time, got 'yesterday' \(and 1 more bad lines\)"),
        ("bad.csv", "Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,ten,2\n",
         r"bad.csv:2: Request tokens must be an integer >= 0, got 'ten'"),
        ("bad.csv", "time,prompt,output\n1,2,3\n", r"bad.csv: CSV with columns time, prompt"),
        ("bad.csv", "Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,0,0\n",
         r"holds no requests to replay"),
    ],
)
def test_bad_public_traces_name_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRowsSkippedWarning)
        with pytest.raises(KvbenchInputError, match=message):
            load_workload(str(path), None, 0, VOCAB)


def test_mooncake_sharing_is_found_by_the_prefix_cache(tmp_path):
    """End to end (simulated executor): the prefix strategy serves exactly the blocks the
    trace's hash ids share with earlier requests."""
    import pandas as pd

    from kvbench.cli import main

    assert main(["simulate", "--strategy", "prefix", "--workload", str(DATA / "mooncake.jsonl"),
                 "--out", str(tmp_path), "--quiet"]) == 0
    (csv,) = tmp_path.glob("*/requests.csv")
    cached = pd.read_csv(csv).sort_values("request_id")["cached_prompt_tokens"].tolist()
    # hash ids [0, 1, 2] / [0, 1, 3] / [0, 4] / [5] / [0, 1]: request 1 reuses blocks 0-1,
    # request 2 block 0, request 3 nothing; request 4 is blocks 0-1 exactly, and its last
    # prompt token is always computed, so it reuses all but the last cache block
    assert cached[:4] == [0, 2 * BLOCK_TOKENS, BLOCK_TOKENS, 0]
    assert 2 * BLOCK_TOKENS - 64 <= cached[4] < 2 * BLOCK_TOKENS
