"""A real NVTX injection library, attached the way Nsight attaches (NVTX_INJECTION64_PATH),
sees one range name per phase and balanced push/pop in a 16-request run.

The library (`data/nvtx_log.c`) is compiled here; the test is skipped where there is no C
compiler or no NVTX 3 headers (they come with the CUDA toolkit)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

SOURCE = Path(__file__).parent / "data" / "nvtx_log.c"


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


@pytest.mark.slow  # a real run in a fresh process with every range logged: over 20 s when busy
def test_nsight_style_injection_sees_static_balanced_ranges(injection, tmp_path):
    log = tmp_path / "nvtx.tsv"
    env = {**os.environ, "NVTX_INJECTION64_PATH": str(injection), "NVTX_LOG_FILE": str(log)}
    env.pop("KVBENCH_NVTX", None)
    code = ("import sys; from kvbench.cli import main; sys.exit(main(sys.argv[1:]))")
    subprocess.run([sys.executable, "-c", code, "run", "--strategy", "paged", "--workload",
                    "chat", "--num-requests", "16", "--warmup", "1", "--kv-memory", "8MiB",
                    "--quiet", "--out", str(tmp_path / "out")], env=env, check=True)
    (written,) = tmp_path.glob("nvtx.tsv.*")  # one per process: kvbench starts no other
    rows = [line.split("\t") for line in written.read_text().splitlines()]
    depth, names = 0, Counter()
    for row in rows:
        if row[0] == "push" and row[1] == "kvbench":
            depth += 1
            names[row[2]] += 1
        elif row[0] == "pop" and row[1] == "kvbench":
            depth -= 1
            assert depth >= 0, "pop without push"
    assert depth == 0
    assert 0 < len(names) <= 30, names
    assert names["warmup"] == 1 and names["replay"] == 1 and names["step"] > 16
    categories = {row[2] for row in rows if row[0] == "category"}
    assert categories == {"runner", "engine", "model", "kernel"}
