"""A host tier's copies do not reach across the warm-up: the warm-up's stores are waited for
before the run proper starts on a clock back at zero, so its first steps wait for none of
them. (The link's queues once kept the warm-up's end times: a run's first store then waited
until the warm-up's length on the new clock, seconds at every tier size.)"""

from __future__ import annotations

import csv

import pytest

from kvbench.cli import main

RUN = ["--defaults", "vllm", "--model", "llama-3-8b", "--kv-memory", "4GiB",
       "--workload", "uniform", "--workload-param", "prompt_len=512",
       "--workload-param", "output_len=256", "--num-requests", "3", "--request-rate", "1",
       "--strategy", "prefix", "--warmup", "1", "--quiet"]


def _requests(tmp_path, name: str, args: list[str]) -> list[dict[str, str]]:
    out = tmp_path / name
    assert main(["simulate", *args, "--out", str(out)]) == 0
    (folder,) = out.iterdir()
    with open(folder / "requests.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("gpu", ["gh200", "a100-40gb"])
def test_the_first_requests_wait_for_no_warm_up_copy(tmp_path, gpu):
    # Requests a second apart: each runs alone, its 32 prompt blocks' store hidden behind its
    # prefill on either link, so the tier changes no request's TTFT or end.
    without = _requests(tmp_path, "none", [*RUN, "--gpu", gpu])
    tier = _requests(tmp_path, "tier", [*RUN, "--gpu", gpu, "--kv-offload", "2GiB"])
    assert len(tier) == len(without) == 3
    for a, b in zip(tier, without, strict=True):
        assert float(a["ttft_ms"]) == pytest.approx(float(b["ttft_ms"]), rel=0.05)
        assert float(a["e2e_ms"]) == pytest.approx(float(b["e2e_ms"]), rel=0.05)
