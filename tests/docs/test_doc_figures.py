"""The figures README.md and docs/*.md quote, rerun by the commands the docs give for them: a
figure that drifts from what its command prints fails here. docs/findings.md holds every
finding; the README quotes three of them, and the machine-independent ones are checked in both.

Only figures that do not depend on the machine are checked: the simulator's (its clock is
modelled, so the same command gives the same figures anywhere), the sizing arithmetic of
`kvbench estimate`, the calibration script's tables, and counts (a real run's KV capacity,
known once its engine is built; a workload's lengths). The timings in the tables of real runs
on the CPU (docs/findings.md: memory, batching, fp8) are measured and move with the machine. Each check reads
its figures out of the doc's text, so an edit to the doc is checked as much as a change to
the code.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

import kvbench.session.session
from kvbench.cli import main
from kvbench.sweep.slo import meets_slo, parse_slo_targets

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FINDINGS = ROOT / "docs" / "findings.md"
ESTIMATE_MD = ROOT / "docs" / "estimate.md"
SWEEP_MD = ROOT / "docs" / "sweep.md"


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(path: Path) -> str:
    """The file with every run of whitespace as one space: prose figures span lines."""
    return " ".join(_text(path).split())


def _table(path: Path, header_start: str) -> list[list[str]]:
    """The cells of the markdown table whose header line starts with `header_start`."""
    lines = _text(path).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _number(cell: str) -> float:
    return float(re.search(r"[\d,]*\.?\d+", cell).group().replace(",", ""))


@pytest.fixture(autouse=True)
def _no_reports(monkeypatch):
    """The figures come from kvbench_summary.json: the HTML report (plotly: ~40% of a small
    simulation) is not needed here."""
    monkeypatch.setattr(kvbench.session.session, "write_reports", lambda *_a, **_k: None)


def _simulate(argv: list[str], tmp_path: Path, capsys) -> list[dict]:
    """`kvbench simulate ARGV --json`: the summaries."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
    assert main(["simulate", *argv, "--json", "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    return data if isinstance(data, list) else [data]


# kvbench estimate ------------------------------------------------------------------------

def _console_examples(path: Path) -> list[tuple[str, list[str]]]:
    """(command, output lines) of every `$ kvbench ...` in the file's plain fenced blocks."""
    found = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", _text(path), re.S | re.M):
        lines = body.splitlines()
        if lang:  # a ```bash block shows a command without its output
            continue
        if not lines or not lines[0].startswith("$ kvbench "):
            continue
        command, i = lines[0][2:], 1
        while command.endswith("\\"):
            command, i = command[:-1] + " " + lines[i].strip(), i + 1
        found.append((command, lines[i:]))
    return found


ESTIMATES = _console_examples(ROOT / "docs" / "estimate.md")


@pytest.mark.parametrize("command,shown", ESTIMATES, ids=[c for c, _ in ESTIMATES])
def test_estimate_prints_what_docs_estimate_md_shows(command, shown, capsys):
    assert main(shlex.split(command)[1:]) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    # `...` in the doc stands for lines left out; every line shown is printed, in order.
    at = 0
    for line in (s.rstrip() for s in shown if s.strip() != "..."):
        assert line in printed[at:], f"{command}: {line!r} not printed"
        at = printed.index(line, at) + 1


def test_the_estimate_docs_have_their_examples():
    assert len(ESTIMATES) == 7


def test_estimate_md_preset_figures(capsys):
    command = re.search(r"^(kvbench estimate [^\n]+)\n```\s+prints ", _text(ESTIMATE_MD),
                        re.M).group(1)
    m = re.search(r"prints ([\d,]+) bytes per token .*?, ([\d.]+) GiB per ([\d,]+)-token "
                  r"request, an? ([\d.]+) GiB budget .*?after ([\d.]+) GiB of weights, so (\d+) "
                  r"concurrent requests paged at that length against (\d+) with `--reserve max`",
                  _prose(ESTIMATE_MD))
    assert m, "docs/estimate.md: the preset example's prose changed shape"
    per_token, per_request, context, budget, weights, paged, reserved = m.groups()
    assert main([*shlex.split(command)[1:], "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    gib = 1024**3
    assert est["kv_bytes_per_token"] == _number(per_token)
    assert est["context"] == _number(context)
    assert f"{est['kv_bytes_per_request'] / gib:.2f}" == per_request
    assert f"{est['kv_budget_bytes'] / gib:.2f}" == budget
    assert f"{est['weights_bytes'] / gib:.2f}" == weights
    strategies = est["strategies"]
    assert strategies["paged"]["max_concurrency"] == int(paged)
    assert strategies["contiguous"]["max_concurrency"] == int(reserved)


# The simulator's step-time model against its calibration ---------------------------------

def test_simulator_md_tables_are_what_the_calibration_script_prints():
    script = ROOT / "scripts" / "simulator_calibration.py"
    spec = importlib.util.spec_from_file_location("simulator_calibration", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert module.main([]) == 0
    doc = _text(ROOT / "docs" / "simulator.md")
    table_lines = [line for line in printed.getvalue().splitlines() if line.startswith("|")]
    assert len(table_lines) == 4 + 8 + 7  # two headers, 8 operations, 7 steps
    missing = [line for line in table_lines if line not in doc]
    assert not missing, f"docs/simulator.md differs from the script: {missing}"


# kvbench sweep: SLO capacity -------------------------------------------------------------

def _sweep_command() -> list[str]:
    """The first command of docs/sweep.md, its continuation lines joined."""
    block = re.search(r"^```\n(kvbench sweep .*?)^```", _text(SWEEP_MD), re.S | re.M).group(1)
    return shlex.split(block.replace("\\\n", " "))[2:]


def _point_options(argv: list[str]) -> tuple[list[str], dict[str, float]]:
    """The options every point of the sweep shares (without its axes and search), and its
    SLO targets."""
    drop = {"--strategy", "--reserve", "--request-rate", "--slo", "--search", "--name",
            "--jobs"}
    assert argv[0] == "--simulate"
    base, slo, i = [], None, 1
    while i < len(argv):
        flag, value = argv[i], argv[i + 1]
        if flag == "--slo":
            slo = value
        elif flag not in drop:
            base += [flag, value]
        i += 2
    return base, parse_slo_targets(slo)


def _run_options(strategy_cell: str) -> list[str]:
    """`contiguous, reserve pow2` -> --strategy contiguous --reserve pow2."""
    m = re.fullmatch(r"(\w+)(?:, reserve (\w+))?.*", strategy_cell)
    strategy, reserve = m.groups()
    return ["--strategy", strategy, *(["--reserve", reserve] if reserve else [])]


def _meets(argv: list[str], rate: float, slo, tmp_path, capsys) -> tuple[bool, dict]:
    (summary,) = _simulate([*argv, "--request-rate", f"{rate:g}"], tmp_path, capsys)
    return meets_slo(summary, slo), summary


CAPACITY_ROWS = _table(SWEEP_MD, "| strategy | SLO capacity")
SEARCH_TOLERANCE = 0.05  # --tolerance's default (docs/sweep.md)


def test_sweep_md_capacity_table_has_every_strategy():
    assert [row[0].split(" (")[0] for row in CAPACITY_ROWS] == [
        "contiguous, reserve max", "contiguous, reserve pow2", "contiguous, reserve exact",
        "paged", "prefix"]


@pytest.mark.slow  # 300 requests at low rates: the reservation rows take seconds each
@pytest.mark.parametrize("row", CAPACITY_ROWS, ids=[row[0] for row in CAPACITY_ROWS])
def test_sweep_md_capacity_table_is_what_its_command_finds(row, tmp_path, capsys):
    """The row's capacity meets the SLO and the top of its bracket misses it (the search's
    answer is the bracket [lo, hi)), with the output throughput the table gives at lo."""
    strategy, capacity, bracket, tok_s = row
    lo, hi = (float(x) for x in re.fullmatch(r"\[(.+), (.+)\)", bracket).groups())
    assert float(capacity) == lo and hi / lo <= 1 + SEARCH_TOLERANCE  # the search's bracket
    base, slo = _point_options(_sweep_command())
    argv = [*base, *_run_options(strategy)]
    met, summary = _meets(argv, lo, slo, tmp_path, capsys)
    assert met, f"{strategy} misses the SLO at {lo} req/s"
    assert f"{summary['throughput']['output_tok_s']:.1f}" == tok_s, strategy
    assert not _meets(argv, hi, slo, tmp_path, capsys)[0], f"{strategy} meets it at {hi}"


def test_findings_capacity_table_rounds_the_sweep_md_one():
    full = {_run_options(row[0])[1] + "".join(_run_options(row[0])[3:]): row
            for row in CAPACITY_ROWS}
    rounded = _table(FINDINGS, "| strategy | capacity at")
    assert len(rounded) == len(full)
    for label, capacity, tok_s in rounded:
        strategy, _, reserve = label.partition("-")
        _, doc_capacity, _, doc_tok_s = full[strategy + reserve]
        assert capacity == f"{float(doc_capacity):.3f} req/s" and tok_s == doc_tok_s, label


@pytest.mark.slow  # the capacity search itself: about 40 simulations of 300 requests
def test_sweep_md_chat_capacities_are_what_the_search_finds(tmp_path, capsys):
    """The chat figures of docs/sweep.md are the capacities the documented search finds (the
    SLO is not monotonic in the rate near a capacity, so the figure is the search's own, not
    one re-derived by probing around it)."""
    m = re.search(r"gives `paged` ([\d.]+) and `prefix` ([\d.]+) requests/s \(4 turns a "
                  r"conversation: `--request-rate` counts requests on every workload\); "
                  r"`contiguous` with `--reserve max` misses the SLO already at the bottom of "
                  r"the range \(([\d.]+)\), while `pow2` \(([\d.]+)\) and `exact` "
                  r"\(([\d.]+)\) meet it", _prose(SWEEP_MD))
    assert m, "docs/sweep.md: the chat sentence changed shape"
    paged, prefix, bottom, pow2, exact = m.groups()
    argv = _sweep_command()
    argv = _set(argv, "--workload", "chat")
    at = argv.index("--request-rate")
    argv = [*argv[:at], *argv[at + 2:]]  # no rate grid: the search brackets on its own
    argv = _set(argv, "--name", "chat")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["sweep", *argv, "--out", str(tmp_path), "--jobs", "1"]) == 0
    rows = {row["label"]: row for row in
            _csv_rows(tmp_path / "chat" / "capacity.csv")}
    assert rows["contiguous-max"]["status"] == "below_range"
    assert float(rows["contiguous-max"]["hi"]) == float(bottom)
    found = {"paged": paged, "prefix": prefix, "contiguous-pow2": pow2,
             "contiguous-exact": exact}
    assert {label: f"{float(rows[label]['capacity']):.4g}" for label in found} == found


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    at = argv.index(flag)
    return [*argv[:at + 1], value, *argv[at + 2:]]


# The README's CPU findings: quoted from docs/findings.md --------------------------------

def test_readme_quotes_the_findings_memory_split():
    header = "| strategy | KV utilization | held / token | out tok/s"
    findings = {row[0]: row for row in _table(FINDINGS, header)}
    quoted = _table(README, header)
    assert [row[0] for row in quoted] == list(findings)
    for label, util, held, tok_s in quoted:
        assert findings[label][1:3] == [util, held], label
        assert findings[label][3].split(" [")[0] == tok_s, label


def test_readme_quotes_the_findings_batching_ratio():
    pattern = r"Continuous \+ paged delivers \*\*([\d.]+)×\*\* \[[^\]]+\] the output throughput"
    m = re.search(pattern, _prose(FINDINGS))
    assert m, "docs/findings.md: the continuous vs static sentence changed shape"
    assert f"over a paged cache delivers {m.group(1)}× the output throughput" in _prose(README)


# docs/findings.md and the README: the simulator at data-centre scale ---------------------

SIMULATE_13B = r"^kvbench simulate --model llama-2-13b [^\n]+--num-requests 1000$"


def test_readme_quotes_the_findings_simulate_command():
    (command,) = re.findall(SIMULATE_13B, _text(FINDINGS), re.M)
    assert re.findall(SIMULATE_13B, _text(README), re.M) == [command]


@pytest.mark.slow  # five runs of 1,000 requests: about 12 s on a quiet core
def test_findings_simulate_figures(tmp_path, capsys):
    command = re.search(SIMULATE_13B, _text(FINDINGS), re.M).group()
    argv = shlex.split(command)[2:]
    offline = {s["label"]: s for s in _simulate(argv, tmp_path, capsys)}
    for doc in (FINDINGS, README):
        rows = _table(doc, "| strategy | KV utilization | out tok/s (simulated)")
        assert [row[0] for row in rows] == list(offline), doc.name
        for label, util, tok_s, running in rows:
            s = offline[label]
            assert f"{s['memory']['utilization_mean']:.1%}" == util, (doc.name, label)
            assert f"{s['throughput']['output_tok_s']:.1f}" == tok_s, (doc.name, label)
            assert str(s["scheduler"]["batch_size_max"]) == running, (doc.name, label)

    prose = _prose(FINDINGS)
    m = re.search(r"At 1 request/s .*? contiguous-max saturates: it serves ([\d.]+) output "
                  r"tok/s with a median TTFT of ([\d,]+) s as its queue grows, while paged "
                  r"keeps up with the arrivals at ([\d.]+) tok/s and a (\d+) ms median TTFT",
                  prose)
    assert m, "docs/findings.md: the 1 request/s sentence changed shape"
    at_one = {s["strategy"]: s for s in _simulate([*argv, "--request-rate", "1"], tmp_path,
                                                  capsys)}
    contiguous, paged = at_one["contiguous"], at_one["paged"]
    assert f"{contiguous['throughput']['output_tok_s']:.1f}" == m.group(1)
    assert f"{contiguous['latency_ms']['ttft']['p50'] / 1e3:,.0f}" == m.group(2)
    assert f"{paged['throughput']['output_tok_s']:.1f}" == m.group(3)
    assert f"{paged['latency_ms']['ttft']['p50']:.0f}" == m.group(4)

    m = re.search(r"With `--max-model-len 2048` .*? contiguous-max holds ([\d.]+)% token state",
                  prose)
    assert m, "docs/findings.md: the --max-model-len 2048 sentence changed shape"
    only_contiguous = _set(argv, "--strategy", "contiguous")  # the sentence is about it alone
    (short,) = _simulate([*only_contiguous, "--max-model-len", "2048"], tmp_path, capsys)
    assert f"{short['memory']['utilization_mean']:.1%}" == m.group(1) + "%"


@pytest.mark.parametrize("doc", [FINDINGS, README], ids=lambda doc: doc.name)
def test_paging_ratio_is_the_capacity_tables_one(doc):
    m = re.search(r"Paging serves ([\d.]+)× the request rate of max-length reservation",
                  _prose(doc))
    assert m, f"{doc.name}: the paging ratio's sentence changed shape"
    capacity = {row[0].split(" (")[0]: float(row[1]) for row in CAPACITY_ROWS}
    ratio = capacity["paged"] / capacity["contiguous, reserve max"]
    assert f"{ratio:.1f}" == m.group(1)


# docs/findings.md: the fp8 cache's capacity (a count: the same on any machine) -----------------------

def _planned_capacities(command: str, tmp_path: Path, monkeypatch) -> dict[str, int]:
    """Each strategy's KV capacity in tokens under the `kvbench run` COMMAND: its engines are
    planned (and sized); nothing runs."""
    planned = []

    def run_session(plan, **_kwargs):
        planned.append(plan)
        return kvbench.session.session.SessionResult(plan.root, [], [])

    monkeypatch.setattr(kvbench.session.session, "run_session", run_session)
    argv = shlex.split(command)[1:]
    assert main([*argv, "--out", str(tmp_path), "--quiet"]) == 0
    (plan,) = planned
    return {label: engine_plan.strategy().capacity_tokens
            for label, (engine_plan, _) in zip(plan.labels, plan.prepared, strict=True)}


def test_findings_fp8_kv_capacities(tmp_path, monkeypatch):
    command = re.search(r"^kvbench run --strategy paged,fp8 [^\n]+$", _text(FINDINGS), re.M)
    capacity = _planned_capacities(command.group(), tmp_path, monkeypatch)
    rows = _table(FINDINGS, "| strategy | KV capacity |")
    assert [row[0].split(" (")[0] for row in rows] == list(capacity)
    for row in rows:
        assert row[1] == f"{capacity[row[0].split(' (')[0]]:,} tokens", row[0]
    assert "Exactly twice the tokens" in _prose(FINDINGS)
    assert capacity["fp8"] == 2 * capacity["paged"]


# docs/findings.md: the mixture of experts' comparison (capacities: the same on any machine) ----------

def test_findings_tiny_moe_kv_capacities(tmp_path, monkeypatch):
    """The tiny-moe table's capacities are its command's, and tiny's (the same KV cache)."""
    command = re.search(r"^kvbench run --model tiny-moe [^\n]+$", _text(FINDINGS), re.M).group()
    capacity = _planned_capacities(command, tmp_path / "moe", monkeypatch)
    rows = _table(FINDINGS, "| strategy (tiny-moe) |")
    assert [row[0] for row in rows] == list(capacity)
    for row in rows:
        assert row[1] == f"{capacity[row[0]]:,} tokens", row[0]
    dense = command.replace("--model tiny-moe", "--model tiny")
    assert _planned_capacities(dense, tmp_path / "dense", monkeypatch) == capacity


# docs/workloads.md -----------------------------------------------------------------------

def test_workloads_md_mooncake_sample_prefix_hit_rate(tmp_path, capsys):
    text = _text(ROOT / "docs" / "workloads.md")
    section = text[text.index("### Mooncake"):]
    sample = re.search(r"^```\n(.*?)^```", section, re.S | re.M).group(1)
    trace = tmp_path / "mooncake_sample.jsonl"
    trace.write_text(sample)
    m = re.search(r"Replaying this sample with `--strategy paged,prefix` gives the prefix "
                  r"strategy a ([\d.]+)% prefix hit rate", _prose(ROOT / "docs" / "workloads.md"))
    assert m, "docs/workloads.md: the Mooncake sample's sentence changed shape"
    runs = {s["strategy"]: s for s in _simulate(["--workload", str(trace), "--strategy",
                                                 "paged,prefix"], tmp_path / "runs", capsys)}
    assert f"{runs['prefix']['scheduler']['prefix_hit_rate']:.1%}" == m.group(1) + "%"


# Help texts that describe what the docs describe ------------------------------------------

def test_simulate_help_describes_the_documented_step_time_model():
    from kvbench.cli.app import cli

    result = CliRunner().invoke(cli, ["simulate", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "docs/simulator.md" in text and "fitted to published GPU profiles" in text
    listing = CliRunner().invoke(cli, ["--help"]).output
    for stale in ("roofline", "unvalidated"):
        assert stale not in text and stale not in listing


# docs/findings.md: hybrid vs paged on a Gemma-3-shaped model (simulated) -----------------------------

@pytest.mark.slow  # six runs of 200 long requests: about 20 s on a quiet core
def test_findings_hybrid_figures(tmp_path, capsys):
    commands = re.findall(r"^kvbench simulate --model gemma-3-27b [^\n]+$",
                          _text(FINDINGS), re.M)
    assert len(commands) == 3, "docs/findings.md: the hybrid commands changed shape"
    rows = _table(FINDINGS, "| workload | strategy | KV held / token | capacity")
    runs = {}
    for command, workload in zip(commands[:2], ("summarize (8k in)", "4 shared 8k prefixes"),
                                 strict=True):
        argv = shlex.split(command)[2:]
        runs[workload] = {s["label"]: s for s in _simulate(argv, tmp_path, capsys)}
    workload = None
    for cells in rows:
        workload = cells[0] or workload
        label = cells[1].split(" ")[0]
        s = runs[workload][label]
        mem, sch = s["memory"], s["scheduler"]
        assert f"{mem['kv_held_bytes_per_token'] / 1024:.1f} KiB" == cells[2], (workload, label)
        assert f"{mem['kv_capacity_tokens']:,} tokens" == cells[3], (workload, label)
        assert str(sch["preemptions"]) == cells[4], (workload, label)
        assert f"{sch['batch_size_mean']:.1f}" == cells[5], (workload, label)
        assert f"{s['throughput']['output_tok_s']:.1f}" == cells[6], (workload, label)
        assert f"{s['latency_ms']['ttft']['p50'] / 1e3:.1f} s" == cells[7], (workload, label)


@pytest.mark.slow  # two runs of 32 prompts of 16k tokens: about 4 s on a quiet core
def test_findings_gemma3_16k_hybrid_capacity(tmp_path, capsys):
    """The Gemma-3 16k-token table (under the commands' defaults) and its capacity ratio."""
    command = re.findall(r"^kvbench simulate --model gemma-3-27b [^\n]+$", _text(FINDINGS),
                         re.M)[2]
    assert "prompt_len=16384" in command and "--defaults" not in command
    runs = {s["label"]: s for s in _simulate(shlex.split(command)[2:], tmp_path, capsys)}
    rows = _table(FINDINGS, "| strategy | KV capacity | KV held / token | max running")
    assert [row[0] for row in rows] == list(runs)
    for label, capacity, held, running, tok_s, ttft in rows:
        s = runs[label]
        assert f"{s['memory']['kv_capacity_tokens']:,} tokens" == capacity, label
        assert f"{s['memory']['kv_held_bytes_per_token'] / 1024:.1f} KiB" == held, label
        assert str(s["scheduler"]["batch_size_max"]) == running, label
        assert f"{s['throughput']['output_tok_s']:.1f}" == tok_s, label
        assert f"{s['latency_ms']['ttft']['p50'] / 1e3:.1f} s" == ttft, label
    m = re.search(r"`hybrid` holds ([\d.]+)x `paged`'s tokens in the same", _prose(FINDINGS))
    assert m, "docs/findings.md: the 16k capacity sentence changed shape"
    capacity = {s["strategy"]: s["memory"]["kv_capacity_tokens"] for s in runs.values()}
    assert f"{capacity['hybrid'] / capacity['paged']:.1f}" == m.group(1)


# docs/findings.md: a state-space hybrid's prefix cache (simulated) ---------------------------

STATE_SETTINGS = {  # the table's rows: what each adds to the commands
    "vLLM's defaults (`align`)": [],
    "`--mamba-cache-mode all`": ["--mamba-cache-mode", "all"],
    "`--mamba-cache-mode none`": ["--mamba-cache-mode", "none"],
    "`--block-size 1024` (`align`)": ["--block-size", "1024"],
}


@pytest.mark.slow  # eight runs of 400 requests and four of 600 long ones
def test_findings_state_model_prefix_cache_figures(tmp_path, capsys):
    commands = re.findall(r"^kvbench simulate --model qwen3-next-80b-a3b [^\n]+$",
                          _text(FINDINGS), re.M)
    assert len(commands) == 3, "docs/findings.md: the state-space hybrid commands changed shape"
    rows = _table(FINDINGS, "| setting | block | chat: hit (of ceiling)")
    assert [row[0] for row in rows] == list(STATE_SETTINGS)

    def hit(s):
        sch = s["scheduler"]
        return f"{sch['prefix_hit_rate']:.1%} of {sch['prefix_hit_ceiling']:.1%}"

    for row in rows:
        chat, shared, long = (
            _simulate(shlex.split(command)[2:] + STATE_SETTINGS[row[0]], tmp_path, capsys)[0]
            for command in commands)
        assert f"{chat['block_size']:,}" == row[1], row[0]
        assert hit(chat) == row[2] and f"{chat['throughput']['output_tok_s']:,.1f}" == row[3]
        assert hit(shared) == row[4] and f"{shared['throughput']['output_tok_s']:,.1f}" == row[5]
        sch = long["scheduler"]
        assert str(sch["batch_size_max"]) == row[6] and str(sch["preemptions"]) == row[7]
        assert f"{long['throughput']['output_tok_s']:,.1f}" == row[8], row[0]
