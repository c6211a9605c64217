"""A simulated run's report shows its KV budget as vLLM's start-up sized it: total to KV."""

from __future__ import annotations

import json
import re

from kvbench.cli import main
from kvbench.report.budget_waterfall import waterfall_terms
from kvbench.units import format_bytes


def _simulate(tmp_path, *extra: str):
    assert main(["simulate", "--model", "llama-2-13b", "--gpu", "a100-40gb",
                 "--num-requests", "4", "--quiet", "--out", str(tmp_path), *extra]) == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return json.loads((run / "config.json").read_text()), (run / "report.html").read_text()


def test_the_report_draws_the_budget_from_total_memory_to_kv(tmp_path):
    config, html = _simulate(tmp_path)
    terms = config["kv_budget_terms"]
    rows = waterfall_terms(terms)
    total, requested, *spent, available = (value for _, value in rows)
    assert available == requested - sum(spent) == config["kv_budget_bytes"]
    assert [name for name, _ in rows][-2] == "− CUDA graphs"  # vLLM's default: captured
    section = html[html.index("id='budget'"):]
    section = section[:section.index("</section>")]
    text = re.sub(r"<[^>]+>", " ", section)
    for name, value in rows:
        assert name in text and format_bytes(value) in text
    assert "NVIDIA A100 SXM4 40GB" in text and f"{terms['kv_cache_tokens']:,} tokens" in text


def test_a_given_budget_draws_no_waterfall(tmp_path):
    config, html = _simulate(tmp_path, "--kv-memory", "2GiB")
    assert config["kv_budget_terms"] is None and config["kv_budget_bytes"] == 2 * 2**30
    assert "id='budget'" not in html
