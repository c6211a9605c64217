"""A generated comparison report opened from file:// in headless Chromium, network off:
no console errors, every chart rendered, a screenshot kept in test-artifacts/."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kvbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
TINY = ["--num-requests", "8", "--warmup", "0", "--kv-memory", "8MiB", "--quiet"]


def find_chromium() -> str | None:
    names = [os.environ.get("KVBENCH_CHROMIUM", ""), "chromium", "chromium-browser",
             "google-chrome", "google-chrome-stable", "chrome"]
    return next((shutil.which(n) for n in names if n and shutil.which(n)), None)


CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install "
                                                         "chromium)")

# Injected into a copy of the report: records errors, then after load writes what rendered.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => __errors.push('error: ' + (e.message || e.type)), true);
window.addEventListener('unhandledrejection', e => __errors.push('rejection: ' + e.reason));
(function () {
  const original = console.error;
  console.error = function (...args) { __errors.push('console: ' + args.join(' '));
                                       original.apply(console, args); };
})();
window.addEventListener('load', () => setTimeout(() => {
  const charts = Array.from(document.querySelectorAll('[data-chart]')).map(c => ({
    name: c.dataset.chart,
    svgs: c.querySelectorAll('svg.main-svg').length,
    plots: c.querySelectorAll('.plot-container').length,
    traces: c.querySelectorAll('g.trace, g.point').length,
  }));
  document.body.setAttribute('data-probe', JSON.stringify({errors: __errors, charts}));
}, 300));
</script>"""


def chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess:
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-extensions", "--hide-scrollbars",
        # no network at all: a page that needs one logs a failed load
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost",
        f"--user-data-dir={user_data}", "--enable-logging=stderr", "--v=0",
        "--virtual-time-budget=15000", *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser")
    assert main(["run", "--strategy", "contiguous,paged,prefix", "--workload", "chat",
                 "--out", str(out), *TINY]) == 0
    (root,) = [p for p in out.iterdir() if p.is_dir()]
    return root / "report.html"


def test_report_renders_in_chromium_without_errors(report, tmp_path):
    probe = report.with_name("report-probe.html")
    probe.write_text(report.read_text().replace("<head>", "<head>" + PROBE, 1))
    result = chromium("--dump-dom", probe.as_uri(), user_data=tmp_path / "profile")
    assert result.returncode == 0, result.stderr[-2000:]
    match = re.search(r'data-probe="([^"]*)"', result.stdout)
    assert match, "the page never finished loading:\n" + result.stderr[-2000:]
    state = json.loads(html.unescape(match.group(1)))
    assert state["errors"] == []
    names = [c["name"] for c in state["charts"]]
    assert names == ["throughput", "latency", "ttft-split", "itl", "throughput-time",
                     "step-time", "memory", "timelines", "memory-time", "prefix",
                     "residency"]
    for chart in state["charts"]:
        assert chart["plots"] == 1 and chart["svgs"] >= 1 and chart["traces"] >= 1, chart
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line]
    assert not [c for c in console if "Uncaught" in c or "rror" in c], console
    assert "Failed to load resource" not in result.stderr
    assert "ERR_NAME_NOT_RESOLVED" not in result.stderr


def test_screenshot_artifact(report, tmp_path):
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-comparison.png"
    shot.unlink(missing_ok=True)
    result = chromium(f"--screenshot={shot}", "--window-size=1400,3000", report.as_uri(),
                      user_data=tmp_path / "profile")
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 50_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
