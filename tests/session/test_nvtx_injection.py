"""A real NVTX injection library, attached the way Nsight attaches (NVTX_INJECTION64_PATH),
sees the `kvbench` domain, one range name per phase, balanced push/pop and payloads that
are token counts, in a run and when a counter comes before any range.

The library (`data/nvtx_log.c`) is compiled here; the test is skipped where there is no C
compiler or no NVTX 3 headers (they come with the CUDA toolkit). With
`KVBENCH_TEST_NVTX_PATH` set to a folder holding the lowest supported `nvtx` (`.ci/run`
installs it there), the runs import that one and the test checks it is the lowest."""

from __future__ import annotations

import csv
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kvbench.tracing import NVTX_MIN_VERSION

SOURCE = Path(__file__).parent / "data" / "nvtx_log.c"
LOWEST_NVTX = os.environ.get("KVBENCH_TEST_NVTX_PATH")
# Ranges whose payload is the tokens they work on; every other range carries none.
TOKEN_RANGES = {"prepare", "prefill", "decode", "write_kv", "prefill_attention",
                "decode_attention"}


def _nvtx_include() -> str | None:
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *glob.glob("/usr/local/cuda-*")]
    for root in roots:
        if root and (Path(root) / "include" / "nvtx3" / "nvToolsExt.h").is_file():
            return str(Path(root) / "include")
    return None


@pytest.fixture(scope="module")
def injection(tmp_path_factory):
    include, cc = _nvtx_include(), shutil.which("cc") or shutil.which("gcc")
    if include is None or cc is None:
        pytest.skip("needs a C compiler and the NVTX 3 headers")
    lib = tmp_path_factory.mktemp("nvtx") / "libnvtxlog.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(lib), str(SOURCE)],
                   check=True)
    return lib


def _env(injection: Path, log: Path) -> dict[str, str]:
    env = {**os.environ, "NVTX_INJECTION64_PATH": str(injection), "NVTX_LOG_FILE": str(log)}
    env.pop("KVBENCH_NVTX", None)
    if LOWEST_NVTX:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(LOWEST_NVTX).resolve()), env.get("PYTHONPATH")) if p)
    return env


def _python(code: str, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True,
                          capture_output=True, text=True)
    return done.stdout + done.stderr


def _rows(log: Path) -> list[list[str]]:
    (written,) = log.parent.glob(f"{log.name}.*")  # one per process: kvbench starts no other
    return [line.split("\t") for line in written.read_text().splitlines()]


def _ranges(rows: list[list[str]]) -> list[tuple[str, str]]:
    """(name, payload) of every push, after checking pushes and pops balance per domain."""
    depth: Counter[str] = Counter()
    pushed = []
    for row in rows:
        if row[0] == "push":
            depth[row[1]] += 1
            pushed.append((row[1], row[2], row[4]))
        elif row[0] == "pop":
            depth[row[1]] -= 1
            assert depth[row[1]] >= 0, f"pop without push in {row[1]}"
    assert not +depth, f"unclosed ranges: {dict(depth)}"
    assert {domain for domain, _, _ in pushed} == {"kvbench"}
    return [(name, payload) for _, name, payload in pushed]


def test_the_nvtx_the_runs_import(injection, tmp_path):
    version = _python("import importlib.metadata as m; print(m.version('nvtx'))",
                      env=_env(injection, tmp_path / "unused")).strip()
    if LOWEST_NVTX:
        assert version == ".".join(map(str, NVTX_MIN_VERSION))
    else:
        assert version == importlib.metadata.version("nvtx")


@pytest.mark.slow  # a real run in a fresh process with every range logged: over 20 s when busy
def test_nsight_style_injection_sees_static_balanced_ranges_with_token_payloads(
        injection, tmp_path):
    log = tmp_path / "nvtx.tsv"
    out = tmp_path / "out"
    code = "import sys; from kvbench.cli import main; sys.exit(main(sys.argv[1:]))"
    stderr = _python(code, "run", "--strategy", "paged", "--workload", "chat",
                     "--num-requests", "16", "--warmup", "0", "--kv-memory", "8MiB",
                     "--quiet", "--out", str(out), env=_env(injection, log))
    assert "NVTX ranges off" not in stderr
    rows = _rows(log)
    assert [row[1] for row in rows if row[0] == "domain"] == ["kvbench"]
    ranges = _ranges(rows)
    names = Counter(name for name, _ in ranges)
    assert 0 < len(names) <= 30, names
    assert all(re.fullmatch(r"[a-z_]+", n) for n in names), names
    assert names["warmup"] == 1 and names["replay"] == 1 and names["step"] > 16
    categories = {row[3] for row in rows if row[0] == "category" and row[1] == "kvbench"}
    assert categories == {"runner", "engine", "model", "kernel"}
    for name, payload in ranges:
        if name in TOKEN_RANGES:
            assert payload.isdigit() and int(payload) >= 1, (name, payload)
        else:
            assert payload == "-", (name, payload)
    # one meaning: a forward's payload is its step's batched tokens, as steps.csv has them
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    with (folder / "steps.csv").open() as f:
        step_tokens = sorted(int(row["num_batched_tokens"]) for row in csv.DictReader(f))
    forwards = sorted(int(p) for name, p in ranges if name in {"prefill", "decode"})
    assert forwards == step_tokens


def test_a_counter_before_any_range(injection, tmp_path):
    log = tmp_path / "nvtx.tsv"
    code = ("from kvbench import tracing\n"
            "tracing.trace_counter('kv_bytes', 0.0, {'token': 1, 'held': 2.5})\n"
            "with tracing.trace_range('step'):\n"
            "    tracing.trace_counter('batch', 0.0, {'running': 1})\n"
            "print(tracing.nvtx_active())\n")
    assert _python(code, env=_env(injection, log)).strip() == "True"
    assert _ranges(_rows(log)) == [("step", "-")]
