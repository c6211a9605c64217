"""`--repeat` statistics: the Student t quantiles behind the 95% confidence intervals."""

from __future__ import annotations

import pytest

from kvbench.results.repeat import format_mean_ci, mean_ci95, t_critical_95


@pytest.mark.parametrize("dof, table_value", [(1, 12.706), (2, 4.303), (4, 2.776),
                                              (10, 2.228), (30, 2.042), (120, 1.980)])
def test_t_quantiles_match_printed_tables(dof, table_value):
    assert t_critical_95(dof) == pytest.approx(table_value, abs=5e-4)


def test_t_quantile_tends_to_the_normal_one():
    assert t_critical_95(10_000) == pytest.approx(1.960, abs=1e-3)
    assert t_critical_95(40) > t_critical_95(10_000)  # no jump to 1.96 after a table's end


def test_one_value_has_no_interval_and_prints_bare():
    stats = mean_ci95([5.0])
    assert stats["ci95"] is None and format_mean_ci(stats) == "5.0"
    two = mean_ci95([4.0, 6.0])
    assert format_mean_ci(two) == f"5.0 ± {12.706 * 1.0:.1f}"
