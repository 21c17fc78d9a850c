"""What an operation will cost, said before it runs: the duration is fitted from recorded runs (a fixed cost per run
plus a cost per table-day), and says so when there is nothing to fit from."""

from datetime import date

import pytest

from exact_backfills.estimates import (
    CostModel,
    Estimate,
    Measured,
    Reads,
    RunCost,
    Work,
    describe,
    describe_measured,
    fit,
)


def test_runs_on_a_straight_line_give_back_its_fixed_cost_and_cost_per_table_day():
    model = fit([RunCost(days, 8.0 + 0.5 * days) for days in (10, 40, 70, 100)])
    assert model is not None and model.runs == 4
    assert model.fixed_s == pytest.approx(8.0) and model.per_table_day_s == pytest.approx(0.5)
    assert model.seconds(runs=2, table_days=60) == pytest.approx(46.0)


def test_without_a_run_that_published_there_is_no_estimate():
    assert fit([]) is None
    assert fit([RunCost(0, 12.0)]) is None  # a checks-only run publishes nothing


def test_runs_of_one_size_put_the_whole_cost_on_the_table_days():
    model = fit([RunCost(20, 10.0), RunCost(20, 14.0)])
    assert model == CostModel(0.0, pytest.approx(0.6), 2)


def test_neither_cost_is_ever_below_zero():
    # Bigger runs that took less time: no cost per table-day, the mean as the fixed cost.
    falling = fit([RunCost(10, 30.0), RunCost(100, 10.0)])
    assert falling is not None and falling.per_table_day_s == 0.0 and falling.fixed_s == pytest.approx(20.0)
    # A line through below zero: through the origin instead.
    steep = fit([RunCost(10, 1.0), RunCost(100, 100.0)])
    assert steep is not None and steep.fixed_s == 0.0 and steep.per_table_day_s > 0


WORK = Work(
    [(date(2025, 1, 1), date(2025, 1, 15)), (date(2025, 1, 16), date(2025, 1, 30))],
    {"fact": [date(2025, 1, 1)] * 30, "mart": [date(2025, 1, 1)] * 30},
)


def test_the_estimate_names_the_runs_table_days_reads_and_the_fit_it_comes_from():
    estimate = Estimate(WORK, Reads(3, 5 * 1024 * 1024, 12), CostModel(4.0, 0.25, 7), "embedded")
    lines = describe("backfill 1a2b", estimate)
    assert lines == [
        "backfill 1a2b: 2 run(s), 60 table-day(s) to write (fact 30, mart 30)",
        "  reads 3 landed batch(es) (5.0 MB) and 12 published file(s)",
        "  estimated time: 23s (4.0s per run + 0.250s per table-day, fitted from 7 embedded run(s))",
    ]
    assert describe_measured("backfill 1a2b", estimate, Measured(2, 60, 19.6)) == (
        "backfill 1a2b measured: 2 run(s), 60 table-day(s) built in 20s (estimated: 2 run(s), 60 table-day(s), 23s)"
    )


def test_with_no_run_recorded_on_the_profile_the_time_is_unknown_and_a_plan_says_at_most():
    lines = describe("plan", Estimate(WORK, Reads(0, 0, 0), None, "cluster"), upper_bound=True)
    assert lines[0] == "plan: 2 run(s), at most 60 table-day(s) to write (fact 30, mart 30)"
    assert lines[2] == "  estimated time: unknown (no run recorded on the cluster profile yet)"
