"""config.json records the thread settings a run measured under."""

from __future__ import annotations

import json

from kvbench.cli import main


def test_config_json_records_the_thread_settings(tmp_path):
    assert main(["run", "--num-requests", "2", "--warmup", "0", "--workload", "uniform",
                 "--workload-param", "prompt_len=8", "--workload-param", "output_len=2",
                 "--cpu-threads", "1", "--out", str(tmp_path), "--quiet"]) == 0
    (folder,) = tmp_path.iterdir()
    threads = json.loads((folder / "config.json").read_text())["threads"]
    assert threads["torch_num_threads"] == 1
    assert {"omp_wait_policy", "omp_wait_policy_in_effect", "cpu_count"} <= set(threads)
