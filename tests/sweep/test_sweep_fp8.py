"""An fp8 point of a sweep carries the same `accuracy` section as `kvbench run --strategy fp8`."""

from __future__ import annotations

import json

from kvbench.cli import main

SMALL = ["--workload", "uniform", "--workload-param", "prompt_len=16",
         "--workload-param", "output_len=4", "--num-requests", "3", "--warmup", "0",
         "--kv-memory", "4MiB", "--quiet"]


def test_fp8_sweep_point_has_the_accuracy_section_of_kvbench_run(tmp_path, capsys):
    assert main(["sweep", "--strategy", "paged,fp8", "--out", str(tmp_path),
                 "--name", "s", *SMALL]) == 0
    fp8 = json.loads((tmp_path / "s" / "strategy=fp8" / "kvbench_summary.json").read_text())
    paged = json.loads((tmp_path / "s" / "strategy=paged" / "kvbench_summary.json").read_text())
    assert "accuracy" not in paged
    accuracy = fp8["accuracy"]
    assert accuracy["kv_cache_dtype"] == "fp8_e4m3" and accuracy["reference_strategy"] == "paged"
    assert accuracy["num_requests_compared"] == 3

    assert main(["run", "--strategy", "fp8", "--out", str(tmp_path / "run"), *SMALL]) == 0
    (run_folder,) = (tmp_path / "run").iterdir()
    by_run = json.loads((run_folder / "kvbench_summary.json").read_text())["accuracy"]
    # Same requests, same budget, same seeds on the CPU: the same comparison.
    assert accuracy == by_run
