"""The VM columns kept between periods (``App.kept``, :func:`merkat.core.draft.kept`) equal a
fresh read of the records (:func:`merkat.core.draft.columns`, the reference) wherever they
are read: before every period and after every commit (periods and admission points) of a
market run of many-VM applications with suspends, resumes, migrations and failed operations,
and after each of the live service's writers of VM records (``service/failures.py``,
``applied.py``, ``recovery.py``). The run's outcome is the one without kept columns, bit for
bit."""

from __future__ import annotations

import hashlib
import json
import operator
import zlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.types import AppStatus, VMState
from merkat.core import batch, commit, draft
from merkat.core.backend import ApplyReport, OpReport, Plan
from merkat.core.model import App, AppSpec
from merkat.core.period import Platform
from merkat.market import NO_HOST, Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.service import applied, failures, recovery
from merkat.service.db import PlatformRow, VmRow
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market


def same_as_records(app: App) -> bool:
    """Whether ``app``'s kept columns (when it has some) are a fresh read of its records:
    equal values, the very same mappings. Returns whether it had kept columns."""
    k = app.kept
    if k is None or k[0] is not app.vms:
        return False
    fresh = draft.columns(app.vms)
    assert fresh is not None
    cols = k[1]
    assert [len(c) for c in cols] == [len(c) for c in fresh], app.spec.id
    assert cols[0] == fresh[0] and cols[3] == fresh[3] and cols[4] == fresh[4], app.spec.id
    for c in (1, 2, 5):  # states, bids and allocations: the records' own objects
        assert all(map(operator.is_, cols[c], fresh[c])), (app.spec.id, c)
    return True


def _flaky(real: Any) -> Any:
    """``SimBackend.apply`` failing about one in four creates, resumes, migrations and
    suspends (chosen by a hash of the VM and the time: the same in every run)."""

    def fails(vm: str, t: float) -> bool:
        return zlib.crc32(f"{vm}@{t}".encode()) % 4 == 0

    def apply(self: SimBackend, plan: Plan) -> ApplyReport:
        t = plan.time
        bad = [OpReport(op, vm, False, "flaky") for op, vms in (
            ("create", [p.vm for p in plan.create]), ("resume", [p.vm for p in plan.resume]),
            ("migrate", [m[0] for m in plan.migrate]), ("suspend", list(plan.suspend)))
            for vm in vms if fails(vm, t)]
        gone = {o.vm for o in bad}
        ok = Plan(t, plan.period, plan.destroy,
                  tuple(v for v in plan.suspend if v not in gone),
                  tuple(p for p in plan.create if p.vm not in gone),
                  tuple(p for p in plan.resume if p.vm not in gone),
                  tuple(m for m in plan.migrate if m[0] not in gone),
                  {v: a for v, a in plan.allocations.items() if v not in gone})
        report = real(self, ok)
        return ApplyReport(t, report.ops + tuple(bad), report.api_calls)

    return apply


def _run(monkeypatch: pytest.MonkeyPatch, keep: bool) -> tuple[str, dict[str, int]]:
    """A short vertical-deadline run of many-VM jobs on 6 one-core hosts, with flaky
    operations; with ``keep`` False the kept columns are never read (the reference)."""
    monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply))
    seen = {"checks": 0, "kept": 0, "failed": 0}
    if keep:
        settle, decide = commit.settle, Platform.decide

        held: dict[int, tuple[list[Any], list[Any]]] = {}  # every kept list, as first seen

        def check(apps: Any) -> None:
            for app in apps:
                seen["checks"] += 1
                if same_as_records(app):
                    seen["kept"] += 1
                    for col in draft.kept(app):  # a kept list is never changed once kept
                        first = held.setdefault(id(col), (col, col[:]))
                        assert first[0] is col and all(map(operator.is_, col, first[1]))

        def settled(apps: Any, decision: Any, report: Any, charged: Any) -> Any:
            out = settle(apps, decision, report, charged)
            seen["failed"] += len(out[0])
            check(apps.values())
            return out

        def deciding(self: Platform, *a: Any) -> Any:
            check(self.active.values())
            return decide(self, *a)

        monkeypatch.setattr(commit, "settle", settled)
        monkeypatch.setattr(Platform, "decide", deciding)
    else:
        def fresh(app: App) -> Any:
            return draft.columns(app.vms)

        monkeypatch.setattr(draft, "kept", fresh)
        monkeypatch.setattr(batch, "kept", fresh)
    rng = np.random.default_rng(3)
    n = 40
    w = Workload.from_arrays(submit=np.sort(rng.integers(0, 20_000, n)).tolist(),
                             run=rng.integers(600, 6_000, n).tolist(),
                             procs=rng.integers(1, 7, n).tolist(),
                             deadline_factor=rng.uniform(1.2, 4.0, n).tolist())
    out = simulate_market(w, Cluster(6, 1, None),
                          MarketConfig(period=300.0, policy="vertical-deadline"))
    monkeypatch.undo()
    h = hashlib.sha256()
    for a in (out.start, out.end, out.value, out.paid):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr([(r.prices, r.allocated, r.vms, r.migrations, r.charged, r.failed)
                   for r in out.records]).encode())
    h.update(json.dumps([out.outcomes, out.bank, out.reasons], sort_keys=True).encode())
    for k in ("suspended", "resumed", "migrations", "created"):
        seen[k] = sum(getattr(r, k) for r in out.records)
    return h.hexdigest(), seen


def test_kept_columns_equal_a_fresh_read_after_every_period_of_a_flaky_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    digest, seen = _run(monkeypatch, keep=True)
    # the run went through every writer: suspends, resumes, moves, failed operations
    assert seen["suspended"] > 0 and seen["resumed"] > 0 and seen["migrations"] > 0
    assert seen["failed"] > 10
    assert seen["kept"] > seen["checks"] // 2  # (the columns were kept, and checked)
    assert digest == _run(monkeypatch, keep=False)[0]  # the same run without them


# --- the live service's writers -------------------------------------------------------------


def _world(vms: int = 3) -> tuple[Driver, App]:
    """A platform of one running application of ``vms`` VMs on 4 hosts, two periods in (its
    columns kept by the commit)."""
    platform = Platform(Hosts(("n0", "n1", "n2", "n3"), np.array([[2.0, 4096.0]] * 4)),
                        period=60.0, reserve={"cpu": 0.01})
    d = Driver(platform, SimBackend(trade_memory=False, boot_s=0.0), Economy(MemoryLedger()))
    spec = AppSpec("a", "best-effort", vms, {"cpu": 1.0, "memory": 512.0}, 0.0, 100.0,
                   trade=("cpu",))
    app = d.submit(spec, RigidApp(vms=vms, work_total=1e9))
    d.step(0.0)
    d.step(60.0)
    assert app.status is AppStatus.RUNNING and same_as_records(app)
    return d, app


def _placed_not_started(app: App) -> None:
    """``app``'s VMs placed by a decision whose period failed before the backend started
    them (``booting`` on a host; written by :func:`install`, the columns kept)."""
    nx = draft.draft(app)
    nx.states = [VMState.BOOTING] * len(nx.ids)
    nx.moved = True
    draft.install(app, nx)
    assert same_as_records(app)


def test_the_failed_period_reconciliation_keeps_the_columns_right() -> None:
    d, app = _world()
    _placed_not_started(app)
    lost = app.vms[0].id
    backend = SimpleNamespace(describe=lambda vm: None if vm == lost else {"process": "running"})
    done = failures.reconcile(SimpleNamespace(platform=d.platform, backend=backend))  # type: ignore[arg-type]
    assert f"{lost}: placed again (its start was lost)" in done
    assert app.vms[0].host == NO_HOST and app.vms[1].state is VMState.RUNNING
    assert draft.kept(app) == draft.columns(app.vms)
    d.step(120.0)  # the next period places it again, from the records
    assert app.vms[0].host != NO_HOST and same_as_records(app)


class _Refusing:
    """A backend that held less CPU than asked for one VM (``unapplied``)."""

    def __init__(self, vm: str) -> None:
        self.vm = vm

    def unapplied(self) -> dict[str, dict[str, Any]]:
        return {self.vm: {"state": "Infeasible", "short": {"cpu": (1.0, 0.25)}}}


class _Manager:
    """What ``settle_applied`` reads of the applications manager (weakly referenced)."""

    def __init__(self, d: Driver, backend: Any) -> None:
        self.platform, self.driver, self.backend = d.platform, d, backend
        self.events: list[str] = []

    def _event(self, kind: str, msg: str, name: str) -> None:
        self.events.append(kind)


def test_a_refused_resize_and_a_move_keep_the_columns_right() -> None:
    d, app = _world()
    vm = app.vms[1]
    host = app.vms[2].host
    node = d.platform.hosts.ids[(host + 1) % 4]
    d.report = ApplyReport(120.0, (OpReport("move", app.vms[2].id, True, node=node),))
    m = _Manager(d, _Refusing(vm.id))
    applied.settle_applied(m, d.platform.index)  # type: ignore[arg-type]
    assert vm.alloc == {"cpu": 0.25} and m.events == ["resize-refused"]
    assert app.vms[2].host == (host + 1) % 4
    assert draft.kept(app) == draft.columns(app.vms)
    d.step(120.0)
    assert same_as_records(app)


class _Store:
    def __init__(self, rows: list[VmRow]) -> None:
        self.rows = rows
        self.events: list[str] = []

    def vms(self, name: str) -> list[VmRow]:
        return self.rows

    def add_event(self, kind: str, msg: str, *a: Any) -> None:
        self.events.append(kind)

    def set_platform(self, name: str, **values: Any) -> None:
        pass


class _Adopting:
    foreign: tuple[str, ...] = ()

    def adopt(self, vm: str, app: str, host: int, index: int, alloc: Any = None) -> OpReport:
        return OpReport("adopt", vm, True)

    def reap_orphans(self) -> list[str]:
        return []

    def describe(self, vm: str) -> dict[str, Any] | None:
        return {"process": "running"}

    def apply(self, plan: Plan) -> ApplyReport:
        return ApplyReport(plan.time)


def test_a_readopted_platform_reads_its_new_records() -> None:
    d, app = _world()
    ids = d.platform.hosts.ids
    rows = [VmRow(vm.id, "a", k, ids[(k + 2) % 4], "running", {"cpu": 0.5}, {"cpu": 0.5})
            for k, vm in enumerate(app.vms)]
    m = SimpleNamespace(platform=d.platform, store=_Store(rows), backend=_Adopting(),
                        clock=lambda: 120.0, vm_index={}, saved_vms={},
                        live={"a": SimpleNamespace(state="running")})
    row = PlatformRow(name="a", owner="u", template={}, state="running", submitted=0.0,
                      started=0.0, ended=None, outcome="")
    recovery.readopt(m, row)  # type: ignore[arg-type]
    assert [vm.host for vm in app.vms] == [2, 3, 0]
    assert draft.kept(app) == draft.columns(app.vms)
    d.step(120.0)
    assert same_as_records(app)
