"""Issue 6's experiments: the controllers adapt, the scenario models behave, runs reproduce.

Each behavioural test runs the experiment's own scenario (the same code as the CLI) and checks
what the paper claims *and* what would break if the policies stopped adapting.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.backends.sim import SimBackend, TaskFarm
from merkat.cli import app
from merkat.control.framework import FrameworkHorizontal
from merkat.control.types import Sense
from merkat.core.backend import Plan, VMPlacement
from merkat.experiments import EXPERIMENTS
from merkat.experiments.common import ScenarioRun
from merkat.experiments.merkat import (
    MERKAT6,
    MERKAT7,
    merkat6_scenario,
    merkat7_scenario,
    merkat_fig6,
    merkat_fig7,
)
from merkat.experiments.satisfaction import (
    SATISFACTION,
    merkat_satisfaction_run,
    satisfaction_workload,
)
from merkat.experiments.themis import THEMIS6, themis_fig6
from merkat.worlds.merkat.scenarios import (
    BatchQueue,
    IterativeApp,
    QueueFarm,
    Scenario,
    spec,
)

NAMES = ("themis-fig6", "merkat-fig6", "merkat-satisfaction", "merkat-fig7")


def test_registered_once_each() -> None:
    for name in NAMES:
        exp = EXPERIMENTS[name]
        assert exp.sweeps_load is False
        assert exp.parameters  # every parameter named in results.json


# --- models and the driver ------------------------------------------------------------------------


def test_iterative_app_metric_is_iteration_time_against_time_left_per_iteration() -> None:
    """Decision: Merkat's reference is (deadline - now) / iterations left, re-evaluated every
    period; the metric is the ideal iteration time over the speed of the last period."""
    a = IterativeApp(vms=1, work_total=3000.0, cpu=4.0, iteration=30.0, deadline=6000.0)
    assert a.metrics().performance is None  # before the first period: hold
    a.work_done, a.last_rate, a.clock = 1500.0, 0.5, 1000.0
    m = a.metrics()
    assert m.sense is Sense.LOWER_IS_BETTER
    assert m.performance == pytest.approx(60.0)  # 30 s at half speed
    assert m.reference == pytest.approx((6000.0 - 1000.0) / 50)  # 50 iterations left
    a.last_rate = 0.0
    assert math.isinf(a.metrics().performance or 0.0)
    a.clock = 7000.0
    assert a.metrics().reference == 0.0  # deadline passed: any iteration is too slow


def test_queue_farm_metric_counts_only_queued_tasks() -> None:
    f = QueueFarm([10.0] * 5, threshold=3.0)
    f.running["vm1"] = [10.0, 10.0]
    f.queue.popleft()
    m = f.metrics()
    assert (m.performance, m.reference) == (4.0, 3.0)


def _batch_backend(q: BatchQueue, vms: int, at: float = 0.0) -> SimBackend:
    b = SimBackend(boot_s=0.0)
    b.add_app("t", q)
    b.apply(Plan(time=at, period=40.0,
                 create=tuple(VMPlacement(f"t/vm{i}", "t", 0) for i in range(vms)),
                 allocations={f"t/vm{i}": {"cpu": 1.0} for i in range(vms)}))
    return b


def test_batch_queue_is_fcfs_lock_step_and_restarts_interrupted_jobs() -> None:
    # job 0 needs 3 VMs; job 1 (1 VM) arrives later and must not overtake it (no backfilling)
    q = BatchQueue(submit=[0.0, 5.0], procs=[3, 1], run=[100.0, 10.0])
    b = _batch_backend(q, 2)
    b.advance(0.0, 40.0)
    assert not q.running and q.queue == [0, 1]
    assert q.total_wait(40.0) == pytest.approx(40.0 + 35.0)
    b = _batch_backend(q, 3, at=40.0)
    b.advance(40.0, 80.0)
    assert list(q.running) == [0] and q.queue == [1]
    left = q.running[0].left
    assert left == pytest.approx(60.0)
    b.apply(Plan(time=80.0, period=40.0, destroy=("t/vm0",)))  # a worker is released
    assert not q.running and q.queue == [0, 1]  # restarted, at the head of the queue
    assert q.jobs[0].left == 100.0 and q.jobs[0].restarts == 1
    assert b.finished("t") is False


def test_batch_queue_vm_can_migrate() -> None:
    q = BatchQueue(submit=[0.0], procs=[1], run=[100.0], memory=900.0)
    b = _batch_backend(q, 1)
    b.apply(Plan(time=0.0, period=40.0, allocations={"t/vm0": {"cpu": 1.0, "memory": 900.0}}))
    b.advance(0.0, 40.0)
    assert q.running[0].left == pytest.approx(60.0)
    b.apply(Plan(time=40.0, period=40.0, migrate=(("t/vm0", 0, 1),),
                 allocations={"t/vm0": {"cpu": 1.0, "memory": 900.0}}))
    assert b.counts["migration"] == 1 and b.vms["t/vm0"].host == 1
    b.advance(40.0, 80.0)
    # 900 MiB at 125 MiB/s: 7.2 s at 90 % speed, the job keeps running on its new host
    assert list(q.running) == [0]
    assert q.running[0].left == pytest.approx(60.0 - (40.0 - 0.1 * 7.2))


def test_framework_keeps_busy_workers_and_releases_idle_ones_after_keep_idle() -> None:
    sc = Scenario(hosts=1, cores=8, period=40.0, reserve=1.0)
    farm = QueueFarm([4000.0] * 2, threshold=10.0)  # 2 long tasks: queue empty at once
    sc.add(spec("c", "framework-horizontal", size=4, budget=100.0, renewal=100.0), farm,
           FrameworkHorizontal(keep_idle=120.0))
    res = sc.run(400.0)
    vms = res.series["c"]["vms"]
    assert vms[0] == 4
    assert min(vms) >= 2  # the two busy workers are never released
    assert vms[-1] < 4  # idle ones go once idle for 120 s


# --- themis-fig6 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def themis() -> dict:
    return themis_fig6(ScenarioRun("elastic", 0))


def test_themis_fig6_vm_count_rises_within_three_periods_of_the_burst(themis: dict) -> None:
    vms = themis["series"]["vms"]
    b = math.ceil(THEMIS6["burst_at_s"] / THEMIS6["period_s"])
    assert max(vms[b:b + 3]) > vms[b - 1]
    assert themis["periods_to_first_rise_after_burst"] <= 3


def test_themis_fig6_shape(themis: dict) -> None:
    vms = themis["series"]["vms"]
    before, after = themis["vms_plateau_before_burst"], themis["vms_equilibrium_after_burst"]
    # Paper: ~44 then ~116. The bound (n-1)·T_avg/k + T_max with 0.75/1.0 thresholds puts
    # the first plateau between 37 and 50 VMs and the second about 2.3 times higher.
    assert 30 <= before <= 60
    assert 1.8 * before <= after <= 160
    assert themis["deadline_met"]
    # idle VMs are released at the end: the count falls from its peak before the last period
    end = max(k for k, v in enumerate(vms) if v > 0)
    assert vms[end] < themis["vms_peak"] * 0.7
    assert themis["ledger_audit_ok"]


# --- merkat-fig6 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fig6() -> dict[float, dict]:
    return {d: merkat_fig6(ScenarioRun(f"{d}", 0, d)) for d in MERKAT6["deadlines_min"]}


@pytest.mark.parametrize("deadline", MERKAT6["deadlines_min"])
def test_merkat_fig6_bid_rises_when_best_effort_applications_arrive(
    fig6: dict[float, dict], deadline: float
) -> None:
    r = fig6[deadline]
    s = r["series"]
    last_arrival = max(r["best_effort_arrivals_s"]) / 60
    after = [b for t, b, st in zip(s["time_min"], s["bid_cpu"], s["alloc_cpu"], strict=True)
             if t > last_arrival + 5 and b is not None and st]
    assert min(after) > 1.5 * r["bid_before_best_effort"]


@pytest.mark.parametrize("deadline", [200.0, 150.0])
def test_merkat_fig6_final_iteration_time_within_10pct_of_reference(
    fig6: dict[float, dict], deadline: float
) -> None:
    r = fig6[deadline]
    assert abs(r["iteration_final_error"]) <= 0.10
    assert r["iteration_mean_abs_error_settled"] <= 0.10
    assert r["deadline_met"]


def test_merkat_fig6_shorter_deadline_pays_more_and_gets_more_cpu(
    fig6: dict[float, dict]
) -> None:
    d200, d150, d100 = (fig6[d] for d in (200.0, 150.0, 100.0))
    assert d200["bid_final"] < d150["bid_final"] < d100["bid_final"]
    assert d200["alloc_final_cores"] < d150["alloc_final_cores"] < d100["alloc_final_cores"]
    assert d100["bid_final"] > 5 * d200["bid_final"]  # "much higher"
    # just enough: the 200-min run uses far less than the node once the others are there
    assert d200["alloc_final_cores"] < 0.5 * MERKAT6["cores_per_host"]


def test_merkat_fig6_without_adaptation_misses_the_tight_deadline() -> None:
    """The counterfactual: the same application bidding its start bid forever (best-effort)
    is too slow for 150 min, so the adaptation is what meets the deadline."""
    sc, _ = merkat6_scenario(150.0, policy="best-effort", params={"start_fraction": 0.75})
    res = sc.run(150 * 60 + 40)
    finish = res.apps["slo"]["finish_s"]
    assert finish is None or finish > 150 * 60


# --- merkat-fig7 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fig7() -> dict:
    return merkat_fig7(ScenarioRun("two frameworks", 0))


def test_merkat_fig7_bag_uses_more_than_half_while_the_other_is_idle(fig7: dict) -> None:
    half = MERKAT7["hosts"] * MERKAT7["cores_per_host"] // 2
    assert fig7["condor_max_vms_alone"] > half
    assert fig7["max_total_vms"] <= fig7["capacity_vms"]
    assert fig7["ledger_audit_ok"]


def test_merkat_fig7_torque_follows_its_queue(fig7: dict) -> None:
    s = fig7["series"]
    q, v = s["torque_queued_procs"], s["torque_vms"]
    peak = int(np.argmax(q))
    assert q[peak] > 0
    later = v[peak:peak + 40]
    assert max(later) > v[peak]  # it provisions after its queue grows
    top = int(np.argmax(v))
    alive = [x for x in v[top:] if x > 0]
    assert min(alive) < max(v) / 2  # and lets idle workers go once the queue is empty


def test_merkat_fig7_gaussian_tasks_and_lublin_jobs() -> None:
    """Decision: the bag's durations are N(300 s, 60 s) truncated at 1 s; Torque's jobs are the
    first 33 Lublin jobs of <= 8 processes, arrivals x0.1 and run times x0.3 (>= 60 s)."""
    sc = merkat7_scenario(0)
    condor = sc.models["condor"]
    torque = sc.models["torque"]
    assert isinstance(condor, TaskFarm) and isinstance(torque, BatchQueue)
    d = np.array(condor.tasks)
    assert len(d) == MERKAT7["condor_tasks"]
    assert abs(d.mean() - 300.0) < 5 and abs(d.std() - 60.0) < 5 and d.min() >= 1.0
    assert len(torque.jobs) == 33
    assert all(1 <= j.procs <= 8 and j.run >= 60.0 for j in torque.jobs)
    assert min(j.submit for j in torque.jobs) == MERKAT7["torque_first_arrival_s"]


# --- merkat-satisfaction -----------------------------------------------------------------------------


def test_satisfaction_workload_follows_the_decisions() -> None:
    w = satisfaction_workload(0, 0.5)
    assert len(w) == SATISFACTION["jobs"]
    assert w.procs.min() >= 1 and w.procs.max() <= 8
    assert w.run.min() >= SATISFACTION["run_floor_s"]
    x = w.deadline_factor
    assert np.all((x >= 1.2) & (x <= 10.0))
    np.testing.assert_allclose(w.budget, 60.0 / x)  # inversely proportional to the deadline
    np.testing.assert_allclose(w.deadline, w.submit + x * w.run)
    w2 = satisfaction_workload(0, 1.0)
    np.testing.assert_allclose(w2.submit, 2 * w.submit)


def test_satisfaction_market_beats_easy_under_load() -> None:
    m = merkat_satisfaction_run(ScenarioRun("market", 0, 0.5, "market"))
    e = merkat_satisfaction_run(ScenarioRun("easy", 0, 0.5, "easy"))
    assert m["ledger_audit_ok"]
    assert e["met_deadlines"] < 30  # the load is real: the batch scheduler misses some
    assert m["satisfaction"] > e["satisfaction"]
    assert m["met_deadlines"] >= e["met_deadlines"]
    total = float(satisfaction_workload(0, 0.5).budget.sum())
    for r in (m, e):  # ±B per job
        assert abs(r["satisfaction"]) <= total * (1 + 1e-12)


# --- the CLI ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["themis-fig6", "merkat-fig6", "merkat-fig7"])
def test_cli_writes_files_and_reproduces_bytes(tmp_path: Path, name: str) -> None:
    runner = CliRunner()
    outs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        r = runner.invoke(app, ["sim", "experiment", name, "--out", str(out)])
        assert r.exit_code == 0, r.stderr
        assert "| figure |" in r.stdout or "| deadline (min) |" in r.stdout
        outs.append(out)
    a, b = ((o / "results.json").read_bytes() for o in outs)
    assert a == b
    doc = json.loads(a)
    assert doc["experiment"] == name and doc["parameters"]["seeds"] == 1
    assert (outs[0] / f"{name}.png").stat().st_size > 10_000
    assert (outs[0] / "results.md").read_text().startswith("# ")
