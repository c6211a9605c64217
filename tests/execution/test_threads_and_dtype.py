"""Thread settings recorded and defaulted to a passive OpenMP wait; `--dtype auto` resolved."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kvbench.errors import KvbenchInputError
from kvbench.execution.device import resolve_dtype
from kvbench.execution.threads import (
    default_no_arrow_thread,
    default_one_blas_thread,
    default_passive_wait_policy,
    thread_settings,
)


def test_passive_wait_policy_is_the_default():
    env = {}
    assert default_passive_wait_policy(env) is True
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_users_wait_policy_is_kept():
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert default_passive_wait_policy(env) is False
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_one_blas_thread_is_the_default_and_a_users_count_is_kept():
    env: dict[str, str] = {}
    assert default_one_blas_thread(env) is True
    assert env == {"OPENBLAS_NUM_THREADS": "1"}
    env = {"OPENBLAS_NUM_THREADS": "4"}
    assert default_one_blas_thread(env) is False
    assert env == {"OPENBLAS_NUM_THREADS": "4"}


def test_no_arrow_allocator_thread_is_the_default_and_a_users_setting_is_kept():
    env: dict[str, str] = {}
    assert default_no_arrow_thread(env) is True
    assert env == {"JE_ARROW_MALLOC_CONF": "background_thread:false"}
    env = {"JE_ARROW_MALLOC_CONF": "narenas:2"}
    assert default_no_arrow_thread(env) is False
    assert env == {"JE_ARROW_MALLOC_CONF": "narenas:2"}


def test_no_blas_thread_setting_once_numpy_is_loaded(monkeypatch):
    # (OpenBLAS read the environment when numpy loaded: setting it now would be recorded in
    # config.json without being in effect)
    import numpy  # noqa: F401

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert default_one_blas_thread() is False
    assert "OPENBLAS_NUM_THREADS" not in os.environ


_SIMULATE_THEN_COUNT_THREADS = (
    "import json, os, pathlib, sys; from kvbench.cli import main; "
    "rc = main(['simulate', '--model', 'llama-2-7b', '--gpu', 'a100-40gb', '--workload', "
    "'uniform', '--num-requests', '4', '--quiet', '--out', sys.argv[1]]); "
    "(config,) = pathlib.Path(sys.argv[1]).glob('*/config.json'); "
    "print(json.dumps([rc, len(os.listdir('/proc/self/task')), "
    "json.loads(config.read_text())['threads']['openblas_num_threads']]))"
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
@pytest.mark.parametrize(("given", "recorded", "threads"), [(None, "1", 1), ("2", "2", 2)])
def test_simulate_imports_numpy_with_one_blas_thread(tmp_path, given, recorded, threads):
    # numpy's OpenBLAS pool (one thread per core) costs CPU at import and does nothing in a
    # simulation; a count the user gave is kept, and config.json records either.
    cores = len(os.sched_getaffinity(0))
    if threads > cores:
        pytest.skip(f"OpenBLAS starts at most a thread per usable core ({cores} here)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run([sys.executable, "-c", _SIMULATE_THEN_COUNT_THREADS, str(tmp_path)],
                         env=env, capture_output=True, text=True, check=True).stdout
    rc, num_threads, openblas = json.loads(out.splitlines()[-1])
    assert rc == 0 and openblas == recorded
    assert num_threads == threads


def _settings_in_fresh_python(code: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", code + "; import json; "
         "from kvbench.execution.threads import thread_settings; "
         "print(json.dumps(thread_settings()))"],
        env={**clean, **env}, capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_importing_kvbench_sets_passive_before_torch_loads():
    settings = _settings_in_fresh_python("import kvbench")
    assert settings["omp_wait_policy"] == "PASSIVE"
    assert settings["omp_wait_policy_source"] == "kvbench default"
    assert settings["omp_wait_policy_in_effect"] is True


def test_torch_imported_first_is_recorded_as_not_in_effect():
    settings = _settings_in_fresh_python("import torch, kvbench")
    assert settings["omp_wait_policy"] == "PASSIVE"
    assert settings["omp_wait_policy_in_effect"] is False


def test_user_policy_recorded_as_theirs():
    settings = _settings_in_fresh_python("import torch, kvbench", OMP_WAIT_POLICY="ACTIVE")
    assert settings["omp_wait_policy"] == "ACTIVE"
    assert settings["omp_wait_policy_source"] == "environment"
    assert settings["omp_wait_policy_in_effect"] is True


def test_thread_settings_name_torch_threads():
    settings = thread_settings()
    assert settings["torch_num_threads"] == torch.get_num_threads()
    json.dumps(settings)  # goes into config.json as it is


def test_auto_dtype_is_float32_on_the_cpu():
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype("auto", torch.device("cpu")) == "float32"


def test_auto_dtype_is_bfloat16_on_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda:0") == "float16"


@pytest.mark.parametrize(("name", "canonical"),
                         [("bf16", "bfloat16"), ("float32", "float32"), ("half", "float16")])
def test_explicit_dtype_is_kept(name, canonical):
    assert resolve_dtype(name, "cuda") == canonical


def test_unknown_dtype_is_refused():
    with pytest.raises(KvbenchInputError, match="--dtype"):
        resolve_dtype("int4", "cpu")
