"""Plain-text tables for the terminal and CI logs (tabulate's `simple` format): the first
column left-aligned, the others right-aligned, a dashed rule under the header."""

from __future__ import annotations

from collections.abc import Sequence

import tabulate as tabulate_module


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    align = ["left"] + ["right"] * (len(headers) - 1)
    # tabulate pads every header by MIN_PADDING (2) spaces, which widens the 13-column summary
    # table by 26 characters past a wide terminal; the column gap alone separates them here.
    padding = tabulate_module.MIN_PADDING
    tabulate_module.MIN_PADDING = 0
    try:
        # Cells are already formatted: no number parsing, so "16/16" or "1.50x" print as given.
        text = tabulate_module.tabulate(cells, headers=[str(h) for h in headers],
                                        tablefmt="simple", colalign=align,
                                        disable_numparse=True)
    finally:
        tabulate_module.MIN_PADDING = padding
    return "\n".join(line.rstrip() for line in text.splitlines())


def fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"
