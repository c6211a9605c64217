"""How much memory this machine can hand out now, read without torch (the workloads and the
model's memory check both ask before they allocate)."""

from __future__ import annotations

import os
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def cpu_available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable of /proc/meminfo (what the kernel can hand out without swapping, page
    cache included); elsewhere free physical pages; None when neither can be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None

