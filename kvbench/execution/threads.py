"""CPU thread settings that do not collapse under contention, and their record for config.json.

torch's CPU kernels run on an OpenMP pool whose idle threads spin by default (GNU OpenMP's
ACTIVE wait policy): with `--cpu-threads 2` and another process busy on the second core, a
spinning thread steals its peer's time slice and a run loses most of its throughput.
`OMP_WAIT_POLICY=PASSIVE` (idle threads sleep) keeps nearly all of it. The runtime reads the
variable once, when torch loads, so `kvbench/__init__.py` calls
`default_passive_wait_policy()` before anything imports torch (a value the user set is kept;
`thread_settings()` records when torch was loaded first and the policy may not apply).

`kvbench simulate` needs no BLAS pool (a few dot products per 65,536 steps) and no
background thread of pyarrow's jemalloc (a short process, a few large writes), so it sets
OPENBLAS_NUM_THREADS=1 and turns that thread off before numpy and pyarrow load
(`default_one_blas_thread`, `default_no_arrow_thread`; a setting already there is kept).

This module must not import torch: a run that never loaded it (`kvbench simulate`) records
its torch thread counts as None.
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


def _set_unless_loaded(var: str, value: str, reader: str,
                       environ: MutableMapping[str, str] | None) -> bool:
    """Set `var` unless it is set, or `reader` (the module that reads it once, at load) is
    loaded already; True when it was set."""
    env = os.environ if environ is None else environ
    if var in env or (environ is None and reader in sys.modules):
        return False
    env[var] = value
    return True


def default_one_blas_thread(environ: MutableMapping[str, str] | None = None) -> bool:
    """OPENBLAS_NUM_THREADS=1 (numpy's OpenBLAS), for a process without BLAS-heavy work."""
    return _set_unless_loaded(BLAS_THREADS_VAR, "1", "numpy", environ)


def default_no_arrow_thread(environ: MutableMapping[str, str] | None = None) -> bool:
    """Turn off the background thread of pyarrow's jemalloc."""
    return _set_unless_loaded(ARROW_JEMALLOC_VAR, "background_thread:false", "pyarrow",
                              environ)


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
