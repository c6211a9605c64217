"""The docs a user reads carry no merge-conflict markers: a merge resolved by hand once left
both sides of a paragraph in docs/findings.md and docs/simulator.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)


def test_no_conflict_markers_in_the_docs():
    pages = [ROOT / "README.md", ROOT / "results" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]
    left = [f"{page.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}"
            for page in pages for text in [page.read_text()] for m in MARKER.finditer(text)]
    assert not left, f"merge-conflict markers: {left}"
