"""The row reader of CSV traces (`csv_trace.read_csv_rows`): blank and irregular rows."""

from __future__ import annotations

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


def test_a_row_lacking_only_unread_columns_is_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "5,ChatGPT,472,18\n")
    assert _prompt_lens(path) == [472]
