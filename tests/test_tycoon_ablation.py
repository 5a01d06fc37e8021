"""Issue 29, disagreement 3: the Tycoon ablations' series, scoring and tables."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.experiments.registry import EXPERIMENTS
from merkat.experiments.tycoon import funding_jobs
from merkat.experiments.tycoon_ablation import (
    READINGS,
    ReadingRun,
    _ar_derive,
    _ar_runs,
    _OutsideLoad,
    live_prices,
    score,
    synthetic,
    tycoon_funding_ablation,
)
from merkat.worlds.tycoon.simulator import TycoonConfig, TycoonJob


def test_synthetic_series_have_the_stated_properties() -> None:
    steps = synthetic(0, "steps", hosts=3)
    daily = synthetic(0, "daily", hosts=3)
    assert steps.shape == daily.shape == (14_400, 3)
    assert steps.min() >= 0.05 and daily.min() >= 0.05
    assert np.array_equal(steps, synthetic(0, "steps", hosts=3))  # the seed's own stream
    assert not np.array_equal(steps, synthetic(1, "steps", hosts=3))
    flat = lambda x: float(np.mean(np.diff(x, axis=0) == 0))  # noqa: E731
    assert flat(steps) > 0.99 and flat(daily) < 0.01  # steps vs fluctuations
    assert set(np.unique(steps[:, 0])) >= {1.0}  # the level between jobs
    # the daily cycle: hourly means 12 h apart differ by about twice the amplitude at most
    hourly = daily[:, 0].reshape(40, 360).mean(axis=1)
    assert 0.2 < np.ptp(hourly) < 1.0


def test_score_takes_one_hour_as_the_mean_or_the_snapshot() -> None:
    rng = np.random.default_rng(5)
    levels = rng.uniform(0.5, 1.5, 40)
    x = np.repeat(levels, 360) + np.tile(np.linspace(0, 0.1, 360), 40)  # a ramp in each hour
    for sampling, hourly in (("hourly-mean", levels + 0.05), ("hourly-snapshot", levels + 0.1)):
        got = score(x, 360, sampling, 20)
        assert got is not None
        measured, naive = hourly[20:], hourly[19:-1]
        want = float(np.abs(naive - measured).mean() / 2 / measured.mean())
        assert got["naive"] == pytest.approx(want, rel=1e-9)
        assert all(0 < got[k] < 1 for k in ("ar_smoothed", "ar_unsmoothed"))
    assert score(np.r_[np.ones(20 * 360), x[: 20 * 360]], 360, "hourly-mean", 20) is None


def test_the_live_recording_is_a_merkat_price_export() -> None:
    p = live_prices()
    # credits per core-second: the 0.08 per (1.01-s) period at the urgent solver's peak
    assert p.shape == (292, 1) and p.min() >= 0 and p.max() == pytest.approx(0.08, rel=0.01)
    assert [r.label for r in _ar_runs(3, None, ())].count("live") == 1  # one series, no seeds


def test_the_ablation_table_says_which_readings_reproduce() -> None:
    def row(series: str, seed: int, sm: float, plain: float, naive: float) -> dict[str, object]:
        cell = {"ar_smoothed": sm, "ar_unsmoothed": plain, "naive": naive, "hosts": 30,
                "ar_wins": 10}
        return {"series": series, "seed": seed, "hourly-mean": cell, "hourly-snapshot": cell}

    doc = _ar_derive([row("daily", 0, 0.03, 0.04, 0.035), row("daily", 1, 0.05, 0.06, 0.055),
                      row("market", 0, 0.2, 0.19, 0.18)])
    daily = next(r for r in doc["rows"] if r["series"] == "daily")
    assert daily["ar_smoothed"] == pytest.approx(0.04) and daily["reproduces"]
    assert daily["ar_smoothed_text"] == "4.00 [3.00-5.00]" and daily["ar_wins"] == 20
    market = next(r for r in doc["rows"] if r["series"] == "market")
    assert not market["reproduces"] and market["naive_text"] == "18.00"
    assert "| daily | hourly-mean | 4.00 [3.00-5.00] |" in doc["markdown"]
    assert {"tycoon-ar6-ablation", "tycoon-funding-ablation"} <= set(EXPERIMENTS)


def test_table_1_spends_its_budget_over_a_day_and_table_2_keeps_the_paper_deadline() -> None:
    assert {j.deadline_s for j in funding_jobs(1)} == {24 * 3600.0}
    assert {j.deadline_s for j in funding_jobs(2)} == {5.5 * 3600.0}
    assert {j.deadline_s for j in funding_jobs(1, 5.5)} == {5.5 * 3600.0}
    assert set(READINGS) >= {"day (default)", "deadline 5.5 h", "SLS returns 10 hosts"}


@pytest.mark.slow
def test_a_day_s_horizon_puts_table_1_s_cost_at_the_paper_s_level() -> None:
    row = tycoon_funding_ablation(ReadingRun("day (default)", 0))
    assert row["audit_ok"]
    for users in ("1-2", "3-5"):
        g = row["groups"][users]
        assert g["completed"] == g["jobs"] and g["nodes"] == 15
        # a job never spends faster than budget / deadline = 100 $ / 24 h
        assert 3.5 < g["cost_per_h"] <= 100 / 24 + 1e-9


def test_the_outside_load_is_another_tenant_bidding_on_every_host() -> None:
    load = np.array([0.0, 1e-3, 2e-3, 3e-3])
    res = _OutsideLoad(TycoonConfig(hosts=4, reserve=1e-4, seed=0),
                       [TycoonJob("a", 10, 7200, subjobs=2, work_s=600)], load).run()
    assert res.audit_ok and res.jobs[0]["nodes"] == 2 and res.jobs[0]["complete"]
    # the job took the two cheapest hosts (Best Response's w/y through the SLS); the others'
    # price is the outside bid alone (2 CPUs a host)
    assert (res.prices[1, :2] > load[:2] / 2).all()
    assert np.array_equal(res.prices[1, 2:], load[2:] / 2)
