"""The simulated backend keeps a rigid application's pace while none of its VMs changes
(merkat.backends.sim: ready, not migrating, the same allocation mappings): a run gives
bit for bit what the pace recomputed at every advance gives (a backend whose ``_speed`` is
its own takes the path without the kept pace), with boots, migrations, admissions between
periods, new allocations and ends; the applications at a kept pace advanced together
(merkat.backends.sim_pace), in one numpy pass or in a loop, give the same bits; an apply that
gets the last plan's allocations again with no VM put or released since skips them."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.backends import sim_pace
from merkat.backends.sim import _VM, RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.core.backend import ApplyReport, Plan
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy


class Recomputing(SimBackend):
    """The reference: every advance recomputes every VM's speed, every apply visits every
    allocation."""

    def _speed(self, model, vm: _VM, t0: float, t1: float) -> float:  # type: ignore[no-untyped-def]
        return super()._speed(model, vm, t0, t1)

    def apply(self, plan: Plan) -> ApplyReport:
        self._applied = None  # (never the same mapping: nothing skipped)
        return super().apply(plan)


class Checked(SimBackend):
    """The backend under test, checking after each advance that an application is either
    advanced on its own (``_live``) or at its kept pace (``_pace``), never both, and that
    every unfinished application with all its VMs is one of them."""

    skipped = 0  # applies that found every VM holding its mapping already

    def apply(self, plan: Plan) -> ApplyReport:
        if plan.allocations is self._applied and self._changes == self._stamp:
            self.skipped += 1
        return super().apply(plan)

    def advance(self, t0: float, t1: float) -> None:
        super().advance(t0, t1)
        for app_id, quiet in self._quiet.items():  # an upper bound of its VMs' busy times
            for vm in self._by_app.get(app_id, {}).values():
                assert vm.ready_at <= quiet and vm.migrating_until <= quiet
        live, pace = set(self._live), set(self._pace)
        assert not live & pace
        for app_id, model in self.apps.items():
            if model.finish_time is None and len(self._by_app.get(app_id, ())) >= model.vms:
                assert app_id in live | pace
            if app_id in pace:
                assert model.finish_time is None


def _run(backend: SimBackend, seed: int) -> list[tuple[float, float | None, float | None]]:
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(("h0", "h1", "h2"), np.array([[1.0, 4096.0]] * 3)),
                        period=60.0, reserve={"cpu": 0.01})
    items = []
    for k in range(10):
        spec = AppSpec(id=f"a{k}", policy="best-effort", size=int(rng.integers(1, 3)),
                       vm_size={"cpu": 1.0}, submit_time=float(rng.uniform(0, 400)),
                       budget=float(rng.uniform(5, 50)), trade=("cpu",), owner="o")
        items.append(Arrival(spec.submit_time, spec,
                             RigidApp(vms=spec.size, work_total=float(rng.uniform(50, 600)))))
    items.sort(key=lambda a: a.time)
    Driver(platform, backend, Economy(MemoryLedger()), ListArrivals(items),
           admission=10.0).run(until=1500.0)
    return [(m.work_done, m.finish_time, m.last_rate) for m in backend.apps.values()]


@pytest.mark.parametrize("min_vector", [1, 10**9])  # the numpy pass, the loop
@pytest.mark.parametrize("seed", range(5))
def test_the_kept_pace_gives_the_recomputed_run_bit_for_bit(
        seed: int, min_vector: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_pace, "MIN_VECTOR", min_vector)
    kept, recomputed = Checked(), Recomputing()
    assert repr(_run(kept, seed)) == repr(_run(recomputed, seed))  # (the sign of a zero too)
    assert kept.counts == recomputed.counts and kept.counts["migration"] > 0
    assert kept._pace and not recomputed._pace  # the pace was kept, and used
    assert kept.skipped > 0  # (quiet periods: the last plan's allocations again)


@pytest.mark.parametrize("seed", range(30))
def test_a_quiet_cpu_only_pace_is_its_least_allocation_s_bit_for_bit(seed: int) -> None:
    """``_rigid_pace`` of an application whose VMs are all ready and none migrates (its
    ``_quiet`` time at or before ``t0``) takes the least CPU allocation instead of every VM's
    speed: the same rate, begin and settledness as the loop, bit for bit, with equal, zero,
    negative-zero, NaN, integer, missing, above-full and subnormal allocations; with memory traded, or
    an unknown or later ``_quiet`` time, it is the loop."""
    rng = np.random.default_rng(seed)
    choices = [0.25, 0.5, 0.5, 1.0, 2.0, 0.0, -0.0, float("nan"), 1, 0.75, None, 5e-324]
    t0, t1 = 600.0, 900.0
    for _ in range(40):
        n = int(rng.integers(1, 6))
        vms = []
        for _ in range(n):
            a = choices[int(rng.integers(len(choices)))]
            alloc = {} if a is None else {"cpu": a}
            ready = float(rng.choice([0.0, 300.0, t0, 700.0])) if rng.random() < 0.3 else 0.0
            vm = _VM("app", 0, alloc, ready)
            if rng.random() < 0.2:
                vm.migrating_until = float(rng.choice([500.0, t0, 650.0, 1000.0]))
            vms.append(vm)
        full = float(rng.choice([1.0, 2.0, 0.5]))
        model = RigidApp(vms=n, work_total=100.0, cpu=full, memory=256.0)
        for trade_memory in (False, True):
            backend = SimBackend(trade_memory=trade_memory)
            for vm in vms:
                backend._busy_until("app", vm.ready_at)
                backend._busy_until("app", vm.migrating_until)
            quiet = backend._quiet.get("app")
            got = backend._rigid_pace(model, vms, t0, t1)
            reference = SimBackend(trade_memory=trade_memory)  # _quiet unknown: the loop
            want = reference._rigid_pace(model, vms, t0, t1)
            assert repr(got) == repr(want)
            # the loop, having seen every VM, knows the application quiet from t0 on
            settled = want[2] and want[1] <= t0
            assert reference._quiet.get("app") == (t0 if settled else None)
            assert quiet is None or settled == (quiet <= t0)


class AllLive(SimBackend):
    """The reference of the fixed points: every unfinished application advanced on its own
    at every advance (none left out of ``_live``, no kept pace)."""

    def advance(self, t0: float, t1: float) -> None:
        self._unpace_all()
        self._live.update(dict.fromkeys(a for a, m in self.apps.items()
                                        if m.finish_time is None))
        super().advance(t0, t1)


def _reports(backend: SimBackend) -> list[tuple[object, ...]]:
    from types import SimpleNamespace

    from merkat.runtime.observe import observe

    apps = [SimpleNamespace(spec=SimpleNamespace(id=a), status="running") for a in backend.apps]
    return [(a, o.metrics.work_done, o.metrics.progress_rate, o.finished)
            for a, o in observe(backend, apps).items()]  # type: ignore[arg-type]


def test_a_rigid_application_short_of_vms_is_a_fixed_point_until_one_is_put_or_released(
        ) -> None:
    """Three tasks: two VMs (no progress, rate 0), three (progress), two again after a
    release (rate 0), none (rate None), three again; a neighbour with all its VMs
    progresses throughout. Each advance's reports equal the reference's, which advances
    every application every time; the short one is left out of ``_live`` once advanced."""
    from merkat.core.backend import VMPlacement

    def put(vm: str, app: str) -> VMPlacement:
        return VMPlacement(vm=vm, app=app, host=0)

    cpu = {"cpu": 1.0}
    steps = [
        Plan(0.0, 60.0, create=(put("a0", "a"), put("a1", "a"), put("b0", "b")),
             allocations={"a0": cpu, "a1": cpu, "b0": cpu}),
        None, None,
        Plan(180.0, 60.0, create=(put("a2", "a"),), allocations={"a2": cpu}),
        None,
        Plan(300.0, 60.0, suspend=("a1",)),
        None,
        Plan(420.0, 60.0, suspend=("a0", "a2")),
        None,
        Plan(540.0, 60.0, resume=(put("a0", "a"), put("a1", "a"), put("a2", "a")),
             allocations={"a0": cpu, "a1": cpu, "a2": cpu}),
        None, None,
    ]
    kept, reference = SimBackend(), AllLive()
    for backend in (kept, reference):
        backend.add_app("a", RigidApp(vms=3, work_total=500.0))
        backend.add_app("b", RigidApp(vms=1, work_total=5000.0))
    t = 0.0
    rates = []
    for plan in steps:
        for backend in (kept, reference):
            if plan is not None:
                backend.apply(plan)
            backend.advance(t, t + 60.0)
        assert repr(_reports(kept)) == repr(_reports(reference))
        rates.append(kept.apps["a"].last_rate)
        if len(kept._by_app.get("a", ())) < 3:
            assert "a" not in kept._live and "a" not in kept._pace
        t += 60.0
    assert rates[:3] == [0.0, 0.0, 0.0] and rates[3] > 0 and rates[5:7] == [0.0, 0.0]
    assert rates[7:9] == [None, None] and rates[-1] > 0


@pytest.mark.parametrize("seed", range(3))
def test_the_fixed_points_give_the_run_of_every_application_advanced(seed: int) -> None:
    assert repr(_run(Checked(), seed)) == repr(_run(AllLive(), seed))
