"""The ablation readings of themis-fig5 (docs/experiments.md, issue 29 disagreement 1): the
market runs' period (``--period``) and VM-operation cost model (``--vm-costs``) replace the
defaults, are recorded in results.json, and are refused where the market is fixed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.experiments.common import VM_COSTS, Run, execute

runner = CliRunner()


def test_vm_cost_readings() -> None:
    assert VM_COSTS["themis"] == {"boot_s": 0.0, "resume_s": 0.0, "migration_overhead": 0.10}
    assert VM_COSTS["slo"]["boot_s"] == 30.0 and VM_COSTS["none"]["migration_overhead"] == 0.0


@pytest.mark.slow
def test_period_and_vm_costs_change_the_market_runs_and_are_recorded(tmp_path: Path) -> None:
    from merkat.experiments import run_experiment

    doc = run_experiment("themis-fig5", tmp_path / "t", jobs=10, factors=(0.5,),
                         period=600.0, vm_costs="slo")
    p = doc["parameters"]
    assert p["period_s"] == 600.0
    assert p["vm_costs"] == {"reading": "slo", "boot_s": 30.0, "resume_s": 30.0,
                             "migration_overhead": 0.10}
    market = [r for r in doc["runs"] if r["scheduler"] == "market"]
    default = execute(Run("market", "market", 0.5, 0, 240, 1, jobs=10,
                          policy="vertical-deadline", boot_s=0.0, resume_s=0.0))
    # the same jobs over twice the period: fewer periods (the run is the same span of time)
    assert market[0]["periods"] < default["periods"]


def test_readings_are_refused_where_the_market_is_part_of_the_setup(tmp_path: Path) -> None:
    for extra in (["--period", "60"], ["--vm-costs", "slo"]):
        r = runner.invoke(app, ["sim", "experiment", "merkat-fig6", "--out",
                                str(tmp_path / "x"), *extra])
        assert r.exit_code == 2 and extra[0] in r.stderr and "does not take it" in r.stderr
    r = runner.invoke(app, ["sim", "experiment", "themis-fig5", "--out", str(tmp_path / "y"),
                            "--vm-costs", "free"])
    assert r.exit_code == 2 and "--vm-costs must be one of none, themis, slo" in r.stderr
    r = runner.invoke(app, ["sim", "experiment", "themis-fig5", "--out", str(tmp_path / "z"),
                            "--period", "0"])
    assert r.exit_code == 2 and "--period must be in [1, 86400]" in r.stderr


def test_run_experiment_checks_the_readings(tmp_path: Path) -> None:
    from merkat.experiments import run_experiment

    with pytest.raises(ValueError, match="--vm-costs must be one of"):
        run_experiment("themis-fig5", tmp_path / "a", vm_costs="cheap")
    with pytest.raises(ValueError, match="does not take --period"):
        run_experiment("merkat-fig6", tmp_path / "b", period=60.0)


def test_satisfaction_readings_change_the_deadlines_or_the_baselines_boot() -> None:
    from merkat.experiments.common import ScenarioRun
    from merkat.experiments.satisfaction import satisfaction_workload
    from merkat.experiments.satisfaction_readings import READINGS, reading_run

    assert set(READINGS) == {"paper", "boot-both", "tight", "tight+boot"}
    tight = satisfaction_workload(0, 0.25, READINGS["tight"]["deadline_factor"])
    paper = satisfaction_workload(0, 0.25)
    assert tight.deadline_factor.min() >= 1.2 and tight.deadline_factor.max() <= 3.0
    assert paper.deadline_factor.max() > 3.0
    assert (tight.submit == paper.submit).all() and (tight.run == paper.run).all()
    rows = {r: reading_run(ScenarioRun(f"{r}/easy", 0, 0.25, "easy"))
            for r in ("paper", "boot-both", "tight", "tight+boot")}
    # 30 s more per batch job, same deadlines: never more deadlines met
    assert rows["boot-both"]["met_deadlines"] <= rows["paper"]["met_deadlines"]
    assert rows["tight+boot"]["met_deadlines"] <= rows["tight"]["met_deadlines"]
    assert rows["tight"]["met_deadlines"] < rows["paper"]["met_deadlines"]
    assert all(r["jobs"] == 30 and r["reading"] == k for k, r in rows.items())
