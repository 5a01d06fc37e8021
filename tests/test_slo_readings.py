"""The SLO paper's readings (issue 29, disagreement 2): options of slo-fig2/3, the ablation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.experiments import EXPERIMENTS, slo_ablation
from merkat.experiments.common import Run, execute
from merkat.experiments.readings import (
    DAMPED,
    EdfKill,
    apply_readings,
    parse_readings,
)
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.batch.baselines import schedule
from merkat.worlds.batch.engine import simulate

runner = CliRunner()


def _three_jobs() -> Workload:
    # one core; all submitted at 0, 10 s each; deadlines 100, 12 and 15
    return Workload.from_arrays([0.0, 0.0, 0.0], [10.0, 10.0, 10.0], [1, 1, 1],
                                deadline_factor=[10.0, 1.2, 1.5])


def test_edf_runs_a_hopeless_job_late_and_edf_kill_discards_it() -> None:
    w, c = _three_jobs(), Cluster.pool(1)
    plain = schedule(w, c, "edf")
    assert plain.start.tolist() == [20.0, 0.0, 10.0]  # job 3 ends at 20, 5 s late
    kill = simulate(w, c, EdfKill())
    assert kill.start[1] == 0.0 and kill.start[0] == 10.0  # job 1 moves up by 10 s
    assert math.isnan(kill.start[2]) and math.isnan(kill.end[2])  # never started


def test_parse_readings_names_the_key_or_the_value() -> None:
    assert parse_readings(["edf=kill", "value=tasks"]) == {"edf": "kill", "value": "tasks"}
    with pytest.raises(ValueError, match="unknown key 'speed'; known: edf, value"):
        parse_readings(["speed=fast"])
    with pytest.raises(ValueError, match="--reading edf: must be one of run, kill, got 'drop'"):
        parse_readings(["edf=drop"])
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_readings(["edf"])


def test_readings_change_only_the_runs_they_are_about() -> None:
    base: dict[str, Any] = {"hosts": 2, "cores_per_host": 2}
    market = Run("m", "market", 1.0, 0, policy_params=(("low", 0.5),), **base)
    edf = Run("e", "edf", 1.0, 0, **base)
    fcfs = Run("f", "fcfs", 1.0, 0, **base)
    readings = {"edf": "kill", "overheads": "none", "suspend": "damped", "value": "tasks"}
    m = apply_readings(market, readings, True)
    assert (m.boot_s, m.resume_s, m.late, m.value_unit) == (0.0, 0.0, "run", "tasks")
    assert dict(m.policy_params) == {"low": 0.5, **dict(DAMPED)}
    e = apply_readings(edf, readings, False)
    assert (e.late, e.boot_s, e.policy_params, e.value_unit) == ("kill", 30.0, (), "tasks")
    assert apply_readings(fcfs, readings, False).late == "run"  # only EDF kills
    assert apply_readings(market, {}, True) == market
    killing = Run("e", "edf", 1.0, 0, late="kill", **base)
    assert apply_readings(killing, {"edf": "run"}, False).late == "run"  # back to run late


def test_slo_fig2_edf_discards_hopeless_jobs_by_default() -> None:
    runs = EXPERIMENTS["slo-fig2"].runs(1, 10, (1.0,))
    edf = [r for r in runs if r.scheduler == "edf"]
    assert len(edf) == 2 and {r.late for r in edf} == {"kill"}
    assert {r.late for r in runs if r.scheduler != "edf"} == {"run"}
    assert {r.late for r in EXPERIMENTS["themis-fig5"].runs(1, 10, (1.0,))} == {"run"}


def test_value_tasks_weighs_each_job_by_its_tasks() -> None:
    run = Run("e", "edf", 1.0, 0, hosts=120, cores_per_host=2, memory_per_host=2048.0, jobs=30)
    job, tasks = execute(run), execute(Run(**{**run.__dict__, "value_unit": "tasks"}))
    assert job["_value_tasks"] == tasks["total_value"] == tasks["_value_tasks"]
    assert tasks["total_value"] > job["total_value"] > 0  # some jobs have several tasks


def _fake_rows(seeds: int, factors: tuple[float, ...],
               value: dict[tuple[str, float], float]) -> list[dict[str, Any]]:
    rows = []
    for run in slo_ablation._runs(seeds, 10, factors):
        series = run.label.split("|")[0]
        v = value[(series, run.factor)]
        rows.append({"label": run.label, "interarrival_factor": run.factor, "seed": run.seed,
                     "total_value": v, "value_tasks": 2 * v,
                     "suspend_resume_per_hour": 10.0 * run.factor})
    return rows


def test_ablation_derive_judges_each_claim_per_reading() -> None:
    # the paper's shape: behind EDF at 0.1, ahead at 1.0; the mix below strict; operations
    # (10 x factor) fewer at high load
    value = {("market", 0.1): 80.0, ("edf", 0.1): 100.0, ("market", 1.0): 120.0,
             ("edf", 1.0): 100.0, ("market, random policies", 0.1): 70.0,
             ("market, random policies", 1.0): 110.0, ("edf, random policies", 0.1): 1.0,
             ("edf, random policies", 1.0): 1.0}
    doc = slo_ablation._derive(_fake_rows(3, (0.1, 1.0), value))
    assert len(doc["ablation"]) == 2 * len(slo_ablation.ROWS)
    first = doc["ablation"][0]
    assert first["reading"] == "as built" and first["vs_edf"]["per_seed"] == [0.8, 0.8, 0.8]
    assert first["mix_vs_strict"]["mean"] == pytest.approx(70 / 80)
    assert all(v["edf_loss_grows"] and v["ahead_at_light_load"] and v["mix_degrades"]
               and v["ops_fall_with_load"] for v in doc["verdicts"])
    assert "| as built | 0.1 | 0.80 [0.80, 0.80, 0.80] | 0.88 [0.88, 0.88, 0.88] |" \
        in doc["markdown"]
    # ours: ahead of EDF at high load -> the trend is not reproduced
    value[("market", 0.1)] = 150.0
    doc = slo_ablation._derive(_fake_rows(3, (0.1, 1.0), value))
    assert not any(v["edf_loss_grows"] for v in doc["verdicts"])
    assert all(v["ahead_at_light_load"] for v in doc["verdicts"])
    # behind EDF at light load too: the trend holds, the light-load lead does not
    value[("market", 0.1)], value[("market", 1.0)] = 50.0, 90.0
    doc = slo_ablation._derive(_fake_rows(3, (0.1, 1.0), value))
    assert all(v["edf_loss_grows"] and not v["ahead_at_light_load"] for v in doc["verdicts"])
    assert "| as built | reproduced | no | no | reproduced |" in doc["markdown"]  # 110 > 90


def test_ablation_shares_the_runs_a_reading_does_not_change() -> None:
    runs = slo_ablation._runs(1, 10, (0.5,))
    labels = sorted(r.label for r in runs)
    # market: 2 series x (paper|none overheads) x (eager|damped); EDF: 2 series x (run|kill)
    assert len(runs) == len(set(labels)) == 2 * 4 + 2 * 2
    assert EXPERIMENTS["slo-ablation"].default_factors == (0.1, 1.0)
    kill = [r for r in runs if r.label.endswith("edf=kill")]
    assert {r.late for r in kill} == {"kill"} and {r.scheduler for r in kill} == {"edf"}


@pytest.mark.parametrize(("args", "message"), [
    (["slo-fig2", "--reading", "edf=drop"], "--reading edf: must be one of run, kill"),
    (["themis-fig5", "--reading", "edf=kill"], "experiment 'themis-fig5' takes no readings"),
    (["themis-fig5", "--market", "drf"], "--market: experiment 'themis-fig5' takes no other"),
    (["slo-fig2", "--market", "tycoon"], "--market: experiment 'slo-fig2' takes drf, got"),
])
def test_bad_reading_or_market_is_one_line_exit_2(args: list[str], message: str,
                                                  tmp_path: Any) -> None:
    r = runner.invoke(app, ["sim", "experiment", *args, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_baseline_work_at_deadline_of_a_job_never_started_is_zero() -> None:
    from merkat.experiments.common import baseline_work_at_deadline

    w = _three_jobs()
    done = baseline_work_at_deadline(w, np.array([0.0, np.nan, 10.0]))
    assert done.tolist() == [1.0, 0.0, 0.5]
