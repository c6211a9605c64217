"""CSV traces: blank rows are skipped, a row of another number of fields is refused."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.workloads import load_workload

VOCAB = 1000
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
ROW = "5,ChatGPT,472,18,490,Conversation log\n"


def _prompt_lens(path) -> list[int]:
    return [r.prompt_len for r in load_workload(str(path), None, 0, VOCAB).requests]


@pytest.mark.parametrize("blank", ["\n", "\r\n", "   \n", ",,,,,\n", " , ,\n", ",,,,,,,,\n"])
def test_blank_rows_are_skipped_whatever_their_number_of_commas(tmp_path, blank):
    # (a row of more empty fields than the header has columns was a crash: the csv module
    # gives the extra fields as a list)
    path = tmp_path / "t.csv"
    path.write_text(HEADER + blank + ROW + blank)
    assert _prompt_lens(path) == [472]


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + ROW + "6,ChatGPT,17,18,35,API log,extra\n")
    with pytest.raises(KvbenchInputError, match=r"t.csv:3: expected 6 columns"):
        load_workload(str(path), None, 0, VOCAB)


def test_a_row_with_fewer_fields_than_the_header_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + ROW + "5,ChatGPT,472,18\n" + ROW)
    with pytest.raises(KvbenchInputError, match=r"t.csv:3: expected 6 columns, got 4$"):
        load_workload(str(path), None, 0, VOCAB)


def _shaped_lines(num: int, first: int = 0) -> str:
    return "".join(f"{first + i},ChatGPT,{100 + i % 50},{1 + i % 7},0,Conversation log\n"
                   for i in range(num))


@pytest.mark.parametrize(("bad", "message"), [
    ("17,ChatGPT,ten,3,0,API log\n", r"Request tokens must be an integer >= 0, got 'ten'"),
    ("17,ChatGPT,5,3,0,API log,x\n", r"expected 6 columns, got 7"),
    ('17,"ChatGPT",5,-3,0,API log\n', r"Response tokens must be an integer >= 0, got -3"),
    ("17,ChatGPT,5,3.5,0,API log\n", r"Response tokens must be an integer >= 0, got 3.5"),
    ("17,ChatGPT,,3,0,API log\n", r"Request tokens is empty"),
    ("17,ChatGPT,16777217,3,0,API log\n", r"Request tokens 16,777,217 is more than 16,777,216 tokens, longer than any model.s context"),
    ("-17,ChatGPT,5,3,0,API log\n", r"Timestamp must be a finite number >= 0, got -17"),
    ("nan,ChatGPT,5,3,0,API log\n", r"Timestamp must be a finite number >= 0, got nan"),
    ("abc,ChatGPT,5,3,0,API log\n", r"Timestamp must be a number >= 0, got 'abc'"),
])
def test_a_bad_row_in_a_long_trace_is_named_by_its_line(tmp_path, bad, message):
    # blank lines before it still count: the bad row is on line 150,004
    path = tmp_path / "long.csv"
    path.write_text(HEADER + _shaped_lines(100_000) + "\n   \n" + _shaped_lines(50_000, 100_000)
                    + bad + _shaped_lines(10, 150_000))
    with pytest.raises(KvbenchInputError, match=rf"long.csv:150004: {message}$"):
        load_workload(str(path), None, 0, VOCAB)


def test_every_bad_row_read_is_counted(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + ROW + "1,x,-1,2,3,y\n" + ROW + "1,x,2,2.5,3,y\n1,x,2\n")
    with pytest.raises(KvbenchInputError, match=r"t.csv:3: Request tokens must be an integer "
                                                r">= 0, got -1 \(and 2 more bad lines\)$"):
        load_workload(str(path), None, 0, VOCAB)


def test_a_bad_row_exits_the_command_non_zero(tmp_path, capsys):
    from kvbench.cli import main

    path = tmp_path / "bad.csv"
    path.write_text(HEADER + _shaped_lines(5000) + "17,ChatGPT,5,three,0,API log\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["simulate", "--workload", str(path), "--out", str(tmp_path / "out"),
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:5002: Response tokens must be an integer >= 0, got 'three'" in err
    assert len(err.strip().splitlines()) == 1


def test_num_requests_does_not_read_the_rest_of_the_file(tmp_path):
    # the bad row lies megabytes past the first rows: it is never read
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _shaped_lines(200_000) + "17,ChatGPT,ten,3,0,API log\n")
    assert [r.prompt_len for r in load_workload(str(path), 3, 0, VOCAB).requests] == \
        [100, 101, 102]
    with pytest.raises(KvbenchInputError, match="t.csv:200002"):
        load_workload(str(path), None, 0, VOCAB)


def test_spaces_quotes_bom_crlf_and_column_order(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf Log Type ,Response tokens, Request tokens ,Timestamp,Model\r\n"
                     b'"API log, old", 18 , 472 ,5,"Chat\r\nGPT"\r\n'
                     b"x,4.0,1e3,7.5,y\r\n")
    requests = load_workload(str(path), None, 0, VOCAB).requests
    assert [(r.arrival_s, r.prompt_len, r.output_len) for r in requests] == \
        [(0.0, 472, 18), (2.5, 1000, 4)]


def test_fractional_and_utc_offset_timestamps(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2024-05-10 00:00:00.0097750+00:00,10,2\n"
                    "2024-05-10T01:00:00.5-01:30,10,2\n"
                    "2024-05-10 00:00:01Z,10,2\n"
                    " 2024-05-10 00:00:02 ,10,2\n")
    times = [r.arrival_s for r in load_workload(str(path), None, 0, VOCAB).requests]
    first = datetime(2024, 5, 10, 0, 0, 0, 9775, tzinfo=UTC).timestamp()
    assert times == pytest.approx(
        [0.0, 1 - 0.009775, 2 - 0.009775,
         datetime.fromisoformat("2024-05-10T01:00:00.5-01:30").timestamp() - first], abs=1e-6)


@pytest.mark.parametrize("text", ["now", "yesterday", "2023-02-30 00:00:00", ""])
def test_a_bad_datetime_is_named(tmp_path, text):
    path = tmp_path / "a.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,1,1\n"
                    f"{text},10,2\n")
    message = "TIMESTAMP is empty" if not text else \
        f"TIMESTAMP must be a date-time, got '{text}'"
    with pytest.raises(KvbenchInputError, match=rf"a.csv:3: {message}$"):
        load_workload(str(path), None, 0, VOCAB)
