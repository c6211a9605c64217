"""`import kernels` from the repository root gets the installed distribution, not this folder.

The root's `kernels/` is `kvbench.kernels`'s source. pytest (and `python -m`, and a notebook
started in a clone) puts the root on sys.path, where the folder would shadow Hugging Face's
`kernels`, which transformers 5.2x imports with every model.
"""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=300
    )


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _installed("kernels"), reason="no distribution named kernels installed")
def test_bare_name_loads_the_installed_distribution() -> None:
    done = _python("-c", "import kernels; print(kernels.__file__)")
    assert done.returncode == 0, done.stderr
    loaded = Path(done.stdout.strip()).resolve()
    assert not loaded.is_relative_to(REPOSITORY_ROOT / "kernels")
    expected = importlib.metadata.distribution("kernels").locate_file("kernels/__init__.py")
    assert loaded == Path(expected).resolve()


@pytest.mark.skipif(not _installed("transformers"), reason="transformers not installed")
def test_transformers_models_import_from_the_repository_root() -> None:
    done = _python("-c", "import transformers; print(transformers.LlamaForCausalLM.__name__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LlamaForCausalLM"


def test_bare_name_without_an_installed_distribution_is_not_found() -> None:
    # -S: no site-packages, so no installed `kernels`; the folder must not stand in for one.
    done = _python("-S", "-c", "import kernels")
    assert done.returncode != 0
    assert "ModuleNotFoundError: No module named 'kernels'" in done.stderr
