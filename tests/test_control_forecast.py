"""Deadline policies bidding at a forecast price (Tycoon §4.3, eq. 5-6): ``forecast="ar"``."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.control.forecast import PriceForecast
from merkat.control.registry import PolicyError, make_policy
from merkat.control.types import Action, Budget, Demand, Metrics, Observation
from merkat.predict.ar import fit
from merkat.worlds.merkat.parallel import reads_history

runner = CliRunner()


def ar1(n: int, seed: int = 0, phi: float = 0.7, mean: float = 1.0) -> list[float]:
    rng = np.random.default_rng(seed)
    x = [mean]
    for _ in range(n - 1):
        x.append(mean + phi * (x[-1] - mean) + 0.05 * float(rng.standard_normal()))
    return x


def obs(prices: list[float], **kw: object) -> Observation:
    base: dict[str, object] = dict(
        time=0.0, period=300.0, prices={"cpu": prices[-1]}, capacity={"cpu": 240.0},
        vm_size={"cpu": 1.0}, budget=Budget(1e6), bid_min={"cpu": 0.001},
        price_history=tuple({"cpu": p} for p in prices[:-1]),
        metrics=Metrics(work_done=0.0, work_total=3000.0, ideal_rate=1.0),
        deadline=6000.0,
    )  # fmt: skip
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def test_the_ar_forecast_is_the_fitted_one_step_mean_plus_z_sigma() -> None:
    x = ar1(12)
    for p in (0.1, 0.5, 0.9):
        got = PriceForecast("ar", order=2, probability=p).prices(obs(x))["cpu"]
        model = fit(np.array(x), 2, "adjusted")
        want = model.forecast(np.array(x), 1)[0] + NormalDist().inv_cdf(p) * math.sqrt(
            model.sigma2)
        assert got == pytest.approx(want, rel=1e-12)


def test_the_last_price_is_kept_without_enough_history_or_variation() -> None:
    x = ar1(12)
    assert PriceForecast("last").prices(obs(x)) == {"cpu": x[-1]}
    assert PriceForecast("ar", order=2).prices(obs(x[:7])) == {"cpu": x[6]}  # < 8 prices
    assert PriceForecast("ar", order=3).prices(obs(x[:11])) == {"cpu": x[10]}  # < 4k = 12
    assert PriceForecast("ar").prices(obs([0.5] * 12)) == {"cpu": 0.5}  # constant
    # a negative expected price is 0 (a low quantile of a price near 0)
    near_zero = [max(v - 1.0, 0.0) for v in ar1(12, seed=3)]
    assert PriceForecast("ar", probability=0.01).prices(obs(near_zero))["cpu"] == 0.0


@pytest.mark.parametrize("name", ["vertical-deadline", "deadline-strict"])
def test_deadline_policies_bid_their_start_at_the_forecast_price(name: str) -> None:
    x = ar1(12)
    bids = {}
    for p in (0.1, 0.5, 0.9):
        d = make_policy(name, forecast="ar", probability=p).decide(obs(x))
        assert d.action is Action.START
        bids[p] = d.new_vm_bid["cpu"]
    last = make_policy(name).decide(obs(x)).new_vm_bid["cpu"]
    assert bids[0.1] < bids[0.5] < bids[0.9]
    assert min(bids.values()) != last or max(bids.values()) != last


def test_only_a_forecasting_controller_reads_the_price_history() -> None:
    assert not make_policy("vertical-deadline").reads_price_history
    assert make_policy("vertical-deadline", forecast="ar").reads_price_history
    assert make_policy("deadline-strict", forecast="ar").reads_price_history
    assert reads_history(["deadline-strict"], {"forecast": "ar"})
    assert not reads_history(["deadline-strict"], {})
    with pytest.raises(PolicyError, match="forecast: must be one of last, ar"):
        make_policy("vertical-deadline", forecast="arima")
    with pytest.raises(PolicyError, match=r"probability: must be a finite number in \(0, 1\)"):
        make_policy("deadline-strict", forecast="ar", probability=1.0)


def test_sim_run_takes_policy_params(tmp_path: Path) -> None:
    args = ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "60", "--scheduler",
            "market", "--policy", "vertical-deadline", "--hosts", "240", "--cores-per-host", "1"]
    r = runner.invoke(app, [*args, "--policy-param", "forecast=ar", "--policy-param",
                            "probability=0.75", "--out", str(tmp_path / "a"), "-o", "json"])
    assert r.exit_code == 0, r.stderr
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["policy_params"] == {"forecast": "ar", "probability": 0.75}
    for extra, want in (
        (["--policy-param", "forecast"], "expected KEY=VALUE"),
        (["--policy-param", "colour=red"], "has no parameter 'colour'"),
        (["--policy-param", "forecast=arima"], "forecast: must be one of last, ar"),
        (["--policy-param", "forecast_horizon=soon"],
         "forecast_horizon: must be an integer in [1, 10000] or 'deadline'"),
        (["--policy-param", "forecast_history=6"], "forecast_history: must be an integer in "),
    ):
        r = runner.invoke(app, [*args, *extra, "--out", str(tmp_path / "b")])
        assert r.exit_code == 2 and want in r.stderr, (extra, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "10",
                            "--scheduler", "edf", "--policy-param", "forecast=ar",
                            "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "only with --scheduler market" in r.stderr


def test_themis_fig5_takes_the_policy_and_its_parameters(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "experiment", "themis-fig5", "--jobs", "30", "--factors",
                            "1.0", "--policy", "deadline-strict", "--policy-param",
                            "forecast=ar", "--out", str(tmp_path / "f5")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads((tmp_path / "f5" / "results.json").read_text())
    assert doc["parameters"]["policy"] == "deadline-strict"
    assert doc["parameters"]["policy_params"] == {"forecast": "ar"}
    assert {row["scheduler"] for row in doc["runs"]} == {"market", "fcfs", "edf"}
    for args, want in (
        (["themis-fig6", "--policy", "best-effort"], "does not take a policy"),
        (["themis-fig5", "--policy", "merkat-horizontal"], "--policy must be one of"),
        (["themis-fig5", "--policy-param", "colour=red"], "has no parameter 'colour'"),
    ):
        r = runner.invoke(app, ["sim", "experiment", *args, "--out", str(tmp_path / "x")])
        assert r.exit_code == 2 and want in r.stderr, (args, r.stderr)


def test_an_explosive_fit_is_replaced_by_the_stationary_one() -> None:
    # A smoothed step: adjusted AR(5) is explosive on it; the controller bids at the mle
    # model's forecast instead.
    from merkat.predict.ar import smooth

    x = [float(v) for v in smooth(np.r_[np.zeros(10), np.ones(10)], 10.0) + 1.0]
    assert not fit(np.array(x), 5, "adjusted").stationary
    model = fit(np.array(x), 5, "mle")
    got = PriceForecast("ar", order=5).prices(obs(x))["cpu"]
    assert got == pytest.approx(model.forecast(np.array(x), 1)[0], rel=1e-12)


def test_the_forecast_is_fitted_on_the_last_forecast_history_prices() -> None:
    x = ar1(30, seed=5)
    o = obs(x)
    for history in (8, 12, 20, 30):
        got = PriceForecast("ar", order=2, probability=0.8, history=history).prices(o)["cpu"]
        tail = np.array(x[-history:])
        model = fit(tail, 2, "adjusted", stationary=True)
        want = model.forecast(tail, 1)[0] + NormalDist().inv_cdf(0.8) * math.sqrt(model.sigma2)
        assert got == pytest.approx(want, rel=1e-12), history
    # by hand on a short series: AR(1) of 8 prices with the adjusted autocorrelation,
    # y = μ + φ(x_N - μ) + z·σ (σ² = r0 - φ·r1)
    short = [1.0, 1.2, 0.9, 1.1, 1.3, 1.0, 0.8, 1.1]
    mu = sum(short) / 8
    d = [v - mu for v in short]
    r0 = sum(v * v for v in d) / 8
    r1 = sum(d[i] * d[i + 1] for i in range(7)) / 7
    phi = r1 / r0
    want = mu + phi * (short[-1] - mu) + NormalDist().inv_cdf(0.9) * math.sqrt(r0 - phi * r1)
    got = PriceForecast("ar", order=1, probability=0.9, history=8).prices(obs(x[:22] + short))
    assert got["cpu"] == pytest.approx(want, rel=1e-12)


def test_the_multi_step_price_is_the_highest_quantile_of_the_next_h_periods() -> None:
    x = ar1(12, seed=2)
    arr = np.array(x)
    model = fit(arr, 2, "adjusted", stationary=True)
    for p in (0.25, 0.75, 0.9):
        z = NormalDist().inv_cdf(p)
        for h in (1, 2, 5, 40):
            got = PriceForecast("ar", probability=p, horizon=h).prices(obs(x))["cpu"]
            means, var = model.forecast(arr, h), model.forecast_variance(h)
            want = max(means[i] + z * math.sqrt(var[i]) for i in range(h))
            assert got == pytest.approx(want, rel=1e-12), (p, h)
    # H = 1 is the one-step price; a longer horizon never lowers it (the max over more steps)
    one = PriceForecast("ar", probability=0.75).prices(obs(x))["cpu"]
    assert PriceForecast("ar", probability=0.75, horizon=1).prices(obs(x))["cpu"] == one
    assert PriceForecast("ar", probability=0.75, horizon=5).prices(obs(x))["cpu"] >= one


def test_the_deadline_horizon_is_the_periods_left_to_the_deadline() -> None:
    x = ar1(12, seed=2)
    f = PriceForecast("ar", probability=0.8, horizon="deadline")
    assert f.steps(obs(x, time=0.0, deadline=6000.0)) == 20  # 6000 s / 300 s
    assert f.steps(obs(x, time=100.0, deadline=6000.0)) == 20  # 19.67 periods: 20
    assert f.steps(obs(x, time=5990.0, deadline=6000.0)) == 1
    assert f.steps(obs(x, deadline=None)) == 1
    fixed = PriceForecast("ar", probability=0.8, horizon=20).prices(obs(x))
    assert f.prices(obs(x, time=0.0, deadline=6000.0)) == fixed


@pytest.mark.parametrize("name", ["vertical-deadline", "deadline-strict"])
def test_the_new_forecast_parameters_are_validated_by_name(name: str) -> None:
    for params, want in (
        ({"forecast_horizon": 0}, "forecast_horizon: must be an integer in [1, 10000] or "
         "'deadline', got 0"),
        ({"forecast_horizon": "soon"}, "forecast_horizon: must be"),
        ({"forecast_horizon": 2.5}, "forecast_horizon: must be"),
        ({"forecast_history": 7}, "forecast_history: must be an integer in [8, 10000] or null"),
        ({"forecast_history": 11, "forecast_order": 3}, r"forecast_history: must be .* = 12"),
        ({"forecast_order": 0}, "forecast_order: must be an integer in [1, 64], got 0"),
    ):
        with pytest.raises(PolicyError, match=want if ".*" in want else re.escape(want)):
            make_policy(name, forecast="ar", **params)
    ctl = make_policy(name, forecast="ar", forecast_history=48, forecast_horizon="deadline")
    assert ctl.price_history_periods == 48
    assert make_policy(name, forecast="ar", forecast_order=5).price_history_periods == 20
    assert make_policy(name, forecast_history=48).price_history_periods == 0  # last: reads none


def test_the_platform_keeps_the_history_a_controller_asks_for() -> None:
    from merkat.backends.sim import RigidApp, SimBackend
    from merkat.bank.memory import MemoryLedger
    from merkat.control.registry import POLICIES
    from merkat.core.period import AppSpec, Platform
    from merkat.market import Hosts
    from merkat.runtime.driver import Driver
    from merkat.runtime.economy import Economy

    seen: list[int] = []

    class Recorder(POLICIES["deadline-strict"]):  # type: ignore[misc,valid-type]
        """deadline-strict with forecast_history=30, recording how many past prices it saw."""

        def decide(self, o: Observation) -> Demand:
            seen.append(len(o.price_history))
            return super().decide(o)

    hosts = Hosts(("h0",), np.array([[4.0, 4096.0]]))
    platform = Platform(hosts, period=60.0, reserve={"cpu": 0.01})
    driver = Driver(platform, SimBackend(trade_memory=False), Economy(MemoryLedger()))
    spec = AppSpec(id="a", policy="deadline-strict", size=1, vm_size={"cpu": 1.0},
                   submit_time=0.0, budget=100.0, deadline=1e9, trade=("cpu",))
    ctl = Recorder(forecast="ar", forecast_history=30)
    driver.submit(spec, RigidApp(vms=1, work_total=1e6, cpu=1.0), ctl)
    assert platform.history_size == 30
    for k in range(40):
        driver.step(60.0 * k)
    assert seen == [min(max(k - 1, 0), 29) for k in range(40)]
