"""``merkat sim experiment``: the sweeps run, write readable files, and are reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.workload.traces import HPC2N, find_trace

runner = CliRunner()

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _needs_trace() -> None:
    try:
        find_trace(HPC2N)
    except FileNotFoundError as exc:  # pragma: no cover - CI has ../shared/traces
        pytest.skip(str(exc))


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["sim", "experiment", *args])
    return r.exit_code, r.stdout, r.stderr


def test_themis_fig5_schema_and_reproducibility(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    code, out, err = run("themis-fig5", "--out", str(a), "--jobs", "40", "--factors", "0.5")
    assert code == 0, err
    assert "efficiency vs FCFS" in out
    doc = json.loads((a / "results.json").read_text())
    assert doc["parameters"]["jobs"] == 40 and doc["parameters"]["interarrival_factors"] == [0.5]
    # Themis' own controllers by default, admitted every 10 s, no VM overheads (Themis' model)
    assert doc["parameters"]["policy"] == "vertical-deadline"
    assert doc["parameters"]["admission_s"] == 10.0
    assert doc["parameters"]["vm_overheads"].startswith("none")
    labels = {r["scheduler"] for r in doc["rows"]}
    assert labels == {"market", "fcfs", "edf"}
    for r in doc["rows"]:
        assert {"interarrival_factor", "scheduler", "met_deadlines_pct", "total_value"} <= r.keys()
        assert 0 <= r["met_deadlines_pct"] <= 100
    (eff,) = doc["efficiency"]
    by = {r["scheduler"]: r["total_value"] for r in doc["rows"]}
    assert eff["vs_fcfs"] == pytest.approx(by["market"] / by["fcfs"])
    assert eff["vs_edf"] == pytest.approx(by["market"] / by["edf"])
    market = next(r for r in doc["rows"] if r["scheduler"] == "market")
    assert market["ledger_audit_ok"] is True
    assert market["max_cores_allocated"] <= 240 * (1 + 1e-9)
    assert (a / "themis-fig5.png").stat().st_size > 10_000
    # Same inputs and seeds, another worker count: byte-identical results.
    code, _, err = run(
        "themis-fig5", "--out", str(b), "--jobs", "40", "--factors", "0.5", "--workers", "2"
    )
    assert code == 0, err
    assert (a / "results.json").read_bytes() == (b / "results.json").read_bytes()


def test_slo_fig2_and_fig3_run(tmp_path: Path) -> None:
    code, _, err = run(
        "slo-fig2", "--out", str(tmp_path / "f2"), "--jobs", "25", "--factors", "1.0"
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "f2" / "results.json").read_text())
    assert len(doc["rows"]) == 7
    random_runs = [r for r in doc["rows"] if "random" in r["scheduler"]]
    assert len(random_runs) == 3
    code, _, err = run(
        "slo-fig3", "--out", str(tmp_path / "f3"), "--jobs", "25", "--factors", "1.0"
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "f3" / "results.json").read_text())
    assert {r["scheduler"] for r in doc["rows"]} == {"CPU", "CPU+memory"}
    assert all("migrations_per_hour" in r for r in doc["rows"])


def test_slo_fig2_market_drf_compares_with_the_two_markets_and_drf(tmp_path: Path) -> None:
    code, out, err = run("slo-fig2", "--market", "drf", "--reading", "edf=kill",
                         "--out", str(tmp_path / "d"), "--jobs", "20", "--factors", "1.0")
    assert code == 0, err
    doc = json.loads((tmp_path / "d" / "results.json").read_text())
    assert doc["parameters"]["market"] == "drf"
    assert doc["parameters"]["readings"] == {"edf": "kill"}
    by = {r["scheduler"]: r for r in doc["rows"]}
    assert set(by) == {"two markets (CPU, memory)", "drf market (bundles)", "fcfs (2 GB/node)",
                       "edf (2 GB/node)"}
    for label in ("two markets (CPU, memory)", "drf market (bundles)"):
        assert by[label]["ledger_audit_ok"] is True
        assert by[label]["drf_gap"] >= 0 and by[label]["drf_periods"] > 0
    assert by["drf market (bundles)"]["migrations"] == 0
    (row,) = doc["drf"]
    assert row["drf_vs_two_markets"] == pytest.approx(
        by["drf market (bundles)"]["total_value"] / by["two markets (CPU, memory)"]["total_value"])
    assert "distance to DRF" in out and (tmp_path / "d" / "slo-fig2.png").stat().st_size > 10_000


def test_bad_experiment_input(tmp_path: Path) -> None:
    code, _, err = run("no-such", "--out", str(tmp_path))
    assert code == 2 and "unknown experiment 'no-such'" in err
    code, _, err = run("themis-fig5", "--out", str(tmp_path), "--factors", "0.5,abc")
    assert code == 2 and "--factors" in err


def test_sweep_on_a_dask_cluster_matches_the_local_pool(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    from merkat.experiments import run_experiment

    local = run_experiment("themis-fig5", tmp_path / "local", jobs=20, factors=(1.0,))
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        remote = run_experiment(
            "themis-fig5",
            tmp_path / "dask",
            jobs=20,
            factors=(1.0,),
            dask=cluster.scheduler_address,
        )
    assert remote["rows"] == local["rows"] and remote["efficiency"] == local["efficiency"]


def test_batch_jobs_partial_work_is_counted_at_the_deadline() -> None:
    import numpy as np

    from merkat.experiments import baseline_work_at_deadline
    from merkat.workload.jobs import Workload

    w = Workload.from_arrays(
        submit=[0.0, 0.0, 0.0],
        run=[100.0, 100.0, 100.0],
        procs=[1, 1, 1],
        deadline_factor=[2.0, 2.0, 2.0],
    )
    # Deadline 200: started at 0 (all done), at 150 (half done), at 250 (nothing done).
    frac = baseline_work_at_deadline(w, np.array([0.0, 150.0, 250.0]))
    assert frac.tolist() == [1.0, 0.5, 0.0]
