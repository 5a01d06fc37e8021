"""``merkat sim run --scheduler market --policy NAME``: the market on the same jobs as the
baselines, selected by a CLI flag."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.sim.metrics import read_jobs_csv
from merkat.sim.traces import HPC2N, find_trace

runner = CliRunner()


@pytest.fixture(scope="module")
def trace() -> str:
    try:
        return str(find_trace(HPC2N))
    except FileNotFoundError as exc:  # pragma: no cover - CI has ../shared/traces
        pytest.skip(str(exc))


def sim_run(trace: str, out: Path, *extra: str) -> tuple[int, str, str]:
    r = runner.invoke(
        app,
        ["sim", "run", "--trace", trace, "--jobs", "40", "--out", str(out), "-o", "json", *extra],
    )
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("policy", ["deadline-strict", "performance-partial"])
def test_market_run_writes_the_baselines_files(trace: str, tmp_path: Path, policy: str) -> None:
    code, out, err = sim_run(trace, tmp_path / "m", "--scheduler", "market", "--policy", policy)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["scheduler"] == "market" and summary["policy"] == policy
    assert summary["ledger_audit_ok"] is True
    jobs = read_jobs_csv(tmp_path / "m" / "jobs.csv")
    assert len(jobs["job_id"]) == 40 == summary["jobs"]
    assert int(jobs["met"].sum()) == summary["met_deadlines"]
    assert jobs["value"].sum() == pytest.approx(summary["total_value"], rel=1e-6)
    # Same jobs as a baseline run: same ids, submit times and deadlines.
    code, _, err = sim_run(trace, tmp_path / "f", "--scheduler", "fcfs")
    assert code == 0, err
    base = read_jobs_csv(tmp_path / "f" / "jobs.csv")
    for col in ("job_id", "submit", "deadline", "procs"):
        assert np.array_equal(jobs[col], base[col])


def test_market_run_bad_policy_and_period(trace: str, tmp_path: Path) -> None:
    code, _, err = sim_run(trace, tmp_path, "--scheduler", "market", "--policy", "greedy")
    assert code == 2 and "--policy must be one of" in err and "deadline-strict" in err
    code, _, err = sim_run(trace, tmp_path, "--scheduler", "market", "--period", "0")
    assert code == 2 and "--period must be > 0" in err


def test_bench_period_prints_json_and_refuses_negative_job_counts(trace: str) -> None:
    r = runner.invoke(app, ["bench", "period", "--jobs", "60", "--trace", trace])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["jobs"] == 60 and doc["periods"] > 0
    assert 0 <= doc["met_deadlines"] <= 60 and doc["ms_per_period"] > 0
    again = json.loads(runner.invoke(app, ["bench", "period", "--jobs", "60", "--trace", trace]).stdout)
    assert (again["met_deadlines"], again["migrations"]) == (doc["met_deadlines"], doc["migrations"])
    bad = runner.invoke(app, ["bench", "period", "--jobs", "-1", "--trace", trace])
    assert bad.exit_code == 2 and "--jobs must be >= 0" in bad.stderr
