"""`CsvFormat`: what a CSV trace format's reader needs to know (Azure, BurstGPT)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CsvFormat:
    """The columns giving arrival time, prompt and output tokens; whether the time is an ISO
    date-time (Azure) or seconds (BurstGPT)."""

    columns: tuple[str, str, str]
    datetimes: bool
    tokens_stream: str  # the seeded stream the prompts' ids are drawn from
    left_out: str  # why rows are left out, for the warning
