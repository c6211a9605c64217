"""Shared fixtures: 10,000-request builds of each workload, made once per session."""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.workloads import load_workload

NUM_SAMPLES = 10_000
VOCAB = 32_000


@pytest.fixture(scope="session")
def built():
    """`built(name)`: the 10k-request build of workload `name` (seed 0), as length arrays."""
    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def get(name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in cache:
            requests = load_workload(name, NUM_SAMPLES, seed=0, vocab_size=VOCAB).requests
            cache[name] = (
                np.array([r.prompt_len for r in requests]),
                np.array([r.output_len for r in requests]),
            )
        return cache[name]

    return get
