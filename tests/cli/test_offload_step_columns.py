"""steps.csv's host-tier columns (`--kv-offload`): each step's stored and loaded blocks add up
to the tier's counters in the summary (every load has ended by the run's end; so has every
store here), the sequences waiting for a load are counted, and without a tier the three
columns are empty."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kvbench.cli import main
from tests.cli.test_offload_ttft_split import HISTORIES

TIER_COLUMNS = ["host_store_blocks", "host_load_blocks", "host_load_waiting"]


def _results(tmp_path, args: list[str]) -> tuple[dict, pd.DataFrame]:
    assert main(["simulate", "--strategy", "prefix", "--quiet", "--out", str(tmp_path),
                 *args]) == 0
    (folder,) = tmp_path.iterdir()
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    return summary, pd.read_csv(folder / "steps.csv")


def test_step_columns_add_up_to_the_tiers_counters(tmp_path):
    summary, steps = _results(tmp_path / "tier", [*HISTORIES, "--kv-offload", "64GiB"])
    scheduler = summary["scheduler"]
    assert list(steps.columns[-3:]) == TIER_COLUMNS
    assert all(steps[c].dtype == "int64" and (steps[c] >= 0).all() for c in TIER_COLUMNS)
    assert steps["host_load_blocks"].sum() == scheduler["host_loaded_blocks"] > 0
    assert steps["host_store_blocks"].sum() == scheduler["host_stored_blocks"] > 0
    assert steps["host_load_waiting"].max() >= 1
    assert scheduler["host_loaded_blocks_per_step"] == pytest.approx(
        steps["host_load_blocks"].mean())


def test_without_a_tier_the_columns_are_empty(tmp_path):
    _, steps = _results(tmp_path, [*HISTORIES[:-4], "--num-requests", "20"])
    assert list(steps.columns[-3:]) == TIER_COLUMNS
    assert steps[TIER_COLUMNS].isna().all().all()
