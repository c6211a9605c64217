"""scripts/walk.py on one `kvbench run`: the calls between packages are the ones docs/design.md
draws ("The walk of one `kvbench run`"), and no other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Down the walk, the two checks planning makes (results.files, the engine's RequestCheck), the
# two callbacks handed down (the step recorder's stream, `on_run_start`), the summary reading
# the engine's books, and the report and the CLI's table reading the results.
DRAWN = {
    (None, "cli"), ("cli", "session"), ("session", "build"), ("build", "engine"),
    ("session", "engine"), ("session", "results"), ("session", "report"),
    ("engine", "results"), ("session", "cli"), ("results", "engine"),
    ("report", "results"), ("cli", "report"),
}


def test_one_run_walks_the_drawn_packages(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "walk.py"), "run", "--strategy", "paged",
         "--workload", "chat", "--num-requests", "4", "--quiet", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    edges = {tuple(None if p == "None" else p for p in line.split(":")[0].split(" -> "))
             for line in proc.stdout.splitlines() if " -> " in line}
    assert edges <= DRAWN, edges - DRAWN
    walk = [("cli", "session"), ("session", "build"), ("build", "engine"),
            ("engine", "results"), ("session", "report")]
    assert all(edge in edges for edge in walk), edges
