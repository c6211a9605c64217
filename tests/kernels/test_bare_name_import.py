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


def test_without_an_installed_package_the_folder_imports_as_before() -> None:
    # -S: no site-packages, so no installed `kernels`: the folder is what the import found, as
    # transformers before 5.25 expects when it probes the name (no version: not available).
    done = _python("-S", "-c", "import kernels; print(kernels.__file__)")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == REPOSITORY_ROOT / "kernels" / "__init__.py"


def test_a_package_found_by_another_finder_is_loaded(tmp_path) -> None:
    # As an editable install's finder, appended after the path finder: asked too.
    (tmp_path / "kernels.py").write_text("WHERE = 'elsewhere'\n")
    code = (
        "import importlib.util, sys\n"
        "class Finder:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'kernels':\n"
        f"            return importlib.util.spec_from_file_location(name, {str(tmp_path / 'kernels.py')!r})\n"
        "sys.meta_path.append(Finder())\n"
        "import kernels\n"
        "print(kernels.WHERE, sys.modules['kernels'] is kernels)\n"
    )
    done = _python("-S", "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["elsewhere", "True"]
