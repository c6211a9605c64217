"""The plain reader of CSV traces (`csv_plain_reader.py`) gives what the row reader
(`csv_trace.read_csv_rows`) gives, or gives up: generated traces with odd spacing, empty
lines, quoted fields, a BOM, CRLF, failed rows, extra columns, and bad rows that must be
refused with the row reader's `file:line:` message."""

from __future__ import annotations

import string
import warnings
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.errors import KvbenchInputError
from kvbench.workloads import azure, burstgpt, load_workload
from kvbench.workloads.csv_format import CsvFormat
from kvbench.workloads.csv_numbers import parse_iso_datetimes
from kvbench.workloads.csv_plain import CHUNK_BYTES
from kvbench.workloads.csv_plain_reader import READ_AHEAD_BYTES, read_plain_columns
from kvbench.workloads.csv_trace import read_csv_columns, read_csv_rows

DATA = Path(__file__).parent / "data"
BURSTGPT = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
            "Log Type"]
AZURE = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
EXTRA = ["Session ID", "Elapsed time"]
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _by_rows(path: Path, fmt: CsvFormat, num_requests: int | None) -> tuple:
    """What the row reader gives: its rows (times as bits) and count left out, or its
    error."""
    try:
        rows, skipped = read_csv_rows(path, fmt.columns, fmt.parse, num_requests)
    except KvbenchInputError as err:
        return ("error", str(err))
    return ("rows", [(r.arrival_s.hex(), r.prompt_len, r.output_len) for r in rows], skipped)


def _as_rows(columns, skipped: int) -> tuple:
    assert columns.arrival_s.dtype == np.float64 and columns.prompt_len.dtype == np.int64
    return ("rows", [(float(a).hex(), int(p), int(o)) for a, p, o in zip(
        columns.arrival_s, columns.prompt_len, columns.output_len, strict=True)], skipped)


def _by_both(path: Path, fmt: CsvFormat, num_requests: int | None) -> tuple:
    try:
        return _as_rows(*read_csv_columns(path, fmt, num_requests))
    except KvbenchInputError as err:
        return ("error", str(err))


def _check(tmp_path: Path, data: bytes, fmt: CsvFormat, num_requests: int | None,
           plain: bool) -> None:
    """The plain reader answers what the row reader gives (and must answer for a plain
    file); the two together give what the row reader gives, errors included."""
    path = tmp_path / "trace.csv"
    path.write_bytes(data)
    expected = _by_rows(path, fmt, num_requests)
    found = read_plain_columns(path, fmt, num_requests)
    if plain:
        assert found is not None, data
    if found is not None:
        assert _as_rows(*found) == expected
    assert _by_both(path, fmt, num_requests) == expected


# -- generated fields: `plain` ones the plain reader reads itself, others it may give up on

def _spaced(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(st.sampled_from(["", " ", "  "]), text, st.sampled_from(["", " "])).map(
        "".join)


PLAIN_COUNTS = _spaced(st.one_of(
    st.integers(0, 40_000).map(str), st.just("0"), st.integers(0, 999).map("00{}".format),
    st.just("16777216")))
ODD_COUNTS = st.sampled_from(["ten", "-3", "1e3", "4.0", "", "inf", "nan", "16777217",
                              "99999999", "1_000", "\u0663", "\t7", "0x10", " 1 2"])
PLAIN_SECONDS = _spaced(st.one_of(
    st.integers(0, 10**12).map(str),
    st.tuples(st.integers(0, 10**6), st.text("0123456789", max_size=9)).map(
        lambda t: f"{t[0]}.{t[1]}"),
    st.text("0123456789", min_size=1, max_size=6).map(".{}".format)))
ODD_SECONDS = st.sampled_from(["-1", "nan", "1e3", "abc", "", "inf", "1_0", ".", "1.2.3",
                               "+5", "12345678901234567"])
TEXT = st.text(string.ascii_letters + string.digits + " -_.:ü", max_size=12)
# ("\udcff" is written as the byte 0xff: not UTF-8)
ODD_TEXT = st.sampled_from(['"quoted, with comma"', 'say "hi"', "a,b", "a\rb", "nul\x00",
                            "tab\t", "\udcff", '"'])


@st.composite
def iso_datetimes(draw) -> str:
    moment = draw(st.datetimes(datetime(1800, 1, 1), datetime(2200, 12, 31)))
    text = moment.strftime("%Y-%m-%d") + draw(st.sampled_from(" T")) + \
        moment.strftime("%H:%M:%S")
    fraction = draw(st.text("0123456789", min_size=0, max_size=12))
    if fraction:
        text += "." + fraction
    zone = draw(st.one_of(st.just(""), st.just("Z"), st.tuples(
        st.sampled_from("+-"), st.integers(0, 23), st.integers(0, 59)).map(
        lambda z: f"{z[0]}{z[1]:02d}:{z[2]:02d}")))
    return text + zone


PLAIN_DATETIMES = _spaced(iso_datetimes())
ODD_DATETIMES = st.sampled_from([
    "2023-02-30 00:00:00", "2023-11-16 24:00:00", "2023-11-16 18:60:00", "2023-11-16 18:15",
    "1700-01-01 00:00:00", "2023-11-16 18:15:46.", "2023-11-16 18:15:46+05:60", "yesterday",
    "2023-11-16 18:15:46 +05:30", "20231116T181546", "2023-11-16x18:15:46", "",
    "2023-11-16 18:15:46+0530", "2023-11-16 18:15:46+24:00", "2024-02-29 12:00:00",
    "2023-13-01 00:00:00", "0000-01-01 00:00:00", "2023-11-16 18:15:46.1234567890123",
    "2023-11-16 18:15:46z", "2023-11-16 18:15:46+05:30:15", "2023-11-16\t18:15:46",
    "1900-02-29 00:00:00", "2100-02-29 00:00:00", "2000-02-29 00:00:00", "2023-04-31 00:00:00",
    "2023-11-16 18:15:46.5Z", "2023-11-16 18:15:46-00:00", "2023-11-16 18:15:46+23:59"])


def _field(draw, column: str, odd: bool | None) -> str:
    """A field of the column: a plain one, an odd one, or (`odd` None) either."""
    if column in ("Request tokens", "Response tokens", "ContextTokens", "GeneratedTokens"):
        plain, other = PLAIN_COUNTS, ODD_COUNTS
    elif column == "Timestamp":
        plain, other = PLAIN_SECONDS, ODD_SECONDS
    elif column == "TIMESTAMP":
        plain, other = PLAIN_DATETIMES, ODD_DATETIMES
    else:
        plain, other = TEXT, ODD_TEXT
    return draw(plain if odd is False else other if odd else st.one_of(plain, other))


ODD_LINES = [b"   ", b"\t", b",,,,,", b",,,,,,,,,,", b"1,2", b"\xff\xfe,1,2", b"a\rb", b"\r",
             b'"5","x","1","2","3","y"', b"\x00"]


@st.composite
def traces(draw, columns: list[str]) -> tuple[bytes, bool, int | None]:
    """A CSV trace of the columns (in any order, perhaps with newer ones), whether it is
    plain, and a number of requests to read. A trace is plain, or plain but for one odd
    line or field (so that nothing else makes the plain reader give up first), or has any
    number of odd ones."""
    mode = draw(st.sampled_from(["plain", "one odd", "any"]))
    names = draw(st.permutations(columns + draw(st.lists(st.sampled_from(EXTRA),
                                                         unique=True, max_size=2))))
    comma = draw(st.sampled_from([",", ", "]))
    newline = draw(st.sampled_from(["\n", "\r\n"])).encode()
    rows: list[list[str] | bytes] = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            rows.append(b"")  # an empty line
        elif kind == 1 and mode == "any":
            rows.append(draw(st.sampled_from(ODD_LINES)))
        else:
            fields = [_field(draw, name, False if mode != "any" else None) for name in names]
            if kind == 2 and mode == "any":  # a field too few or too many
                fields = fields[:-1] if draw(st.booleans()) else [*fields, "x"]
            rows.append(fields)
    if mode == "one odd":
        at = draw(st.integers(0, len(rows)))
        kind = draw(st.integers(0, 2))
        if kind == 0:
            rows.insert(at, draw(st.sampled_from(ODD_LINES)))
        else:
            fields = [_field(draw, name, False) for name in names]
            if kind == 1:
                column = draw(st.integers(0, len(names) - 1))
                fields[column] = _field(draw, names[column], True)
            else:
                fields = fields[:-1] if draw(st.booleans()) else [*fields, "x"]
            rows.insert(at, fields)
    lines = [comma.join(names).encode()]
    lines += [row if isinstance(row, bytes) else comma.join(row).encode(errors="surrogateescape")
              for row in rows]
    data = newline.join(lines) + (newline if draw(st.booleans()) else b"")
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    num_requests = draw(st.one_of(st.none(), st.integers(1, len(lines) + 1)))
    return data, mode == "plain", num_requests


@SETTINGS
@given(trace=traces(BURSTGPT))
def test_burstgpt_traces_read_alike(tmp_path, trace):
    _check(tmp_path, trace[0], burstgpt.FORMAT, trace[2], trace[1])


@SETTINGS
@given(trace=traces(AZURE))
def test_azure_traces_read_alike(tmp_path, trace):
    _check(tmp_path, trace[0], azure.FORMAT, trace[2], trace[1])


def _python_timestamps(texts: list[str]) -> list[float] | None:
    try:
        return [azure._timestamp_s(text) for text in texts]
    except ValueError:  # RowError
        return None


@settings(max_examples=500, deadline=None)
@given(texts=st.lists(st.one_of(iso_datetimes().map(lambda t: (t, True)),
                                ODD_DATETIMES.map(lambda t: (t, False))),
                      min_size=1, max_size=6))
def test_iso_datetimes_are_what_fromisoformat_gives(texts):
    strings = [text for text, _ in texts]
    joined = "\n".join(strings).encode()
    ends = np.cumsum([len(t.encode()) + 1 for t in strings]) - 1
    starts = ends - [len(t.encode()) for t in strings]
    found = parse_iso_datetimes(np.frombuffer(joined, np.uint8), starts, ends)
    expected = _python_timestamps(strings)
    if all(plain for _, plain in texts):
        assert found is not None, strings
    if found is not None:  # (None: the row reader reads them)
        assert expected is not None, strings
        assert [float(v).hex() for v in found] == [v.hex() for v in expected]


H = b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
ROW = b"5,ChatGPT,472,18,490,Conversation log\n"


@pytest.mark.parametrize(("data", "num_requests"), [
    # a quoted comma that keeps the count of commas: the columns shift for the csv module
    (b"Model,Log Type,Timestamp,Request tokens,Response tokens,Total tokens\n"
     b'x,y,1,2,3,4\n"a,b",7,1,2,3\n', None),
    (H + ROW + b'6,"Chat""GPT",472,18,490,x\n', None),
    (H + ROW + b"1.2.3,ChatGPT,472,18,490,x\n", None),
    (H + ROW + b"5,\xff\xfe,472,18,490,x\n", None),  # not UTF-8 in a column not read
    (H + ROW * 3 + b"5,\xff\xfe,472,18,490,x\n", 2),  # ... in what the csv module reads ahead
    (H + ROW + b"5,ChatGPT,16777217,18,490,x\n", None),
    (H + ROW + b"5,ChatGPT,16777216,18,490,x\n", None),
    (H + ROW + b"5,Chat\rGPT,472,18,490,x\n", None),  # a lone CR ends a record
    (H + ROW + b"5,ChatGPT,472,18,490,x\r", None),
    (H + ROW + b"5,Chat\x00GPT,472,18,490,x\n", None),
    (H + ROW + b"5," + b"x" * 140_000 + b",472,18,490,x\n", None),  # past the field limit
    (H + ROW + "5,ChatGPT,\ufeff472,18,490,x\n".encode(), None),
    (H, None),
    (b"Timestamp,Timestamp,Request tokens,Response tokens\n1,2,3,4\n", None),
    (b" Timestamp\t, Model ,Request tokens,Response tokens\r\n1, x, 3, 4\n", None),
    (b"\xef\xbb\xbf" + H + ROW + b"\n\n\r\n" + ROW, 1),
    (H + ROW + b"7,ChatGPT,0,18,490,x\n" + ROW, 2),
])
def test_odd_files_read_alike(tmp_path, data, num_requests):
    _check(tmp_path, data, burstgpt.FORMAT, num_requests, plain=False)


def test_the_published_samples_are_read_plainly():
    for name, fmt in (("azure.csv", azure.FORMAT), ("burstgpt.csv", burstgpt.FORMAT)):
        assert read_plain_columns(DATA / name, fmt, None) is not None


def _shaped_lines(num: int, first: int = 0) -> bytes:
    return b"".join(b"%d,ChatGPT,%d,%d,0,Conversation log\n" % (first + i, 100 + i % 50,
                                                                   1 + i % 7)
                    for i in range(num))


HEADER = ",".join(BURSTGPT).encode() + b"\n"


def test_num_requests_reads_no_further_than_it_must(tmp_path):
    # a non-plain line well past the first rows is never read; one close after them is
    # (the row reader would read it: the plain reader leaves the file to it)
    far = tmp_path / "far.csv"
    far.write_bytes(HEADER + _shaped_lines(100_000) + b'"a",b\n\xff\n' + _shaped_lines(10))
    assert len(far.read_bytes()) > CHUNK_BYTES + READ_AHEAD_BYTES + 100 * 40
    columns, skipped = read_plain_columns(far, burstgpt.FORMAT, 100)
    assert len(columns) == 100 and skipped == 0
    assert _as_rows(columns, skipped) == _by_rows(far, burstgpt.FORMAT, 100)
    near = tmp_path / "near.csv"
    near.write_bytes(HEADER + _shaped_lines(100) + b'"a",b\n' + _shaped_lines(10))
    assert read_plain_columns(near, burstgpt.FORMAT, 100) is None
    assert _by_both(near, burstgpt.FORMAT, 100) == _by_rows(near, burstgpt.FORMAT, 100)
    assert _by_both(near, burstgpt.FORMAT, 101)[0] == "error"


def test_num_requests_reads_as_far_as_the_row_readers_text_layer(tmp_path):
    # The row reader reads one record past the last row kept, decoding 8 KiB blocks: text
    # that is not UTF-8 just after that record is an error to it, even when the record
    # ends a chunk of the plain reader.
    row = b"%07d,ChatGPT,472,18,490,x\n"
    size = len(row % 0)
    last = CHUNK_BYTES // size  # the line across the first chunk's end
    bad = b"5,\xff" + b"x" * 2 * size + b",472,18,490,x\n"
    path = tmp_path / "t.csv"
    path.write_bytes(HEADER + b"".join(row % i for i in range(last)) + bad + row % 0)
    assert last * size < CHUNK_BYTES < last * size + len(bad)
    expected = _by_rows(path, burstgpt.FORMAT, last - 1)
    assert expected[0] == "error" and "not a readable CSV file" in expected[1]
    assert read_plain_columns(path, burstgpt.FORMAT, last - 1) is None
    assert _by_both(path, burstgpt.FORMAT, last - 1) == expected
    assert len(read_plain_columns(path, burstgpt.FORMAT, 100)[0]) == 100


@pytest.mark.parametrize(("bad", "message"), [
    (b"17,ChatGPT,ten,3,0,API log\n", r"Request tokens must be an integer >= 0, got 'ten'"),
    (b"17,ChatGPT,5,3,0\n", None),  # a column too few (an unread one): read
    (b"17,ChatGPT,5,3,0,API log,x\n", r"expected 6 columns"),
    (b'17,"ChatGPT",5,-3,0,API log\n', r"Response tokens must be an integer >= 0, got -3"),
    (b"-17,ChatGPT,5,3,0,API log\n", r"Timestamp must be a finite number >= 0, got -17.0"),
])
def test_a_bad_row_in_a_long_trace_is_named_by_its_line(tmp_path, bad, message):
    path = tmp_path / "long.csv"
    path.write_bytes(HEADER + _shaped_lines(150_000) + bad + _shaped_lines(10, 150_000))
    if message is None:
        assert len(load_workload(str(path), None, 0, 1000).requests) == 150_011
        return
    with pytest.raises(KvbenchInputError, match=rf"long.csv:150002: {message}$"):
        load_workload(str(path), None, 0, 1000)


def test_a_bad_row_exits_the_command_non_zero(tmp_path, capsys):
    from kvbench.cli import main

    path = tmp_path / "bad.csv"
    path.write_bytes(HEADER + _shaped_lines(5000) + b"17,ChatGPT,5,three,0,API log\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["simulate", "--workload", str(path), "--out", str(tmp_path / "out"),
                     "--quiet"]) == 2
    assert f"{path}:5002: Response tokens must be an integer >= 0, got 'three'" in \
        capsys.readouterr().err


def test_fractional_and_utc_offset_timestamps(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2024-05-10 00:00:00.0097750+00:00,10,2\n"
                    "2024-05-10T01:00:00.5-01:30,10,2\n"
                    "2024-05-10 00:00:01Z,10,2\n")
    columns, _ = read_plain_columns(path, azure.FORMAT, None)
    expected = [datetime(2024, 5, 10, 0, 0, 0, 9775, tzinfo=UTC).timestamp(),
                datetime.fromisoformat("2024-05-10T01:00:00.5-01:30").timestamp(),
                datetime(2024, 5, 10, 0, 0, 1, tzinfo=UTC).timestamp()]
    assert columns.arrival_s.tolist() == expected
