"""`kvbench run/simulate --slo` prints each run's goodput under the summary table, with the
figures kvbench_summary.json holds."""

from __future__ import annotations

import json

from kvbench.cli import main

SIM = ["simulate", "--model", "llama-2-7b", "--warmup", "0", "--num-requests", "20",
       "--strategy", "contiguous,paged"]


def test_slo_goodput_is_printed_from_summary_json(tmp_path, capsys):
    # A TTFT target that the later arrivals of an offline burst miss: a share below 100%.
    assert main([*SIM, "--slo", "ttft=300ms,tpot=50ms", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = lines.index("goodput under the SLO (ttft <= 300 ms, tpot <= 50 ms):")
    rows = {line.split()[0]: line.split()[1:] for line in lines[head + 3:head + 5]}
    (folder,) = tmp_path.iterdir()
    for label in ("contiguous-max-vllm-v1", "paged-vllm-v1"):
        goodput = json.loads((folder / label / "kvbench_summary.json").read_text())["goodput"]
        met, share, rate, unit = rows[label]
        assert met == f"{goodput['requests_meeting_slo']}/20"
        assert share == f"{goodput['fraction_meeting_slo']:.1%}"
        assert rate == f"{goodput['goodput_requests_s']:.2f}" and unit == "req/s"
    assert any(r[0] != "20/20" for r in rows.values())  # the target bites


def test_no_goodput_lines_without_an_slo(tmp_path, capsys):
    assert main([*SIM, "--out", str(tmp_path)]) == 0
    assert "goodput under" not in capsys.readouterr().out
