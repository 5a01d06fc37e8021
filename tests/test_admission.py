"""Admission between periods (Merkat §4.2.2; merkat.core.admission, Driver.admit_between):
an application submitted mid-period starts at the next admission point, placed by worst-fit
beside the running VMs (which stay where they are) with each host's share recomputed, pays
for the rest of the period only, and waits for the next period when its VMs cannot all be
placed or the mechanism is stateful."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.types import AppStatus
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.trace import MarketConfig, simulate_market

PERIOD = 60.0


def spec(app_id: str, submit: float, size: int = 1, budget: float = 100.0,
         memory_min: float = 0.0) -> AppSpec:
    return AppSpec(id=app_id, policy="best-effort", size=size, vm_size={"cpu": 1.0},
                   submit_time=submit, budget=budget, trade=("cpu",), owner="alice",
                   vm_min={"memory": memory_min} if memory_min else {})


def world(arrivals: list[tuple[AppSpec, float]], *, admission: float | None = 10.0,
          market: str = "proportional-share", charging: str = "bid",
          cpus: float = 4.0) -> tuple[Driver, SimBackend, MemoryLedger]:
    ledger = MemoryLedger()
    backend = SimBackend(trade_memory=False, boot_s=0.0)
    platform = Platform(Hosts(("h0",), np.array([[cpus, 4096.0]])), period=PERIOD,
                        reserve={"cpu": 0.01}, market=market)
    items = [Arrival(s.submit_time, s, RigidApp(vms=s.size, work_total=work)) for s, work in
             arrivals]
    driver = Driver(platform, backend, Economy(ledger, charging=charging),
                    ListArrivals(items), admission=admission)
    return driver, backend, ledger


def test_a_mid_period_arrival_starts_at_the_next_admission_point() -> None:
    d, backend, _ = world([(spec("a", 0.0), 1e6), (spec("b", 25.0), 1e6)])
    d.admit_due(0.0)
    d.step(0.0)
    # b: submitted at 25, admitted at 30 (the world advanced there first)
    assert d.admit_between(0.0, PERIOD) == 30.0
    b = d.platform.apps["b"]
    assert b.status is AppStatus.RUNNING and b.start_time == 30.0
    assert "b/vm1" in backend.vms
    # beside a, which is capped at its VM size (1 CPU of 4): both get their 1 CPU
    assert b.vms[0].host == 0 and b.vms[0].alloc["cpu"] == pytest.approx(1.0)
    assert backend.vms["b/vm1"].alloc["cpu"] == pytest.approx(1.0)
    assert d.platform.queue == []


def test_an_admission_pays_for_the_rest_of_the_period_only() -> None:
    d, _, ledger = world([(spec("a", 0.0), 1e6), (spec("b", 25.0), 1e6)])
    d.admit_due(0.0)
    d.step(0.0)
    paid_a = d.platform.apps["a"].spent
    d.admit_between(0.0, PERIOD)
    b = d.platform.apps["b"]
    # the same controller bids what a bids; from 30 to 60 is half the period
    assert paid_a > 0 and b.spent == round(paid_a * 30.0 / PERIOD)
    assert ledger.audit().ok
    assert ledger.balance(b.account) == 100_000_000 - b.spent


def test_an_application_whose_vms_cannot_all_be_placed_waits_for_the_period() -> None:
    # each VM must hold 1,500 MiB of the host's 4,096: a's two leave room for one more, not two
    d, backend, ledger = world([(spec("a", 0.0, size=2, memory_min=1500), 1e6),
                                (spec("b", 25.0, size=2, memory_min=1500), 1e6)])
    d.admit_due(0.0)
    d.step(0.0)
    assert d.admit_between(0.0, PERIOD) == 0.0  # nothing started: the world was not advanced
    b = d.platform.apps["b"]
    assert b.status is AppStatus.WAITING and b.vms == [] and b.spent == 0
    assert not any(v.startswith("b/") for v in backend.vms)
    assert ledger.balance(b.account) == 100_000_000
    assert d.platform.queue == [] and d.platform.queued() == []


def test_a_stateful_mechanism_admits_at_period_boundaries_only() -> None:
    d, _, _ = world([(spec("a", 0.0), 1e6), (spec("b", 25.0), 1e6)], market="posted")
    assert not d.platform.admits_between and not d.admits_between
    d.run(until=2 * PERIOD)
    assert d.platform.apps["b"].start_time == PERIOD


@pytest.mark.parametrize(("admission", "start"), [(10.0, 30.0), (None, 60.0), (60.0, 60.0)])
def test_the_run_loop_admits_between_periods_when_configured(admission: float | None,
                                                             start: float) -> None:
    d, _, _ = world([(spec("a", 0.0), 1e6), (spec("b", 25.0), 1e6)], admission=admission)
    d.run(until=3 * PERIOD)
    assert d.platform.apps["b"].start_time == start


def test_an_idle_platform_jumps_to_the_period_of_the_next_arrival() -> None:
    d, _, _ = world([(spec("a", 1000.0), 1e6)])
    d.run(until=1100.0)
    a = d.platform.apps["a"]
    assert a.start_time == 1000.0  # 1000 is an admission point of the period [960, 1020)
    assert d.platform.records[0].time == 1020.0  # no period ran while nothing was active


@settings(max_examples=20, deadline=None)
@given(
    submits=st.lists(st.floats(0.0, 300.0), min_size=1, max_size=6),
    sizes=st.lists(st.integers(1, 3), min_size=6, max_size=6),
    charging=st.sampled_from(["bid", "use"]),
)
def test_admissions_conserve_money_and_capacity(submits: list[float], sizes: list[int],
                                                charging: str) -> None:
    arrivals = [(spec(f"a{k}", t, size=sizes[k], budget=20.0), 200.0)
                for k, t in enumerate(sorted(submits))]
    d, _, ledger = world(arrivals, charging=charging)
    d.run(until=600.0)
    assert ledger.audit().ok
    assert all(v >= 0 for v in ledger.balances().values())
    spent = sum(a.spent for a in d.platform.apps.values())
    assert spent == sum(20_000_000 - ledger.balance(a.account) for a in d.platform.apps.values()
                        if a.account in ledger.balances())
    used = sum(vm.alloc.get("cpu", 0.0) for vm in d.backend.vms.values())  # type: ignore[attr-defined]
    assert used <= 4.0 + 1e-9


def test_trace_runs_admit_every_10_s_by_default() -> None:
    w = Workload.from_arrays(submit=[0, 125], run=[600, 600], procs=[1, 1],
                             deadline_factor=[3.0, 3.0])
    cl = Cluster(2, 2, None)
    now = simulate_market(w, cl, MarketConfig(period=300.0))
    late = simulate_market(w, cl, MarketConfig(period=300.0, admission=None))
    assert MarketConfig().admission == 10.0
    assert now.start.tolist() == [0.0, 130.0]
    assert late.start.tolist() == [0.0, 300.0]


def test_newcomers_share_the_hosts_with_the_running_vms_until_the_period() -> None:
    d, backend, _ = world([(spec("a", 0.0, size=3), 1e6), (spec("b", 25.0, size=2), 1e6)])
    d.admit_due(0.0)
    d.step(0.0)
    a = d.platform.apps["a"]
    assert [vm.alloc["cpu"] for vm in a.vms] == pytest.approx([1.0, 1.0, 1.0])
    assert d.admit_between(0.0, PERIOD) == 30.0
    b = d.platform.apps["b"]
    # 5 VMs of equal bids on 4 CPUs: 0.8 each, the running ones' shares updated in place
    allocs = [vm.alloc["cpu"] for app in (a, b) for vm in app.vms]
    assert allocs == pytest.approx([0.8] * 5)
    assert [backend.vms[vm.id].alloc["cpu"] for vm in a.vms] == pytest.approx([0.8] * 3)
    assert all(vm.host == 0 for vm in a.vms) and backend.counts["migration"] == 0
    # a's tasks ran in lock-step at full speed from 0 to 30, then at 0.8 of it
    backend.advance(30.0, PERIOD)
    assert backend.apps["a"].work_done == pytest.approx(30.0 + 0.8 * 30.0)


def _hosted_shares(platform: Platform) -> tuple[list[float], list[float]]:
    """Every running VM's CPU allocation in its record, and what re-clearing every host
    (the per-host proportional share of the running VMs' bids) gives it: the definition an
    admission point implements while touching only the VMs whose share changes."""
    from merkat.core.draft import draft
    from merkat.core.market_input import market_vms, placed, size
    from merkat.market import enforceable

    apps = [a for a in platform.active.values() if a.status is AppStatus.RUNNING]
    runs = placed([draft(a) for a in apps], platform.apps, platform.decider.const)
    vms = market_vms(runs, size(runs))
    want, _ = enforceable(platform.hosts, vms, vms.host)
    have = [nx.allocs[k]["cpu"] for nx, _, rows in runs
            for k in (range(len(nx.ids)) if rows is None else rows)]
    return have, want[:, 0].tolist()


@pytest.mark.parametrize("seed", range(6))
def test_an_admission_touches_only_the_vms_whose_share_changes(seed: int) -> None:
    """At every admission point of a random run on three hosts, the records end as if every
    host had been re-cleared (bit for bit), while the plan and the decision carry only the
    newcomers and the running VMs whose allocation changed (those sharing a newcomer's
    host): the others are neither drafted nor sent to the backend again."""
    rng = np.random.default_rng(seed)
    arrivals = [(spec(f"a{k}", float(t), size=int(rng.integers(1, 4)), budget=50.0), 400.0)
                for k, t in enumerate(sorted(rng.uniform(0.0, 250.0, 8)))]
    ledger = MemoryLedger()
    backend = SimBackend(trade_memory=False, boot_s=0.0)
    platform = Platform(Hosts(("h0", "h1", "h2"), np.array([[2.0, 4096.0]] * 3)),
                        period=PERIOD, reserve={"cpu": 0.01})
    items = [Arrival(s.submit_time, s, RigidApp(vms=s.size, work_total=w)) for s, w in arrivals]
    driver = Driver(platform, backend, Economy(ledger), ListArrivals(items), admission=10.0)
    checked = untouched = 0
    admit = platform.admit

    def checking_admit(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal untouched
        before = {vm.id: vm.alloc for a in platform.active.values() for vm in a.vms}
        decision = admit(*args, **kwargs)
        new = set(decision.plan.allocations) - set(before)
        for vm_id, alloc in decision.plan.allocations.items():
            if vm_id not in new:  # a running VM is sent again only with a new allocation
                assert alloc != before[vm_id]
        untouched += len(set(before) - set(decision.plan.allocations))
        return decision

    settle = platform.settle

    def checking_settle(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal checked
        out = settle(*args, **kwargs)
        have, want = _hosted_shares(platform)
        assert have == want
        checked += 1
        return out

    platform.admit = checking_admit  # type: ignore[method-assign]
    platform.settle = checking_settle  # type: ignore[method-assign]
    driver.run(until=6 * PERIOD)
    assert checked > 0 and untouched > 0
