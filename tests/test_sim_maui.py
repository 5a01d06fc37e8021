"""The Maui-like baseline (``--scheduler maui``): EASY backfilling on the users' inexact
wall-time estimates, the estimate model of :mod:`merkat.worlds.batch.maui`, and the CLI run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat import seeds
from merkat.cli import app
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.batch.baselines import schedule
from merkat.worlds.batch.maui import ESTIMATES, POPULAR, maui_workload, tsafrir_estimates


def _starts(wl: Workload, scheduler: str, cores: int = 4) -> list[float]:
    general = schedule(wl, Cluster.pool(cores), scheduler, use_fast=False).start.tolist()
    assert schedule(wl, Cluster.pool(cores), scheduler).start.tolist() == general
    return general


def test_maui_backfills_on_the_users_inexact_estimates() -> None:
    # 4 cores. A (2 cores, 100 s, asks 100 s) and B (2 cores, runs 50 s but asks 300 s) start
    # at 0; C (4 cores) blocks the queue; D (2 cores, runs 20 s, asks 60 s) arrives at 2.
    # t=50: B ends, 2 cores free; C's reservation: A's estimated end, 100 (shadow), no extra
    # cores. D's estimated end 50 + 60 = 110 > 100 and it needs 2 > 0 extra: no backfill.
    # t=100: A ends, C starts (4 cores) and ends at 110, when D starts.
    submit, run, procs = [0, 0, 1, 2], [100, 50, 10, 20], [2, 2, 4, 2]
    asked = Workload.from_arrays(submit, run, procs, estimate=[100, 300, 10, 60])
    assert _starts(asked, "maui") == [0, 0, 100, 110]
    # With exact estimates (the ``easy`` baseline on run times) D's end 70 <= 100: backfilled.
    exact = Workload.from_arrays(submit, run, procs)
    assert _starts(exact, "easy") == [0, 0, 100, 50]


def test_maui_models_the_missing_estimates_only() -> None:
    # Runs above every popular value get the run rounded up to the hour: a deterministic case.
    h = 3600.0
    wl = Workload.from_arrays([0, 0, 1], [48 * h + 100, 48 * h + 5000, 10.0], [1, 1, 1])
    assert wl.estimated is None  # generated jobs carry no user estimate
    m = maui_workload(wl, seed=3)
    assert m.estimate[:2].tolist() == [49 * h, 50 * h]
    assert m.estimate[2] in {v for v, _ in POPULAR}
    # a user's own estimate is kept, even below the run time
    given = Workload.from_arrays([0, 1], [500, 500], [1, 1], estimate=[400, 7200])
    assert maui_workload(given, seed=0).estimate.tolist() == [400, 7200]


def test_tsafrir_estimates_are_popular_values_at_least_the_run() -> None:
    run = np.random.default_rng(1).uniform(1, 3 * 86400, 2000)
    est = tsafrir_estimates(run, seeds.stream(0, ESTIMATES))
    values = {v for v, _ in POPULAR}
    assert np.all(est >= run)
    assert all(e in values or (e % 3600 == 0 and e > max(values)) for e in est.tolist())
    again = tsafrir_estimates(run, seeds.stream(0, ESTIMATES))
    assert est.tolist() == again.tolist()  # same seed, same estimates
    assert est.tolist() != tsafrir_estimates(run, seeds.stream(1, ESTIMATES)).tolist()
    # short runs spread over many values, the popular ones most often (1 h among the top)
    short = tsafrir_estimates(np.full(5000, 60.0), seeds.stream(0, ESTIMATES))
    counts = {v: int((short == v).sum()) for v in values}
    assert counts[3600.0] > counts[300.0] and counts[3600.0] > counts[5400.0]
    assert len([c for c in counts.values() if c]) == len(values)


def test_cli_runs_maui_on_a_trace(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "maui"
    r = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "1000",
                            "--scheduler", "maui", "--out", str(out), "-o", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["scheduler"] == "maui" and doc["jobs"] == 1000
    # HPC2N gives every job's requested time: Maui schedules on those, as EASY does here
    assert doc["estimates"]["requested"] == 1000 and doc["estimates"]["modelled"] == 0
    e = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "1000",
                            "--scheduler", "easy", "--out", str(tmp_path / "e"), "-o", "json"])
    assert json.loads(e.stdout)["avg_wait_s"] == doc["avg_wait_s"]
    assert (out / "jobs.csv").read_text().count("\n") == 1001


def test_cli_maui_models_estimates_on_a_lublin_trace(tmp_path: Path) -> None:
    # a Lublin trace made here (a clone alone has no shared/traces): no requested times
    from merkat.workload.lublin import write as write_lublin

    trace = tmp_path / "lublin.swf"
    write_lublin(trace, 1000, seed=0, nodes=256)
    runner = CliRunner()
    docs = {}
    for s in ("easy", "maui"):
        r = runner.invoke(app, ["sim", "run", "--trace", str(trace), "--jobs", "1000",
                                "--scheduler", s, "--out", str(tmp_path / s), "-o", "json"])
        assert r.exit_code == 0, r.stderr
        docs[s] = json.loads(r.stdout)
    assert docs["maui"]["estimates"]["modelled"] == 1000
    # inexact estimates backfill less: longer waits than EASY on exact run times
    assert docs["maui"]["avg_wait_s"] > docs["easy"]["avg_wait_s"]


@pytest.mark.parametrize("bad", ["mau", "MAUI"])
def test_cli_unknown_scheduler_is_a_one_line_error(tmp_path: Path, bad: str) -> None:
    r = CliRunner().invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--scheduler", bad,
                                 "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--scheduler" in r.stderr and "maui" in r.stderr


def test_satisfaction_experiment_compares_with_maui() -> None:
    from merkat.experiments.common import ScenarioRun
    from merkat.experiments.satisfaction import (
        _satisfaction_derive,
        _satisfaction_runs,
        merkat_satisfaction_run,
        satisfaction_workload,
    )

    runs = _satisfaction_runs(1, None, ())
    assert {r.scheduler for r in runs} == {"market", "easy", "maui"}
    m = merkat_satisfaction_run(ScenarioRun("maui", 0, 0.05, "maui"))
    again = merkat_satisfaction_run(ScenarioRun("maui", 0, 0.05, "maui"))
    assert m["satisfaction"] == again["satisfaction"]  # seeded estimates
    total = float(satisfaction_workload(0, 0.05).budget.sum())
    assert abs(m["satisfaction"]) <= total * (1 + 1e-12) and 0 <= m["met_deadlines"] <= 30
    # the ratio against each baseline: market total over the baseline's total
    rows = [{"interarrival_factor": f, "scheduler": s, "offered_load": 1.0,
             "met_deadlines": 30, "satisfaction": v}
            for f in (1.0, 0.5, 0.25, 0.1, 0.05)
            for s, v in (("market", 300.0), ("easy", 200.0), ("maui", 120.0))]
    doc = _satisfaction_derive(rows)
    assert [(r["ratio"], r["ratio_maui"]) for r in doc["rows"]] == [(1.5, 2.5)] * 5
    assert "market / Maui" in doc["markdown"]
