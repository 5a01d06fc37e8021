"""The simulated backend reads a period's allocations from the plan's column
(:class:`~merkat.core.backend.AllocationColumn`, :mod:`merkat.backends.sim_columns`) instead
of its per-VM mapping: each VM holds the same mapping object, the same applications lose
their kept pace, each application's least CPU allocation kept from the column equals a
fresh ``min`` over its VMs' mappings after every apply and advance, and the applications
paced from it advance to the same bits. Pinned against the mapping path (the column
dropped from every plan) in flaky many-VM runs (suspends, resumes, migrations, failed
operations, admission points), compared after every advance."""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from merkat.backends import sim_columns
from merkat.backends.sim import _VM, SimBackend
from merkat.core.backend import AllocationColumn, ApplyReport, OpReport, Plan
from merkat.core.model import Charged, Decision
from merkat.runtime.economy import Economy
from merkat.workload.cluster import Cluster
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market
from test_lazy_records import jobs


def _flaky(real: Any, column: bool, seen: dict[str, int], every: int) -> Any:
    """``SimBackend.apply`` failing about one in ``every`` creates, resumes, migrations and
    suspends (as ``test_lazy_records._flaky``); a plan with a failed operation loses its
    column (its VMs are no longer the column's), and without ``column`` every plan does."""

    def apply(self: SimBackend, plan: Plan) -> ApplyReport:
        t = plan.time
        bad = [OpReport(op, vm, False, "flaky") for op, vms in (
            ("create", [p.vm for p in plan.create]), ("resume", [p.vm for p in plan.resume]),
            ("migrate", [m[0] for m in plan.migrate]), ("suspend", list(plan.suspend)))
            for vm in vms if zlib.crc32(f"{vm}@{t}".encode()) % every == 0]
        gone = {o.vm for o in bad}
        ok = Plan(t, plan.period, plan.destroy,
                  tuple(v for v in plan.suspend if v not in gone),
                  tuple(p for p in plan.create if p.vm not in gone),
                  tuple(p for p in plan.resume if p.vm not in gone),
                  tuple(m for m in plan.migrate if m[0] not in gone),
                  {v: a for v, a in plan.allocations.items() if v not in gone},
                  plan.column if column and not gone else None)
        seen["columns"] += ok.column is not None
        report = real(self, ok)
        _check_lows(self)
        return ApplyReport(t, report.ops + tuple(bad), report.api_calls)

    return apply


def _check_lows(backend: SimBackend) -> None:
    """Every kept least allocation is a fresh ``min`` over the application's VMs."""
    groups: dict[str, list[_VM]] = {}
    for vm in backend.vms.values():
        groups.setdefault(vm.app, []).append(vm)
    for app_id, low in backend._low.items():
        fresh = min([vm.alloc.get("cpu", 0.0) for vm in groups[app_id]])
        assert low == fresh or (math.isnan(low) and math.isnan(fresh)), app_id


def _run(monkeypatch: pytest.MonkeyPatch, column: bool, policy: str, hosts: int, every: int
         ) -> tuple[str, list[Any], dict[str, int]]:
    """A flaky run (one operation in ``every`` fails, one bill in nine is withheld) of 40
    many-VM jobs of ``policy`` on ``hosts`` one-core hosts; returns
    its digest, the backend's state after every advance and the counts."""
    seen = {"columns": 0, "paced": 0, "withheld": 0}
    log: list[Any] = []
    monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply, column, seen, every))
    advance, pace_from_lows = SimBackend.advance, sim_columns.pace_from_lows

    def advancing(self: SimBackend, t0: float, t1: float) -> None:
        advance(self, t0, t1)
        _check_lows(self)
        log.append((t0, t1, repr(sorted((a, m.work_done, m.finish_time, m.last_rate)
                                        for a, m in self.apps.items())),
                    sorted((v, vm.app, vm.host, vm.ready_at, vm.migrating_until,
                            sorted(vm.alloc.items())) for v, vm in self.vms.items())))

    def pacing(lows: Any, live: Any, pace: Any, *a: Any) -> None:
        before = len(pace)
        pace_from_lows(lows, live, pace, *a)
        seen["paced"] += len(pace) - before

    charge = Economy.charge

    def charging(self: Economy, decision: Decision, *a: Any) -> Charged:
        c = charge(self, decision, *a)  # about one in nine bills withheld (test_cow)
        extra = {i for i, _ in decision.bills
                 if zlib.crc32(f"{i}@{decision.time}".encode()) % 9 == 0} - c.unpaid
        seen["withheld"] += len(extra)
        paid = {i: v for i, v in c.paid.items() if i not in extra}
        return Charged(paid, c.unpaid | extra, sum(paid.values()), c.minted, c.redistributed)

    monkeypatch.setattr(Economy, "charge", charging)
    monkeypatch.setattr(SimBackend, "advance", advancing)
    monkeypatch.setattr("merkat.backends.sim.pace_from_lows", pacing)
    out = simulate_market(jobs(), Cluster(hosts, 1, None),
                          MarketConfig(period=300.0, policy=policy))
    monkeypatch.undo()
    h = hashlib.sha256()
    for a in (out.start, out.end, out.value, out.paid):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr([(r.prices, r.allocated, r.vms, r.migrations, r.charged, r.failed,
                    r.unpaid) for r in out.records]).encode())
    h.update(json.dumps([out.outcomes, out.bank, out.reasons], sort_keys=True).encode())
    for k in ("suspended", "resumed", "migrations"):
        seen[k] = sum(getattr(r, k) for r in out.records)
    seen["failed"] = sum(len(r.failed) for r in out.records)
    return h.hexdigest(), log, seen


@pytest.mark.parametrize("every", [4, 40])
@pytest.mark.parametrize(("policy", "hosts"), [("vertical-deadline", 6),
                                               ("deadline-strict", 12)])
def test_the_column_path_equals_the_mapping_path_after_every_advance(
        monkeypatch: pytest.MonkeyPatch, policy: str, hosts: int, every: int) -> None:
    digest, log, seen = _run(monkeypatch, True, policy, hosts, every)
    want, want_log, want_seen = _run(monkeypatch, False, policy, hosts, every)
    assert len(log) == len(want_log) > 50
    for got, ref in zip(log, want_log, strict=True):
        assert got == ref
    assert digest == want
    assert seen["columns"] > (10 if every == 4 else 30) and want_seen["columns"] == 0  # both paths taken
    assert seen["paced"] > 0 and want_seen["paced"] == 0
    assert seen["failed"] > 3 and seen["migrations"] > 0 and seen["withheld"] > 5
    if policy == "vertical-deadline":
        assert seen["suspended"] > 0 and seen["resumed"] > 0


def _mapping_apply(vms: dict[str, _VM], allocations: dict[str, dict[str, float]],
                   pace: dict[str, float], live: dict[str, None]) -> None:
    """The per-VM loop of ``SimBackend.apply`` that :func:`sim_columns.apply_column`
    replaces."""
    last = None
    for vm_id, alloc in allocations.items():
        vm = vms[vm_id]
        if vm.alloc is not alloc:
            vm.alloc = alloc
            if vm.app is not last:
                last = vm.app
                if pace.pop(vm.app, None) is not None:
                    live[vm.app] = None


@pytest.mark.parametrize("seed", range(40))
def test_apply_column_is_the_per_vm_loop_and_gives_each_application_s_least(seed: int
                                                                           ) -> None:
    """Random VMs holding kept or new mappings (equal, zero, negative zero, NaN values):
    the same mapping objects held, the same paces forgotten in the same order, and each
    application's least value a fresh ``min`` over its VMs when the column's applications
    are its groups (none when the grouping is not current, an application appears twice
    or is not in one piece)."""
    rng = np.random.default_rng(seed)
    choices = [0.25, 0.5, 1.0, 0.0, -0.0, float("nan"), 0.75]
    apps = [f"a{k}" for k in range(int(rng.integers(1, 7)))]
    counts = [int(rng.integers(1, 5)) for _ in apps]
    ids = [f"{a}-{j}" for a, n in zip(apps, counts, strict=True) for j in range(n)]
    owners = [a for a, n in zip(apps, counts, strict=True) for _ in range(n)]
    old = [{"cpu": float(rng.choice(choices))} for _ in ids]
    new = [o if rng.random() < 0.4 else {"cpu": float(rng.choice(choices))} for o in old]
    values = np.array([a["cpu"] for a in new])

    def world() -> tuple[dict[str, _VM], dict[str, float], dict[str, None]]:
        vms = {v: _VM(o, 0, a, 0.0) for v, o, a in zip(ids, owners, old, strict=True)}
        pace = {a: 0.5 for a in apps if rng.random() < 0.5}
        return vms, pace, {a: None for a in apps if a not in pace}

    state = rng.bit_generator.state
    vms, pace, live = world()
    rng.bit_generator.state = state
    ref_vms, ref_pace, ref_live = world()
    groups: dict[str, dict[str, _VM]] = {}
    for v, vm in vms.items():
        groups.setdefault(vm.app, {})[v] = vm
    lows = sim_columns.apply_column(vms, AllocationColumn("cpu", ids, new, values, apps, counts),
                                    pace, live, groups)
    _mapping_apply(ref_vms, dict(zip(ids, new, strict=True)), ref_pace, ref_live)
    assert all(vms[v].alloc is ref_vms[v].alloc for v in ids)
    assert list(pace.items()) == list(ref_pace.items())
    assert list(live) == list(ref_live)
    assert list(lows) == apps
    for a in apps:
        fresh = min([vm.alloc.get("cpu", 0.0) for vm in groups[a].values()])
        assert repr(lows[a]) in (repr(fresh), repr(-fresh)) or (lows[a] != lows[a]), a
        assert type(lows[a]) is float
    column = AllocationColumn("cpu", ids, new, values, apps, counts)
    assert sim_columns.apply_column(vms, column, {}, {}, None) == {}  # grouping not current
    if len(apps) > 1:  # an application's VMs in two pieces
        twice = AllocationColumn("cpu", ids, new, values, [*apps[1:], apps[0]],
                                 [*counts[1:], counts[0]])
        assert sim_columns.apply_column(vms, twice, {}, {}, groups) == {}
    del groups[apps[0]]  # a group not the column's: its least is not given
    lows = sim_columns.apply_column(vms, column, {}, {}, groups)
    assert apps[0] not in lows and len(lows) == len(apps) - 1


def test_plans_with_and_without_their_column_are_equal() -> None:
    plan = Plan(0.0, 60.0, allocations={"v": {"cpu": 1.0}},
                column=AllocationColumn("cpu", ["v"], [{"cpu": 1.0}], np.ones(1), ["a"], [1]))
    assert plan == replace(plan, column=None)  # (not compared: the same request)
