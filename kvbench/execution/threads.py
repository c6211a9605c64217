"""CPU thread settings that do not collapse under contention, and their record for config.json.

torch's CPU kernels run on an OpenMP pool whose idle threads, by default (GNU OpenMP's ACTIVE
wait policy), spin between parallel regions. With `--cpu-threads 2` and another process busy
on the second core, a spinning thread steals the time slice its peer needs, and a run loses
most of its throughput; with `OMP_WAIT_POLICY=PASSIVE` (idle threads sleep) it keeps nearly
all of it. With one thread there is no pool and the policy changes nothing.

The OpenMP runtime reads OMP_WAIT_POLICY once, when torch loads it (`import torch`), so the
default has to be in the environment before that: `kvbench/__init__.py` calls
`default_passive_wait_policy()` before anything imports torch. A value the user set is kept.
When torch was imported first (a library user who imported torch before kvbench) the policy
can no longer change; `thread_settings()` records that it may not be in effect.

numpy's bundled OpenBLAS starts a pool of one thread per core when numpy is imported, and the
pool's start is a large share of numpy's import. A simulation's only BLAS work is a few dot
products per 65,536 steps (the KV groups' means), which a pool does not speed up, so
`kvbench simulate` sets OPENBLAS_NUM_THREADS=1 before anything imports numpy
(`default_one_blas_thread`), unless it is set or numpy is loaded already (OpenBLAS reads it
once, at load; the process and its children keep the setting).

pyarrow (which writes the results files) loads a jemalloc that starts a background thread to
return freed memory to the system; a simulation's process is short and its few large writes
need none, so `kvbench simulate` turns it off before pyarrow loads (`default_no_arrow_thread`,
the same way: a setting already there is kept).

This module must not import torch at module level. A run that never loaded torch
(`kvbench simulate`) records its torch thread counts as None: no torch pool ran.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Any

WAIT_POLICY_VAR = "OMP_WAIT_POLICY"
PASSIVE = "PASSIVE"
BLAS_THREADS_VAR = "OPENBLAS_NUM_THREADS"
ARROW_JEMALLOC_VAR = "JE_ARROW_MALLOC_CONF"  # (pyarrow's jemalloc reads its MALLOC_CONF here)

# What kvbench found when it was imported: whether it set the policy, and whether torch (and
# so its OpenMP runtime) was already loaded at that moment.
_state: dict[str, bool] = {
    "set_by_kvbench": False,
    "set_by_user": False,
    "torch_loaded_before": False,
}


def default_passive_wait_policy(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE unless the user chose a policy; True when it was set."""
    env = os.environ if environ is None else environ
    if environ is None:
        _state["torch_loaded_before"] = "torch" in sys.modules
    if WAIT_POLICY_VAR in env:
        if environ is None:
            _state["set_by_user"] = True
        return False
    env[WAIT_POLICY_VAR] = PASSIVE
    if environ is None:
        _state["set_by_kvbench"] = True
    return True


def default_one_blas_thread(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set OPENBLAS_NUM_THREADS=1 unless it is set, or numpy (and so its OpenBLAS, which reads
    it once) is loaded already; True when it was set. For a process without BLAS-heavy work."""
    env = os.environ if environ is None else environ
    if BLAS_THREADS_VAR in env or (environ is None and "numpy" in sys.modules):
        return False
    env[BLAS_THREADS_VAR] = "1"
    return True


def default_no_arrow_thread(environ: MutableMapping[str, str] | None = None) -> bool:
    """Turn off the background thread of pyarrow's jemalloc unless its configuration is set,
    or pyarrow is loaded already; True when it was set."""
    env = os.environ if environ is None else environ
    if ARROW_JEMALLOC_VAR in env or (environ is None and "pyarrow" in sys.modules):
        return False
    env[ARROW_JEMALLOC_VAR] = "background_thread:false"
    return True


def thread_settings() -> dict[str, Any]:
    """The thread settings a run measured under, for its config.json.

    torch's thread counts are None when torch was never loaded: asking would load it.
    """
    torch = sys.modules.get("torch")
    policy = os.environ.get(WAIT_POLICY_VAR)
    return {
        "torch_num_threads": torch.get_num_threads() if torch else None,
        "torch_num_interop_threads": torch.get_num_interop_threads() if torch else None,
        "omp_wait_policy": policy,
        "omp_wait_policy_source": (
            "kvbench default" if _state["set_by_kvbench"] else "environment" if policy else None
        ),
        # False when torch was loaded before kvbench could set its default: the runtime then
        # kept whatever the environment held at that moment.
        "omp_wait_policy_in_effect": policy is not None
        and (_state["set_by_user"] or not _state["torch_loaded_before"]),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "openblas_num_threads": os.environ.get(BLAS_THREADS_VAR),
        "cpu_count": os.cpu_count(),
    }
