#!/usr/bin/env bash
# A virtual environment in which vLLM's v1 scheduler and kvbench import side by side, for the
# differential test tests/vllm_oracle (docs/vllm_oracle.md). vLLM is installed without its
# dependencies (most are GPU builds the scheduler never loads) beside the CPU build of torch,
# plus the pure-Python packages its scheduler's imports ask for, each at the version range
# vLLM itself declares. Never a CUDA torch: every pip call carries a constraints file pinning
# torch to its CPU build.
#
#   scripts/vllm_oracle_setup.sh            # creates or completes $VLLM_ORACLE_VENV
#   $VLLM_ORACLE_VENV/bin/python -m pytest -q tests/vllm_oracle -p no:cacheprovider
#
# Idempotent: a second run installs nothing new. Where the CPU torch is not on the package
# index pip sees, point pip at it first (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
set -euo pipefail

VLLM_VERSION="${VLLM_VERSION:-0.34.0}"   # the version docs/vllm_oracle.md tables
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PYTHON="${PYTHON:-python3.11}"
VENV="${VLLM_ORACLE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvbench/vllm-oracle-venv}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start=$SECONDS

# Packages vLLM's scheduler, config and request modules import (found by importing them in a
# bare environment until nothing was missing); their versions come from vLLM's metadata.
VLLM_IMPORTS=(packaging pydantic regex numpy psutil pyzmq urllib3 transformers aiohttp requests
              pillow pybase64 cachetools cbor2 msgspec cloudpickle uvloop py-cpuinfo
              prometheus_client llguidance xgrammar apache-tvm-ffi einops)
# Installed without their dependencies: xgrammar's pull Triton (a gigabyte the scheduler
# never loads); the rest of what it needs is in the list above.
NO_DEPS=(xgrammar)
# kvbench's simulator path and the test runner (pytest-benchmark: pyproject's addopts).
KVBENCH_DEPS=(numpy pandas pyarrow plotly click tqdm tabulate scipy safetensors pytest
              pytest-benchmark)

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
constraints="$VENV/torch-cpu-constraints.txt"
echo "torch==$TORCH_VERSION" > "$constraints"
pip=("$VENV/bin/python" -m pip install -q -c "$constraints")

"${pip[@]}" "torch==$TORCH_VERSION" numpy
"$VENV/bin/python" - <<'EOF'
import torch
if torch.version.cuda is not None:
    raise SystemExit(f"torch {torch.__version__} is a CUDA build: remove the venv and point pip "
                     "at the CPU wheels (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)")
EOF
"${pip[@]}" --no-deps "vllm==$VLLM_VERSION"
"${pip[@]}" packaging
mapfile -t pinned < <("$VENV/bin/python" - "${VLLM_IMPORTS[@]}" <<'EOF'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

wanted = {canonicalize_name(n): n for n in sys.argv[1:]}
for line in requires("vllm") or []:
    req = Requirement(line)
    name = canonicalize_name(req.name)
    if name in wanted and (req.marker is None or req.marker.evaluate({"extra": ""})):
        print(f"{req.name}{req.specifier}")
        wanted.pop(name)
print(*wanted.values(), sep="\n")  # imported but undeclared: any version
EOF
)
with_deps=() without_deps=()
for req in "${pinned[@]}"; do
  name="${req%%[<>=!~;]*}"
  if [[ " ${NO_DEPS[*]} " == *" $name "* ]]; then without_deps+=("$req"); else with_deps+=("$req"); fi
done
"${pip[@]}" "${with_deps[@]}"
"${pip[@]}" --no-deps "${without_deps[@]}"
"${pip[@]}" "${KVBENCH_DEPS[@]}"
"${pip[@]}" --no-deps -e "$REPO"

VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c "
import kvbench.build.engines, vllm
from vllm.v1.core.sched.scheduler import Scheduler
print('vllm', vllm.__version__, 'and kvbench import in $VENV')" 2>&1 | grep -v "^INFO\|^WARNING"
echo "vllm oracle environment ready in $((SECONDS - start)) s"
