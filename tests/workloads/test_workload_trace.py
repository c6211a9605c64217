"""JSONL traces as workloads: good files, bad files (file:line), sharing, round trips."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.errors import KvbenchInputError
from kvbench.workloads import WORKLOADS, is_trace, load_workload, write_trace

VOCAB = 1000


def write(tmp_path, lines, name="trace.jsonl"):
    path = tmp_path / name
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
        encoding="utf-8",
    )
    return path


def test_good_trace(tmp_path):
    path = write(
        tmp_path,
        [
            {"arrival_s": 0.5, "prompt_len": 12, "output_len": 3, "n": 2},
            "",
            {"arrival_s": 0.0, "prompt_tokens": [5, 6, 7], "output_len": 4, "text": "ignored"},
            {"arrival_s": 2.0, "prompt_len": 3, "prompt_tokens": [1, 2, 3], "output_len": 1.0},
        ],
    )
    requests = load_workload(str(path), None, 0, VOCAB).requests
    assert [r.arrival_s for r in requests] == [0.0, 0.5, 2.0]
    assert [r.request_id for r in requests] == [0, 1, 2]
    assert requests[0].prompt_token_ids == (5, 6, 7) and requests[0].output_len == 4
    assert requests[1].prompt_len == 12 and requests[1].n == 2 and requests[1].output_len == 3
    assert requests[2].output_len == 1
    assert all(0 <= t < VOCAB for r in requests for t in r.prompt_token_ids)


def test_trace_path_detection(tmp_path):
    assert is_trace("x.jsonl") and is_trace("dir/x") and not is_trace("chat")
    plain = write(tmp_path, [{"prompt_len": 2, "output_len": 2}], name="mytrace")
    assert is_trace(str(plain))
    assert len(load_workload(plain, 5, 0, VOCAB).requests) == 1  # os.PathLike accepted


def test_num_requests_takes_the_first_lines(tmp_path):
    path = write(tmp_path, [{"prompt_len": k, "output_len": 1} for k in range(1, 11)])
    assert [r.prompt_len for r in load_workload(str(path), 4, 0, VOCAB).requests] == [1, 2, 3, 4]
    assert len(load_workload(str(path), 100, 0, VOCAB).requests) == 10


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ({"output_len": 3}, "needs prompt_len or prompt_tokens"),
        ({"prompt_len": 3}, "needs output_len"),
        ({"prompt_len": 0, "output_len": 3}, "prompt_len must be an integer >= 1, got 0"),
        ({"prompt_len": 2.5, "output_len": 3}, "prompt_len must be an integer >= 1, got 2.5"),
        ({"prompt_len": True, "output_len": 3}, "prompt_len must be an integer"),
        ({"prompt_len": 3, "output_len": -1}, "output_len must be an integer >= 1"),
        ({"prompt_len": 3, "output_len": "7"}, "output_len must be an integer"),
        ({"prompt_len": 3, "output_len": 2, "n": 0}, "n must be an integer >= 1"),
        ({"prompt_tokens": [], "output_len": 2}, "non-empty list"),
        ({"prompt_tokens": [1, VOCAB], "output_len": 2}, f"not a token id in \\[0, {VOCAB}\\)"),
        ({"prompt_tokens": [1, -1], "output_len": 2}, "not a token id"),
        ({"prompt_tokens": [1, 2], "prompt_len": 3, "output_len": 2}, "disagrees"),
        ({"prompt_len": 3, "output_len": 2, "arrival_s": -1}, "arrival_s must be"),
        ({"prompt_len": 3, "output_len": 2, "arrival_s": "soon"}, "arrival_s must be"),
        ({"prompt_len": 3, "output_len": 2, "prefix_id": [1]}, "prefix_id must be a string"),
        ({"prompt_len": 3, "output_len": 2, "prefix_len": 2}, "prefix_len needs a prefix_id"),
        (
            {"prompt_len": 3, "output_len": 2, "prefix_id": "a", "prefix_len": 4},
            "longer than the prompt",
        ),
    ],
)
def test_bad_line_reported_with_its_number(tmp_path, line, message):
    good = {"arrival_s": 0.0, "prompt_len": 4, "output_len": 4}
    if isinstance(line, dict) and "arrival_s" not in line:
        line = {"arrival_s": 1.0, **line}
    path = write(tmp_path, [good, good, line, good])
    with pytest.raises(KvbenchInputError, match=rf"^{re.escape(str(path))}:3: .*{message}") as info:
        load_workload(str(path), None, 0, VOCAB)
    assert "\n" not in str(info.value)


def test_all_bad_lines_counted_first_reported(tmp_path):
    path = write(tmp_path, [{"prompt_len": 4, "output_len": 4}, "{", "{", {"prompt_len": 1}])
    with pytest.raises(KvbenchInputError, match=r":2: not valid JSON.*\(and 2 more bad lines\)$"):
        load_workload(str(path), None, 0, VOCAB)
    with pytest.raises(KvbenchInputError, match=r":2: not valid JSON.*\(and 2 more bad lines\)$"):
        load_workload(str(path), 2, 0, VOCAB)  # lines are read until 2 requests are found


def test_num_requests_reads_no_further(tmp_path):
    path = write(tmp_path, [{"prompt_len": 4, "output_len": 4}, "", {"prompt_len": 5,
                                                                     "output_len": 1}, "{"])
    with path.open("ab") as out:
        out.write(b"\xff\n")
    assert [r.prompt_len for r in load_workload(str(path), 2, 0, VOCAB).requests] == [4, 5]


def test_arrival_s_on_every_line_or_none(tmp_path):
    path = write(
        tmp_path,
        [{"prompt_len": 4, "output_len": 4, "arrival_s": 0}, {"prompt_len": 4, "output_len": 4}],
    )
    with pytest.raises(KvbenchInputError, match=r":2: arrival_s missing while earlier lines"):
        load_workload(str(path), None, 0, VOCAB)
    path = write(
        tmp_path,
        [{"prompt_len": 4, "output_len": 4}, {"prompt_len": 4, "output_len": 4, "arrival_s": 1}],
    )
    with pytest.raises(KvbenchInputError, match=r":2: arrival_s given while earlier lines"):
        load_workload(str(path), None, 0, VOCAB)


def test_not_utf8_missing_empty_and_params(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"prompt_len": 1, "output_len": 1}\n\xff\xfe\n')
    with pytest.raises(KvbenchInputError, match=r"bin.jsonl:2: not UTF-8"):
        load_workload(str(path), None, 0, VOCAB)
    with pytest.raises(KvbenchInputError, match="cannot read trace"):
        load_workload(str(tmp_path / "missing.jsonl"), None, 0, VOCAB)
    empty = write(tmp_path, ["", "   "])
    with pytest.raises(KvbenchInputError, match="holds no requests"):
        load_workload(str(empty), None, 0, VOCAB)
    ok = write(tmp_path, [{"prompt_len": 1, "output_len": 1}])
    with pytest.raises(KvbenchInputError, match="takes no parameters"):
        load_workload(str(ok), None, 0, VOCAB, n=2)


def test_synthesized_conversations_and_prefixes_share_tokens(tmp_path):
    path = write(
        tmp_path,
        [
            {
                "prompt_len": 50,
                "output_len": 5,
                "prefix_id": "sys",
                "prefix_len": 30,
                "conversation_id": 1,
            },
            {"prompt_len": 40, "output_len": 5, "prefix_id": "sys", "prefix_len": 20},
            {"prompt_len": 80, "output_len": 5, "conversation_id": 1},
            {"prompt_len": 60, "output_len": 5, "conversation_id": 1},
            {"prompt_len": 70, "output_len": 5, "prefix_id": "sys"},
            {"prompt_len": 70, "output_len": 5, "prefix_id": "other", "prefix_len": 30},
        ],
    )
    a, b, c, d, e, f = load_workload(str(path), None, 0, 32_000).requests
    assert b.prompt_token_ids[:20] == a.prompt_token_ids[:20]  # min(prefix_len) shared
    assert (
        b.prompt_token_ids[20] != a.prompt_token_ids[20]
        or b.prompt_token_ids[21] != a.prompt_token_ids[21]
    )
    assert c.prompt_token_ids[:50] == a.prompt_token_ids  # history resent
    assert d.prompt_token_ids == c.prompt_token_ids[:60]  # shorter turn: a prefix of history
    assert e.prompt_token_ids[:5] != a.prompt_token_ids[:5]  # prefix_id without prefix_len
    assert f.prompt_token_ids[:5] != a.prompt_token_ids[:5]  # another prefix
    assert c.conversation_id == "1" and a.prefix_id == "sys"


def test_trace_arrivals_kept_offline_replaced_by_a_rate(tmp_path):
    lines = [
        {"arrival_s": 10.0, "prompt_len": 4, "output_len": 1, "conversation_id": "x"},
        {"arrival_s": 13.0, "prompt_len": 9, "output_len": 1, "conversation_id": "x"},
        {"arrival_s": 11.0, "prompt_len": 4, "output_len": 1},
    ]
    path = write(tmp_path, lines)
    requests = load_workload(str(path), None, 0, VOCAB).requests
    assert [r.arrival_s for r in requests] == [10.0, 11.0, 13.0]
    retimed = load_workload(str(path), None, 0, VOCAB, request_rate=2.0).requests
    conv = [r for r in retimed if r.conversation_id == "x"]
    assert conv[0].arrival_s == 0.0  # first conversation starts the process
    assert conv[1].arrival_s - conv[0].arrival_s == pytest.approx(3.0)  # internal offset kept


@pytest.mark.parametrize("name", sorted(WORKLOADS.names()))
def test_every_builtin_round_trips_through_a_trace(tmp_path, name):
    original = load_workload(name, 25, 3, VOCAB, request_rate=5.0).requests
    path = tmp_path / f"{name}.jsonl"
    write_trace(original, path)
    assert load_workload(str(path), None, 99, VOCAB).requests == original
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write leaves no temp file


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {
                "prompt_len": st.integers(1, 50),
                "output_len": st.integers(1, 50),
                "n": st.integers(1, 4),
                "arrival_s": st.floats(0, 100, allow_nan=False),
            }
        ),
        min_size=1,
        max_size=20,
    ),
    seed=st.integers(0, 2**32),
)
def test_trace_lengths_are_kept_and_seeded(tmp_path, rows, seed):
    path = write(tmp_path, rows)
    requests = load_workload(str(path), None, seed, VOCAB).requests
    assert requests == load_workload(str(path), None, seed, VOCAB).requests
    expected = sorted(
        (
            (row["arrival_s"], i, row["prompt_len"], row["output_len"], row["n"])
            for i, row in enumerate(rows)
        )
    )
    got = [(r.arrival_s, r.prompt_len, r.output_len, r.n) for r in requests]
    assert got == [(a, p, o, n) for a, _, p, o, n in expected]
    assert not any(math.isnan(r.arrival_s) for r in requests)


def test_load_workload_reports_trace_name(tmp_path):
    path = write(tmp_path, [{"prompt_len": 100, "output_len": 100}])
    result = load_workload(str(path), None, 0, VOCAB, max_model_len=64)
    assert result.name == str(path) and result.num_clipped == 1 and dict(result.params) == {}
