"""`kvbench simulate` and `kvbench estimate` never import torch (a fast start; docs/design.md).

Each runs in a fresh interpreter: this test process has torch loaded already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch

PROBE = """
import json, sys
from kvbench.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "torch_loaded": "torch" in sys.modules}))
"""


def _kvbench(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          check=True)
    return json.loads(proc.stdout.splitlines()[-1])


def test_simulate_runs_without_torch_and_records_the_installed_torch(tmp_path):
    result = _kvbench("simulate", "--model", "llama-2-7b", "--gpu", "a100-40gb",
                      "--workload", "sharegpt", "--num-requests", "20", "--request-rate", "4",
                      "--strategy", "fp8", "--out", str(tmp_path), "--quiet")
    assert result == {"code": 0, "torch_loaded": False}
    (folder,) = tmp_path.iterdir()
    config = json.loads((folder / "config.json").read_text())
    assert config["kv_cache_dtype"] == "float8_e4m3fn"
    # read from the installed torch without importing it: the version this process loaded
    assert config["versions"]["torch"] == torch.__version__
    assert config["versions"]["cuda"] == torch.version.cuda
    # no torch thread pool existed, so no thread count is claimed for it
    assert config["threads"]["torch_num_threads"] is None
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["completed"] == 20 and summary["memory"]["peak_gpu_bytes"] is None


def test_estimate_with_steps_runs_without_torch():
    result = _kvbench("estimate", "--model", "llama-2-13b", "--gpu", "a100-40gb",
                      "--step", "decode:8x1024", "--step", "prefill:512", "--json")
    assert result == {"code": 0, "torch_loaded": False}
