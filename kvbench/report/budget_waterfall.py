"""The KV budget of a simulated run as vLLM's start-up sized it, from total memory down to KV
(`config.json`'s `kv_budget_terms`: `kvbench.sizing.vllm_startup`'s); runs without those terms
(a given `--kv-memory`, a measured CUDA budget) add nothing."""

from __future__ import annotations

from html import escape
from typing import Any

from kvbench.report.runs import RunSet
from kvbench.units import format_bytes


def waterfall_terms(terms: dict[str, Any]) -> list[tuple[str, int]]:
    """(term, bytes) from the total memory of one GPU (the first pipeline stage's) to its
    available KV cache."""
    stage = terms["stages"][0]
    rows = [("total memory", stage["total"]),
            (f"× utilization {terms['gpu_memory_utilization']:g}", stage["requested"]),
            ("− weights", stage["weights"]),
            ("− peak activation", stage["activation"]),
            ("− non-torch memory", stage["non_torch"])]
    if stage["cuda_graphs_subtracted"]:
        rows.append(("− CUDA graphs", stage["cuda_graphs"]))
    rows.append(("= available KV cache", stage["available"]))
    return rows


def budget_waterfall_html(runset: RunSet) -> str:
    """One waterfall table per distinct start-up among the runs; empty when none has one."""
    seen: dict[str, list[str]] = {}
    terms_of: dict[str, dict[str, Any]] = {}
    for run in runset.runs:
        terms = run.config.get("kv_budget_terms")
        if not terms:
            continue
        key = repr(terms["stages"][0]) + str(terms.get("vllm_version"))
        seen.setdefault(key, []).append(run.label)
        terms_of[key] = terms
    return "".join(_table(terms_of[key], labels) for key, labels in seen.items())


def _table(terms: dict[str, Any], labels: list[str]) -> str:
    rows = waterfall_terms(terms)
    total = max(rows[0][1], 1)
    body = []
    for name, value in rows:
        width = max(0.0, min(100.0, 100 * value / total))
        bar = (f"<div style='background:#4c78a8;height:0.8em;width:{width:.1f}%'></div>")
        body.append(f"<tr><td>{escape(name)}</td><td>{escape(format_bytes(value))}</td>"
                    f"<td style='min-width:16em'>{bar}</td></tr>")
    tp = terms.get("tensor_parallel_size", 1)
    tokens = terms.get("kv_cache_tokens")
    note = (f"vLLM {escape(str(terms.get('vllm_version')))}'s start-up on "
            f"{escape(str(terms.get('gpu') or '-'))}, per GPU"
            + (f" (× {tp} GPUs)" if tp > 1 else "") + f"; runs: {escape(', '.join(labels))}"
            + (f"; vLLM's pool: {tokens:,} tokens" if tokens else "")
            + (f"; vLLM would refuse to start at these flags: {escape(terms['refusal'])}"
               if terms.get("refusal") else ""))
    return ("<table class='summary'><tr><th>term</th><th>bytes</th><th></th></tr>"
            + "".join(body) + f"</table><p class='note'>{note}</p>")
