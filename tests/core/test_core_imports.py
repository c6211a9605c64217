"""The core, the strategies and the policies load without torch, numpy or the workloads."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "numpy", "pandas", "kvbench.workloads")


def test_core_strategies_and_scheduling_import_without_torch():
    code = (
        "import json, sys\n"
        "import kvbench.core, kvbench.engine.engine, kvbench.strategies, kvbench.scheduling\n"
        "from kvbench.strategies import STRATEGIES\n"
        "from kvbench.scheduling import POLICIES, QUEUE_ORDERS\n"
        "STRATEGIES.names(); POLICIES.names(); QUEUE_ORDERS.names()  # imports every module\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert json.loads(done.stdout) == []
