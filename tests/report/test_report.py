"""HTML reports: written after every run, self-contained, every section there, several runs
side by side with their differences, and `kvbench report` on the command line."""

from __future__ import annotations

import json
import re
import shutil
from html import escape
from pathlib import Path

import pytest

from kvbench.cli import main
from kvbench.report.runs import load_run, load_runs
from kvbench.report.writer import write_report
from kvbench.session.runner import RunOutcome
from kvbench.session.session import write_reports


def network_urls(html: str) -> list[str]:
    """URLs the page would fetch: in src/href attributes and CSS, outside inline scripts."""
    scripts = re.findall(r"(?is)<script\b([^>]*)>", html)
    assert all("src" not in attrs.lower() for attrs in scripts), scripts
    markup = re.sub(r"(?is)<script\b[^>]*>.*?</script>", "", html)
    found = re.findall(r"""(?i)\b(?:src|href|srcset|action|data)\s*=\s*["']?([^"'\s>]+)""",
                       markup)
    found += re.findall(r"""(?i)url\(\s*["']?([^"')]+)""", markup)
    found += re.findall(r"""(?i)@import\s+["']?([^"';\s]+)""", markup)
    return [u for u in found if re.match(r"(?i)^(?:[a-z][a-z0-9+.-]*:)?//", u)
            and not u.lower().startswith("file:")]


def test_a_comparison_folder_holds_one_report_with_plotly_inlined_once(comparison):
    html = (comparison / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert html.count("plotly.js v") == 1  # inlined once
    assert network_urls(html) == []
    # Per-strategy reports only on request: each would inline plotly.js again (~5 MB).
    assert not (comparison / "paged" / "report.html").exists()
    assert not (comparison / "prefix" / "report.html").exists()


def _outcome(folder: Path) -> RunOutcome:
    """A run's outcome as the session held it, from the folder it wrote."""
    run = load_run(folder)
    return RunOutcome(run.label, folder, run.summary, run.config, run.requests)


def test_per_strategy_reports_on_request(comparison, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(comparison, copy)
    outcomes = [_outcome(copy / label) for label in ("paged", "prefix")]
    write_reports(copy, outcomes, per_strategy=True)
    for label in ("paged", "prefix"):
        html = (copy / label / "report.html").read_text()
        assert html.count("plotly.js v") == 1 and network_urls(html) == []
        assert f"<title>kvbench report: {label} " in html
    write_reports(copy / "paged", outcomes[:1])  # one strategy: its folder is the results
    assert (copy / "paged" / "report.html").is_file()


def test_report_sections_and_header(comparison, tmp_path):
    out = write_report([comparison], tmp_path / "r.html")
    html = out.read_text()
    for key in ("runs", "summary", "throughput", "latency", "ttft-split", "itl",
                "throughput-time", "step-time", "memory", "timelines", "memory-time", "prefix",
                "residency"):
        assert f"<section id='{key}'>" in html, key
    charts = re.findall(r"data-chart='([\w-]+)'", html)
    # Every run writes its token times, so the ITL CDF is there.
    assert charts == ["throughput", "latency", "ttft-split", "itl", "throughput-time",
                      "step-time", "memory", "timelines", "memory-time", "prefix",
                      "residency"]
    assert "single run — differences below noise are not significant" in html
    config = json.loads((comparison / "paged" / "config.json").read_text())
    for fact in ("tiny (float32)", "chat, 12 requests",
                 "2.00 MiB; capacity: paged 1024, prefix 1024 tokens", f"torch {config['versions']['torch']}", escape(config["command"])):
        assert fact in html, fact
    assert "★" in html  # best per column
    assert "\"name\":\"preemption\"" in html  # paged preempts at 2 MiB: marked on the timeline
    assert "<section id='differences'>" not in html  # one run: nothing to diff
    assert "<section id='accuracy'>" not in html


def test_strategy_folder_and_comparison_folder_expand(comparison):
    assert [r.label for r in load_runs([comparison]).runs] == ["paged", "prefix"]
    single = load_runs([comparison / "prefix"])
    assert [r.label for r in single.runs] == ["prefix"]
    assert single.runs[0].group == comparison and not single.multi_group
    both = load_runs([comparison / "paged", comparison / "prefix", comparison])
    assert len(both.runs) == 2 and not both.multi_group  # the CLI's call, deduplicated


def _second_revision(comparison: Path, dest: Path) -> Path:
    """A copy of the comparison that looks like another git revision, paged 20% faster."""
    shutil.copytree(comparison, dest)
    for label in ("paged", "prefix"):
        config = json.loads((dest / label / "config.json").read_text())
        config["versions"]["git"] = "fedcba9"
        (dest / label / "config.json").write_text(json.dumps(config))
    summary = json.loads((dest / "paged" / "kvbench_summary.json").read_text())
    summary["throughput"]["output_tok_s"] *= 1.2
    (dest / "paged" / "kvbench_summary.json").write_text(json.dumps(summary))
    return dest


def test_two_revisions_side_by_side_with_differences(comparison, tmp_path):
    other = _second_revision(comparison, tmp_path / "rev2")
    runset = load_runs([comparison, other])
    assert runset.multi_group
    base_git = runset.runs[0].versions["git"]
    assert [r.name for r in runset.runs] == [
        f"paged @ {base_git}", f"prefix @ {base_git}", "paged @ fedcba9", "prefix @ fedcba9"]
    assert [(a.label, b.label) for a, b in runset.pairs()] == [("paged", "paged"),
                                                                ("prefix", "prefix")]
    html = write_report([comparison, other], tmp_path / "r.html").read_text()
    assert "<section id='differences'>" in html
    assert f"paged: {base_git} → fedcba9" in html
    assert "+20.0%" in html and "class='better'" in html
    assert "td class='differs'" in html  # the header shows what differs between the runs


def test_accuracy_section_and_incomplete_warning(comparison, tmp_path):
    folder = tmp_path / "fp8.partial"  # its accuracy measured, then the run failed
    shutil.copytree(comparison / "paged", folder)
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    summary["status"] = "failed"
    summary["accuracy"] = {"top1_agreement": 0.98, "max_abs_logit_error": 0.031,
                           "per_layer": {"k_rel_error": [0.01 + i / 1000 for i in range(32)],
                                         "v_rel_error": [0.01, 0.02]}}
    (folder / "kvbench_summary.json").write_text(json.dumps(summary))
    html = write_report([folder], tmp_path / "r.html").read_text()
    assert "<section id='accuracy'>" in html
    assert "top1_agreement" in html and "per_layer.k_rel_error" in html
    assert "32 values (charted below)" in html and "[0.01, 0.02]" in html
    assert "data-chart='accuracy'" in html
    assert "Incomplete runs" in html and "failed" in html


def test_report_command(comparison, tmp_path, capsys):
    target = tmp_path / "out.html"
    assert main(["report", str(comparison / "paged"), str(comparison / "prefix"), "-o",
                 str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert target.stat().st_size > 1_000_000  # plotly.js inside
    single = tmp_path / "single"
    shutil.copytree(comparison / "paged", single)
    (single / "report.html").unlink(missing_ok=True)
    assert main(["report", str(single)]) == 0
    assert (single / "report.html").is_file()
    capsys.readouterr()
    assert main(["report", str(single), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("make_args, message", [
    (lambda tmp: [str(tmp / "missing")], "no such results folder"),
    (lambda tmp: [str(tmp)], "not a kvbench results folder"),
])
def test_report_command_bad_input_exits_2(tmp_path, capsys, make_args, message):
    assert main(["report", *make_args(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvbench: error: ") and message in err


def test_a_repeated_comparison_loads_as_one_group(tmp_path):
    out = tmp_path / "out"
    assert main(["simulate", "--strategy", "paged,prefix", "--model", "llama-2-7b",
                 "--num-requests", "6", "--repeat", "2", "--quiet", "--out", str(out)]) == 0
    (root,) = out.iterdir()
    runset = load_runs([root])
    assert sorted(r.label for r in runset.runs) == ["paged-vllm-v1", "prefix-vllm-v1"]
    assert {r.group for r in runset.runs} == {root}


def test_a_session_report_takes_the_token_times_from_memory(tmp_path, monkeypatch):
    """The report written at the end of a run does not read the token file the run has just
    written; `kvbench report FOLDER` reads the file and draws the same charts."""

    def no_file_reads(folder):
        raise AssertionError(f"the token file of {folder} read back by the session's report")

    monkeypatch.setattr("kvbench.report.runs.read_token_times", no_file_reads)
    assert main(["simulate", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--workload",
                 "chat", "--num-requests", "16", "--request-rate", "8", "--quiet",
                 "--out", str(tmp_path)]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    html = (run / "report.html").read_text()
    for title in ("Inter-token latency CDF", "Output throughput over time"):
        assert title in html
    monkeypatch.undo()
    again = tmp_path / "again.html"
    write_report([run], again)
    assert len(_charts(html)) >= 5
    assert _charts(again.read_text()) == _charts(html)


@pytest.mark.parametrize("args", [
    ["--strategy", "paged,prefix", "--repeat", "2", "--per-strategy-reports"],
    ["--strategy", "prefix", "--repeat", "2"],
])
def test_a_session_report_is_the_report_of_its_folders(tmp_path, monkeypatch, args):
    """The session's reports show what its runs hold in memory (no summary, requests or
    config read back); `kvbench report FOLDER` builds the same page from the files."""

    def no_reads(folder, group=None):
        raise AssertionError(f"{folder} read back by the session's report")

    monkeypatch.setattr("kvbench.report.runs.load_run", no_reads)
    out = tmp_path / "out"
    assert main(["simulate", "--model", "llama-2-7b", "--workload", "chat", "--num-requests",
                 "16", "--request-rate", "8", *args, "--quiet", "--out", str(out)]) == 0
    monkeypatch.undo()
    reports = sorted(out.rglob("report.html"))
    assert len(reports) == (3 if "--per-strategy-reports" in args else 1)
    for path in reports:
        again = write_report([path.parent], tmp_path / "again.html")
        assert _unstamped(again.read_text()) == _unstamped(path.read_text()), path


def _unstamped(html: str) -> str:
    """The page without the time it was written."""
    return re.sub(r"Generated by kvbench (\S+) on [\d: -]+\.", r"Generated by kvbench \1.", html)


def _charts(html: str) -> list[str]:
    """The plotly figure payloads of a page (what differs between two writes is its stamps)."""
    import re

    return re.findall(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', html, flags=re.S)
