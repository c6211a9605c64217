"""A small paged + prefix comparison folder shared by the report tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.cli import main

# Tight memory so that paged preempts and prefix shares: every section has something to show.
TINY = ["--num-requests", "12", "--warmup", "0", "--kv-memory", "2MiB", "--quiet", "--defaults",
        "classic"]


@pytest.fixture(scope="session")
def comparison(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert main(["run", "--strategy", "paged,prefix", "--workload", "chat", "--out", str(out),
                 *TINY]) == 0
    (root,) = [p for p in out.iterdir() if p.is_dir()]
    return root
