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
from merkat.workload.traces import HPC2N, find_trace

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
    assert code == 2 and "--period must be in [1, 86400]" in err


def test_bench_period_prints_json_and_refuses_negative_job_counts(trace: str) -> None:
    r = runner.invoke(app, ["bench", "period", "--jobs", "60", "--trace", trace])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["jobs"] == 60 and doc["periods"] > 0
    assert 0 <= doc["met_deadlines"] <= 60 and doc["ms_per_period"] > 0
    again = json.loads(runner.invoke(app, ["bench", "period", "--jobs", "60", "--trace", trace]).stdout)
    assert (again["met_deadlines"], again["migrations"]) == (doc["met_deadlines"], doc["migrations"])
    bad = runner.invoke(app, ["bench", "period", "--jobs", "-1", "--trace", trace])
    assert bad.exit_code == 2 and "--jobs must be an integer in [0, " in bad.stderr


def test_bench_period_reports_the_peak_resident_memory_of_its_process(trace: str) -> None:
    """``peak_rss_mib`` is the process's own peak: what the kernel reports for it at exit
    (wait4), give or take what printing the JSON adds."""
    import os
    import subprocess
    import sys

    p = subprocess.Popen(
        [sys.executable, "-m", "merkat", "bench", "period", "--jobs", "40", "--trace", trace],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert p.stdout is not None
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = 0  # reaped here
    assert os.waitstatus_to_exitcode(status) == 0
    doc = json.loads(out)
    at_exit = usage.ru_maxrss / 1024
    assert 30 < doc["peak_rss_mib"] <= at_exit + 0.1
    assert at_exit - doc["peak_rss_mib"] < 8


def test_bench_sweep_times_the_experiment_and_digests_its_results(tmp_path: Path) -> None:
    """``merkat bench sweep``: the experiment's own files, a digest of results.json that
    does not depend on the run (two runs, the same digest) and the target's verdict."""
    import hashlib

    args = ["bench", "sweep", "themis-fig5", "--jobs", "12", "--factors", "1.0",
            "--workers", "1"]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["experiment"] == "themis-fig5" and doc["workers"] == 1 and doc["runs"] == 3
    results = (tmp_path / "a" / "results.json").read_bytes()
    assert doc["results_sha256"] == hashlib.sha256(results).hexdigest()
    assert doc["process_wall_s"] >= doc["wall_s"] > 0 and doc["cpu_s"] > 0
    assert doc["met"] is (doc["process_wall_s"] <= doc["target_s"] == 60.0)
    again = json.loads(runner.invoke(app, args).stdout)  # a temporary directory, removed
    assert again["results_sha256"] == doc["results_sha256"]
    late = json.loads(runner.invoke(app, [*args, "--target", "0.001"]).stdout)
    assert late["met"] is False
    bad = runner.invoke(app, ["bench", "sweep", "nope"])
    assert bad.exit_code == 2 and "unknown experiment 'nope'" in bad.stderr
    # a non-empty --out is refused before the run and left as it was
    kept = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert kept.exit_code == 2 and "is not empty" in kept.stderr
    assert (tmp_path / "a" / "results.json").read_bytes() == results


def burst_trace(path: Path, bursts: int = 44, per_burst: int = 10) -> str:
    """An SWF trace of short one-core jobs in bursts four hours apart (the cluster empties
    between them): 440 jobs, cut by ``--workers 2`` when a piece may have 200 jobs."""
    from merkat.workload.swf import empty_row, write_swf

    rows = []
    for b in range(bursts):
        for k in range(per_burst):
            row = empty_row()
            row[0], row[1], row[3] = len(rows) + 1, 4 * 3600 * b + 60 * k, 600 + 30 * k
            row[4] = row[7] = 1 + k % 3
            row[8], row[10] = 1200, 1
            rows.append(row)
    write_swf(path, {"MaxProcs": "8"}, rows)
    return str(path)


def test_market_run_on_two_workers_writes_the_same_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's ``--workers 2``, cut where the cluster is empty, writes the bytes of one
    process. The pieces' minimum size is lowered from 2,000 jobs to 200 (the choice of cuts
    is made in this process), so 440 jobs are cut in two (docs/testing.md)."""
    from merkat.worlds.merkat import parallel

    monkeypatch.setattr(parallel, "MIN_JOBS_PER_PIECE", 200)
    trace = burst_trace(tmp_path / "bursts.swf")
    flags = ["--scheduler", "market", "--hosts", "8", "--cores-per-host", "1"]
    code, out1, err = sim_run(trace, tmp_path / "w1", *flags, "--jobs", "440")
    assert code == 0, err
    code, out2, err = sim_run(trace, tmp_path / "w2", *flags, "--jobs", "440", "--workers", "2")
    assert code == 0, err
    assert (tmp_path / "w1" / "jobs.csv").read_bytes() == (tmp_path / "w2" / "jobs.csv").read_bytes()
    s1, s2 = json.loads(out1), json.loads(out2)
    assert s1["pieces"] == [] and len(s2["pieces"]) == 2  # cut in two, one piece per process
    assert s2["pieces"][0]["first_job"] == 0 and s2["pieces"][1]["last_job"] == 439
    assert s2["pieces"][1]["first_job"] == s2["pieces"][0]["last_job"] + 1
    timing = {"wall_s", "simulate_s", "jobs_per_s", "workers", "pieces"}
    assert {k: v for k, v in s1.items() if k not in timing} == {
        k: v for k, v in s2.items() if k not in timing
    }
    assert s1["jobs"] == 440 and s1["met_deadlines"] > 0 and s1["ledger_audit_ok"]


def test_workers_must_be_positive(trace: str, tmp_path: Path) -> None:
    code, _, err = sim_run(trace, tmp_path, "--scheduler", "market", "--workers", "0")
    assert code == 2 and "--workers must be an integer in [1, 1024], got 0" in err
    bad = runner.invoke(app, ["bench", "period", "--workers", "0", "--trace", trace])
    assert bad.exit_code == 2 and "--workers must be an integer in [1, 1024], got 0" in bad.stderr


def test_closed_economy_run_reports_its_books_and_each_jobs_outcome(
        trace: str, tmp_path: Path) -> None:
    code, out, err = sim_run(trace, tmp_path / "c", "--scheduler", "market", "--economy",
                             "closed", "--budget-base", "1", "--hosts", "240",
                             "--cores-per-host", "1")
    assert code == 0, err
    bank = json.loads(out)["bank"]
    assert bank["economy"] == "closed" and bank["audit_ok"] is True
    assert bank["minted"] == bank["initial_budgets"] > 0 and bank["burned"] == 0
    assert bank["negative_accounts"] == 0
    header = (tmp_path / "c" / "jobs.csv").read_text().splitlines()[0].split(",")
    assert header[-2:] == ["outcome", "paid"]
    rows = [line.split(",") for line in (tmp_path / "c" / "jobs.csv").read_text().splitlines()[1:]]
    outcomes = {r[-2] for r in rows}
    assert outcomes <= {"finished", "late", "stopped-deadline", "stopped-budget", "never-started"}
    assert sum(float(r[-1]) for r in rows) == pytest.approx(bank["balances"]["provider"]
                                                            + bank["redistributed"], abs=1e-3)
    code, _, err = sim_run(trace, tmp_path / "x", "--scheduler", "market", "--economy", "open")
    assert code == 2 and "--economy must be one of closed, themis" in err


def test_admission_flag_starts_jobs_between_periods_or_at_them(trace: str, tmp_path: Path) -> None:
    flags = ["--scheduler", "market", "--period", "600"]
    code, out, err = sim_run(trace, tmp_path / "a", *flags)
    assert code == 0, err
    assert json.loads(out)["admission_s"] == 10.0
    code, out, err = sim_run(trace, tmp_path / "p", *flags, "--admission", "0")
    assert code == 0, err
    assert json.loads(out)["admission_s"] is None
    between = read_jobs_csv(tmp_path / "a" / "jobs.csv")["start"]
    at_periods = read_jobs_csv(tmp_path / "p" / "jobs.csv")["start"]
    started = np.isfinite(at_periods)
    assert np.all(np.mod(at_periods[started], 600.0) == 0)  # the period boundaries only
    assert np.any(np.mod(between[np.isfinite(between)], 600.0) != 0)  # admitted mid-period
    code, _, err = sim_run(trace, tmp_path / "x", *flags, "--admission", "-5")
    assert code == 2 and "--admission must be in [0, 86400], got -5" in err


def test_bench_period_reference_is_the_fcfs_bench_of_its_own_minutes(trace: str) -> None:
    """``--reference`` adds the brief's reference run (``merkat bench sim --schedulers fcfs
    --repeat 5``) to the JSON; without it the object is as before (issue 28's keys)."""
    plain = json.loads(runner.invoke(app, ["bench", "period", "--jobs", "30",
                                           "--trace", trace]).stdout)
    assert "reference" not in plain
    r = runner.invoke(app, ["bench", "period", "--jobs", "30", "--trace", trace, "--reference"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    ref = doc.pop("reference")
    assert doc.keys() == plain.keys()
    assert (doc["met_deadlines"], doc["migrations"]) == (plain["met_deadlines"],
                                                         plain["migrations"])
    assert ref["command"] == "merkat bench sim --schedulers fcfs --repeat 5"
    assert isinstance(ref["fcfs_jobs_per_s"], int) and ref["fcfs_jobs_per_s"] > 10_000
    assert isinstance(ref["fcfs_jobs_per_cpu_s"], int) and ref["fcfs_jobs_per_cpu_s"] > 10_000
    sim = json.loads(runner.invoke(app, ["bench", "sim", "--schedulers", "fcfs",
                                         "--repeat", "1"]).stdout)
    assert sim["jobs"] > 200_000  # the reference's trace: the whole bundled HPC2N
    bad = runner.invoke(app, ["bench", "period", "--jobs", "10", "--trace", trace,
                              "--reference=yes"])
    assert bad.exit_code == 2 and "'--reference' does not take a value" in bad.stderr
    assert bad.stdout == ""
