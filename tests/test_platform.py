"""The scheduling period (renew, decide, clear, apply, charge, record) and the market in the
simulator, end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend, TaskFarm
from merkat.bank.memory import MemoryLedger
from merkat.core.backend import Plan, VMPlacement
from merkat.core.model import Observed
from merkat.core.period import MICRO, AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.trace import MarketConfig, simulate_market, summarize_market


def one_host(cores: float = 4.0, memory: float = 4096.0) -> Hosts:
    return Hosts(("h0",), np.array([[cores, memory]]))


def test_best_effort_apps_share_a_host_and_pay_their_bids() -> None:
    ledger = MemoryLedger()
    backend = SimBackend(trade_memory=False)
    platform = Platform(one_host(), period=60.0, reserve={"cpu": 0.01})
    driver = Driver(platform, backend, Economy(ledger))
    for k in range(2):
        driver.submit(
            AppSpec(
                id=f"a{k}",
                policy="best-effort",
                size=1,
                vm_size={"cpu": 4.0, "memory": 0.0},
                submit_time=0.0,
                budget=100.0,
                trade=("cpu",),
            ),
            RigidApp(vms=1, work_total=1e6, cpu=4.0),
        )
    rec = driver.step(0.0)
    assert rec.created == 2 and rec.running_apps == 2
    # Both start with the same bid: they split the 4 cores evenly.
    allocs = [vm.alloc["cpu"] for a in platform.apps.values() for vm in a.vms]
    assert allocs == pytest.approx([2.0, 2.0])
    # Each paid exactly its bid, to the provider; nothing was created or lost.
    paid = sum(a.spent for a in platform.apps.values())
    assert paid == rec.charged == ledger.balance("provider")
    bids = sum(vm.bid["cpu"] for a in platform.apps.values() for vm in a.vms)
    assert paid == pytest.approx(bids * MICRO, abs=2)
    audit = ledger.audit()
    assert audit.ok and audit.minted == 200 * MICRO
    assert rec.prices["cpu"] == pytest.approx(bids / 4.0)


def test_a_cpu_only_application_with_a_memory_size_does_not_fail_the_period() -> None:
    """A template trading only CPU but sizing memory (the live service's ``trade: [cpu]``)
    bids nothing for memory: the market must not refuse that bid as under the memory reserve,
    which failed every period for every application on the machine."""
    ledger = MemoryLedger()
    platform = Platform(one_host(), period=60.0, reserve={"cpu": 0.01, "memory": 0.01})
    driver = Driver(platform, SimBackend(trade_memory=True), Economy(ledger))
    for name, trade in (("cpu-only", ("cpu",)), ("both", ("cpu", "memory"))):
        driver.submit(AppSpec(id=name, policy="best-effort", size=1,
                              vm_size={"cpu": 4.0, "memory": 256.0},
                              vm_min={"cpu": 0.0, "memory": 64.0}, submit_time=0.0,
                              budget=100.0, trade=trade),
                      RigidApp(vms=1, work_total=1e6, cpu=4.0))
    rec = driver.step(0.0)
    assert rec.running_apps == 2
    cpu_only, both = platform.apps["cpu-only"].vms[0], platform.apps["both"].vms[0]
    assert set(cpu_only.bid) == {"cpu"} and set(cpu_only.alloc) == {"cpu"}
    assert cpu_only.alloc["cpu"] == pytest.approx(2.0)
    assert both.alloc == pytest.approx({"cpu": 2.0, "memory": 256.0})


def test_renewal_is_capped_at_the_initial_budget() -> None:
    ledger = MemoryLedger()
    backend = SimBackend(trade_memory=False)
    platform = Platform(one_host(), period=60.0, reserve={"cpu": 0.01})
    driver = Driver(platform, backend, Economy(ledger))
    driver.submit(
        AppSpec(
            id="a",
            policy="best-effort",
            size=1,
            vm_size={"cpu": 1.0},
            submit_time=0.0,
            budget=10.0,
            renewal=5.0,
            trade=("cpu",),
        ),
        RigidApp(vms=1, work_total=1e9, cpu=1.0),
    )
    for k in range(5):
        driver.step(60.0 * k)
        assert ledger.balance("app:a") <= 10 * MICRO
    # It pays its bid each period and gets it back through renewal (never above the cap).
    assert ledger.audit().ok


def test_lone_rigid_job_finishes_in_run_time_plus_boot() -> None:
    w = Workload.from_arrays(submit=[0.0], run=[3000.0], procs=[4], deadline_factor=[2.0])
    out = simulate_market(w, Cluster(4, 1, None), MarketConfig(period=300.0))
    assert out.finished.tolist() == [True]
    assert out.start[0] == 0.0
    assert out.end[0] == pytest.approx(3000.0 + 30.0)  # the 30 s boot, then full speed
    assert out.met[0] and out.value[0] == pytest.approx(60.0 / 2.0)
    assert out.audit_ok


def synthetic(n: int, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload.from_arrays(
        submit=np.sort(rng.uniform(0, 6 * 3600, n)),
        run=rng.uniform(600, 4 * 3600, n),
        procs=rng.integers(1, 9, n),
        memory=rng.uniform(100, 900, n),
        deadline_factor=rng.uniform(1.2, 10, n),
    )


@pytest.mark.parametrize("memory", [None, 2048.0])
def test_market_simulation_conserves_money_and_capacity(memory: float | None) -> None:
    w = synthetic(60, seed=1)
    cluster = Cluster(16, 2, memory)
    out = simulate_market(w, cluster, MarketConfig(period=300.0))
    assert out.audit_ok
    assert out.max_cores_allocated <= cluster.total_cores * (1 + 1e-9)
    for rec in out.records:
        assert rec.allocated["cpu"] <= rec.capacity["cpu"] * (1 + 1e-9)
        if memory is not None:
            assert rec.allocated["memory"] <= rec.capacity["memory"] * (1 + 1e-9)
    # Every job ended one way or another, and met deadlines carry their budget as value.
    assert (~np.isnan(out.end) | np.isnan(out.start)).all()
    assert out.value[out.met] == pytest.approx(w.budget[out.met])
    assert (out.value[~out.met] == 0).all()
    summary = summarize_market(w, out, cluster)
    assert summary["met_deadlines"] == int(out.met.sum()) and summary["ledger_audit_ok"]
    assert summary["boots"] == int(sum(w.procs[~np.isnan(out.start)])) + summary["resumes"] * 0


def test_market_simulation_is_deterministic() -> None:
    w = synthetic(40, seed=2)
    a = simulate_market(w, Cluster(8, 2, 2048.0), seed=3)
    b = simulate_market(w, Cluster(8, 2, 2048.0), seed=3)
    assert np.array_equal(a.end, b.end, equal_nan=True)
    assert a.counts == b.counts


def test_contention_deadline_strict_apps_give_up_before_their_deadline() -> None:
    # Three times more work than the cluster can do by the deadlines: some jobs must give up.
    w = Workload.from_arrays(
        submit=[0.0] * 12,
        run=[7200.0] * 12,
        procs=[2] * 12,
        deadline_factor=np.linspace(1.3, 3.0, 12),
    )
    out = simulate_market(w, Cluster(8, 1, None))
    assert out.audit_ok
    assert 0 < out.met.sum() < 12
    # A strict job that cannot make it stops (freeing its cores) before its deadline instead of
    # running late; one that still could at its last decision may miss by less than a period.
    stopped = ~out.met & ~out.finished
    late = ~out.met & out.finished
    assert stopped.sum() >= 2
    assert all("deadline can no longer be met" in out.reasons[k] for k in np.flatnonzero(stopped))
    assert (out.end[stopped] <= w.deadline[stopped]).all()
    assert (out.end[late] - w.deadline[late] < 300.0).all()
    assert all(out.reasons[k] == "finished" for k in np.flatnonzero(out.met))


def test_sim_backend_vm_operations() -> None:
    b = SimBackend(trade_memory=True, bandwidth=100.0)
    b.add_app("a", RigidApp(vms=2, work_total=1000.0, cpu=1.0, memory=500.0))
    b.apply(
        Plan(
            time=0.0,
            period=100.0,
            create=(VMPlacement("v1", "a", 0), VMPlacement("v2", "a", 1)),
            allocations={"v1": {"cpu": 1.0, "memory": 500.0}, "v2": {"cpu": 0.5, "memory": 250.0}},
        )
    )
    b.advance(0.0, 100.0)
    # Lock-step: the slowest VM sets the pace, 0.5 CPU x 0.5 memory = 0.25, after a 30 s boot.
    assert b.apps["a"].work_done == pytest.approx(0.25 * 70.0)
    b.apply(
        Plan(
            time=100.0,
            period=100.0,
            migrate=(("v2", 1, 0),),
            allocations={"v1": {"cpu": 1.0, "memory": 500.0}, "v2": {"cpu": 1.0, "memory": 500.0}},
        )
    )
    b.advance(100.0, 200.0)
    # Migration: 500 MiB at 100 MiB/s (one operation per host) = 5 s at 90 % speed.
    assert b.apps["a"].work_done == pytest.approx(17.5 + 100.0 * (1 - 0.1 * 5 / 100))
    assert b.counts["migration"] == 1 and b.counts["boot"] == 2


def test_sim_backend_advances_only_applications_that_can_progress() -> None:
    """A long trace leaves thousands of stopped applications behind: advancing must not visit
    the ones without VMs again and again (it did, and the full HPC2N run slowed down
    quadratically), yet an application that gets a VM again must progress. ``_live`` is the
    set of applications the next advance visits."""
    b = SimBackend(trade_memory=False, boot_s=0.0, resume_s=0.0)
    for k in range(50):
        b.add_app(f"a{k}", RigidApp(vms=1, work_total=1000.0))
    assert len(b._live) == 50
    b.advance(0.0, 100.0)
    assert all(m.last_rate is None for m in b.apps.values())
    assert len(b._live) == 0  # each seen once: no VM, no rate; then left alone
    b.apply(
        Plan(time=200.0, period=100.0, create=(VMPlacement("v", "a7", 0),),
             allocations={"v": {"cpu": 0.5}})
    )
    assert list(b._live) == ["a7"]
    b.advance(200.0, 300.0)
    assert b.apps["a7"].work_done == pytest.approx(50.0)
    assert not b._live and list(b._pace) == ["a7"]  # it goes on at its kept pace
    b.advance(300.0, 350.0)
    assert b.apps["a7"].work_done == pytest.approx(75.0)
    b.apply(Plan(time=350.0, period=100.0, suspend=("v",)))
    assert list(b._live) == ["a7"] and not b._pace  # its pace forgotten
    b.advance(350.0, 400.0)  # once more, to see it has no VM left: its rate is reset
    assert b.apps["a7"].last_rate is None and len(b._live) == 0
    b.advance(400.0, 500.0)
    assert b.apps["a7"].work_done == pytest.approx(75.0)


def test_submission_refuses_a_bad_vm_size_before_touching_the_bank() -> None:
    """Observations are no longer checked every period: their parts are checked once, at
    submission, and a refused application leaves no account behind."""
    ledger = MemoryLedger()
    platform = Platform(one_host())
    driver = Driver(platform, SimBackend(), Economy(ledger))
    spec = AppSpec(
        id="bad", policy="deadline-strict", size=1, vm_size={"cpu": math.nan, "memory": 1.0},
        submit_time=0.0, budget=10.0,
    )
    with pytest.raises(ValueError, match=r"'bad': vm_size\['cpu'\] must be a finite number"):
        driver.submit(spec, RigidApp(vms=1, work_total=1.0))
    assert not ledger.has_account("app:bad") and "bad" not in platform.apps
    with pytest.raises(ValueError, match=r"reserve\['cpu'\]"):
        Platform(one_host(), reserve={"cpu": -1.0})


def test_task_farm_workers_take_tasks_in_order() -> None:
    b = SimBackend(trade_memory=False, boot_s=0.0)
    farm = TaskFarm([50.0, 50.0, 50.0])
    b.add_app("f", farm)
    b.apply(
        Plan(
            time=0.0,
            period=100.0,
            create=(VMPlacement("w1", "f", 0), VMPlacement("w2", "f", 0)),
            allocations={"w1": {"cpu": 1.0}, "w2": {"cpu": 1.0}},
        )
    )
    b.advance(0.0, 100.0)
    assert farm.done == 3 and farm.finish_time == pytest.approx(100.0)
    assert not math.isnan(farm.finish_time)


def test_controllers_see_idle_workers_as_not_busy() -> None:
    ledger = MemoryLedger()
    backend = SimBackend(trade_memory=False, boot_s=0.0)
    platform = Platform(
        Hosts(("h0",), np.array([[4.0, 4096.0]])),
        period=60.0,
        reserve={"cpu": 0.01},
    )
    driver = Driver(platform, backend, Economy(ledger))
    driver.submit(
        AppSpec(
            id="farm",
            policy="best-effort",
            size=3,
            vm_size={"cpu": 1.0},
            submit_time=0.0,
            budget=100.0,
            trade=("cpu",),
        ),
        TaskFarm([30.0, 600.0, 600.0]),
    )
    driver.step(0.0)
    backend.advance(0.0, 60.0)  # the 30 s task is done; its worker has nothing left to take
    app = platform.apps["farm"]
    seen = Observed(backend.metrics("farm"), backend.idle("farm"))
    obs = platform.observe(app, 60.0, ledger.balance(app.account), seen)
    busy = {v.id: v.busy for v in obs.vms}
    assert sorted(busy.values()) == [False, True, True]
    assert backend.idle("farm") == {v for v, b in busy.items() if not b}


def test_market_simulation_pauses_the_garbage_collector_and_restores_it() -> None:
    import gc

    w = Workload.from_arrays(submit=[0.0], run=[600.0], procs=[1], deadline_factor=[5.0])
    cluster = Cluster(2, 1, None)
    assert gc.isenabled()
    out = simulate_market(w, cluster)
    assert gc.isenabled() and bool(out.met[0])
    gc.disable()
    try:
        simulate_market(w, cluster)
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
    with pytest.raises(ValueError):
        simulate_market(w, cluster, policies=["deadline-strict", "best-effort"])
    assert gc.isenabled()
