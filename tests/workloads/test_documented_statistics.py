"""docs/workloads.md's table "Measured statistics (10,000 requests, seed 0)" is what the
workloads generate: the same builds as test_workload_statistics.py (the `built` fixture)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DOC = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"


def _measured_rows() -> dict[str, tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Measured statistics (10,000 requests, seed 0)"):]
    rows = {}
    for line in table.splitlines()[4:]:
        if not line.startswith("|"):
            break
        name, prompt, output, _targets = (c.strip() for c in line.strip("|").split("|"))
        rows[name.strip("`")] = (prompt, output)
    return rows


def _shown(lengths: np.ndarray, with_log: bool) -> str:
    """`mean / median / p99` as the table prints them (`(ln: mean ± std)` for lmsys)."""
    mean, median, p99 = lengths.mean(), np.median(lengths), np.percentile(lengths, 99)
    mean_text = f"{mean:,.0f}" if mean == int(mean) and lengths.std() == 0 else f"{mean:,.1f}"
    text = f"{mean_text} / {median:,.0f} / {p99:,.0f}"
    if with_log:
        logs = np.log(lengths)
        text += f" (ln: {logs.mean():.3f} ± {logs.std():.3f})"
    return text


def test_the_measured_statistics_table_is_what_the_workloads_generate(built):
    rows = _measured_rows()
    assert set(rows) == {"chat", "sharegpt", "lmsys", "summarize", "prefix-repeat", "parallel",
                         "uniform"}
    for name, (prompt_shown, output_shown) in rows.items():
        prompt, output = built(name)
        with_log = "ln:" in prompt_shown
        assert _shown(prompt, with_log) == prompt_shown, name
        assert _shown(output, with_log) == output_shown, name
