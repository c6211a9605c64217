"""The docs that list the model presets list every one `kvbench list` prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvbench.models.presets import PRESETS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _listed(text: str) -> set[str]:
    # a quoted name, alone or as `--model NAME` (a line may break inside the quotes)
    return {quoted.split()[-1] for quoted in re.findall(r"`([^`]+)`", text)}


@pytest.mark.parametrize("doc, start, end", [
    ("models.md", "`--model tiny`", "a\nlocal Hugging Face folder"),
    ("estimate.md", "a preset (`kvbench` presets:", ")"),
])
def test_a_doc_lists_every_preset(doc: str, start: str, end: str) -> None:
    text = (DOCS / doc).read_text()
    at = text.index(start)
    listing = text[at:text.index(end, at + len(start))]
    assert set(PRESETS) - _listed(listing) == set()
