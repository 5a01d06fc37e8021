"""A live run's exported prices replayed as the background of the Tycoon simulator
(``merkat tycoon run --background-prices``) and read by ``merkat predict --history``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.cli.client import PriceFormat, _emit_prices
from merkat.worlds.tycoon.background import PriceFileError, PriceSeries, read_price_export
from merkat.worlds.tycoon.simulator import TycoonConfig, TycoonJob, simulate

runner = CliRunner()

ROWS = [  # as the live store gives them: credits per core / per MiB, for one 40-s period
    {"period": 0, "time": 1000.0, "cpu": 0.4, "memory": 0.0},
    {"period": 1, "time": 1040.0, "cpu": 0.8, "memory": 0.001},
    {"period": 2, "time": 1080.0, "cpu": 0.2, "memory": 0.0},
]


def export(tmp_path: Path, fmt: PriceFormat, rows: list[dict[str, float]] = ROWS,
           capsys: pytest.CaptureFixture[str] | None = None) -> Path:
    """The file `merkat prices --since T -o FMT` writes for ``rows`` (its own writer)."""
    assert capsys is not None
    capsys.readouterr()
    _emit_prices(fmt, rows)
    path = tmp_path / f"prices.{fmt.value}"
    path.write_text(capsys.readouterr().out)
    return path


@pytest.mark.parametrize("fmt", [PriceFormat.json, PriceFormat.csv])
def test_the_export_reads_back_per_second_as_a_step_function(
    fmt: PriceFormat, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = read_price_export(export(tmp_path, fmt, capsys=capsys))
    assert s.period_s == 40.0
    assert s.times.tolist() == [0.0, 40.0, 80.0]
    assert s.cpu.tolist() == [0.4 / 40, 0.8 / 40, 0.2 / 40]
    # held until the next row; the first before it, the last after it
    assert s.cpu_at(-5) == s.cpu_at(0) == s.cpu_at(39.9) == 0.01
    assert s.cpu_at(40) == 0.02 and s.cpu_at(1e9) == 0.005


def test_bad_price_files_name_the_line_or_item(tmp_path: Path) -> None:
    p = tmp_path / "p.csv"
    p.write_text("period,time,cpu,memory\n0,10,0.1,0\n1,5,0.1,0\n")
    with pytest.raises(PriceFileError, match=r"p.csv: line 3: time 5.0 is not after"):
        read_price_export(p)
    p.write_text("period,cpu\n0,0.1\n")
    with pytest.raises(PriceFileError, match=r"line 1: no time column"):
        read_price_export(p)
    p.write_text("period,time,cpu,memory\n0,10,-1,0\n1,20,1,0\n")
    with pytest.raises(PriceFileError, match=r"line 2: cpu: must be a finite number >= 0"):
        read_price_export(p)
    j = tmp_path / "p.json"
    j.write_text(json.dumps({"items": [{"time": 1, "cpu": "x"}]}))
    with pytest.raises(PriceFileError, match=r"item 0: cpu: not a number"):
        read_price_export(j)
    j.write_text(json.dumps({"items": [{"time": 1, "cpu": 1}]}))
    with pytest.raises(PriceFileError, match="one row: give the period length"):
        read_price_export(j)
    assert read_price_export(j, period_s=10).cpu.tolist() == [0.1]


def _scenario() -> tuple[TycoonConfig, list[TycoonJob]]:
    cfg = TycoonConfig(hosts=4, cpus_per_host=2.0, reserve=1e-4, settle_every=6)
    jobs = [TycoonJob("alice", 10.0, 7200.0, subjobs=2, work_s=3600.0),
            TycoonJob("bob", 10.0, 7200.0, launch_s=60.0, subjobs=2, work_s=3600.0)]
    return cfg, jobs


def _flat(price_per_s: float) -> PriceSeries:
    one = np.array([price_per_s])
    return PriceSeries(np.array([0.0]), one, np.zeros(1), 10.0)


def test_a_zero_background_changes_nothing_and_a_dearer_one_slows_the_jobs() -> None:
    cfg, jobs = _scenario()
    plain = simulate(cfg, jobs)
    zero = simulate(cfg, jobs, background=_flat(0.0))
    assert zero.jobs == plain.jobs and np.array_equal(zero.prices, plain.prices)
    times, costs = [], []
    for p in (1e-4, 4e-4, 8e-4):
        r = simulate(cfg, jobs, background=_flat(p))
        assert r.audit_ok and all(j["complete"] for j in r.jobs)
        # a host no job bids on is priced at the recorded price (the outside bidder alone)
        assert r.prices[:, 2:].min() == pytest.approx(p)
        times.append(max(j["time_h"] for j in r.jobs))
        costs.append(max(j["cost"] for j in r.jobs))
    # VMs are capped at 1 of a host's 2 CPUs: at 1e-4 the jobs still get a whole CPU (1 h, as
    # without background) but pay more; from 4e-4 on the outside bidder takes CPU from them
    assert max(j["time_h"] for j in plain.jobs) == times[0] == 1.0 < times[1] < times[2]
    assert max(j["cost"] for j in plain.jobs) < costs[0] < costs[1] < costs[2]


def test_tycoon_run_replays_a_live_export_end_to_end(tmp_path: Path) -> None:
    """A live server's prices, exported with `merkat prices --since -o csv`, replayed by
    `merkat tycoon run --background-prices`, and read by `merkat predict ar --history`."""
    from merkat.bench.web import running_server

    with running_server(tmp_path / "data", period=0.3, user="alice", admin=False) as s:
        while len(s.manager.store.prices(0.0, 1000)) < 5:
            time.sleep(0.1)
        r = runner.invoke(app, ["prices", "--since", "1h", "-o", "csv", "--url", s.base,
                                "--token", s.key])
        assert r.exit_code == 0, r.stderr
    live = tmp_path / "live.csv"
    live.write_text(r.stdout)
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({
        "config": {"hosts": 2, "cpus_per_host": 2, "reserve": 0.0001},
        "jobs": [{"user": "alice", "budget": 5, "deadline_h": 2, "subjobs": 2,
                  "work_min": 30}]}))
    r = runner.invoke(app, ["tycoon", "run", str(scenario), "--background-prices", str(live),
                            "--background-scale", "0.01", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["audit_ok"] and doc["items"][0]["complete"]
    rows = live.read_text().strip().splitlines()[1:]
    assert doc["background"]["rows"] == len(rows) >= 5
    assert doc["background"]["period_s"] == pytest.approx(0.3, rel=0.5)
    r = runner.invoke(app, ["predict", "stats", "--history", str(live), "-o", "json"])
    assert r.exit_code == 0, r.stderr


def test_tycoon_run_refuses_a_bad_background_in_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"jobs": [{"user": "a", "budget": 1, "deadline_h": 1}]}))
    bad = tmp_path / "bad.csv"
    bad.write_text("period,time,cpu,memory\n0,1,0.1,0\n1,1,0.1,0\n")
    for extra, want in (
        (["--background-prices", str(bad)], "bad.csv: line 3: time 1.0 is not after"),
        (["--background-prices", str(tmp_path / "none.csv")], "none.csv: cannot read"),
        (["--background-prices", str(bad), "--background-scale", "nan"], "--background-scale"),
        (["--background-prices", str(bad), "--background-period", "0"], "--background-period"),
    ):
        r = runner.invoke(app, ["tycoon", "run", str(scenario), *extra])
        assert r.exit_code == 2 and want in r.stderr, (extra, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1


def test_predict_reads_the_live_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    path = export(tmp_path, PriceFormat.json, capsys=capsys)
    r = runner.invoke(app, ["predict", "stats", "--history", str(path), "-o", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["mean"] == pytest.approx((0.4 + 0.8 + 0.2) / 3)
