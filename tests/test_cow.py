"""The next states are copy on write (:mod:`merkat.core.draft`, ``AppNext.base``): a draft
shares its application's column lists until a writer makes one its own (``draft.own``,
``own_allocs``, ``own_bids``), and the commit keeps the columns (and the record view) of an
application whose VMs the decision did not change.

Pinned here against the eager copies (the code this replaced: every draft and rebid copying
the six lists, every commit installing them): a flaky many-VM run (suspends, resumes,
migrations, failed operations, withheld applications, admission points) run both ways gives,
after every commit, the same columns, value for value, and the same outcome; in the copy on
write run no decision, admission or withholding changes a record's columns (the lists are
shared, so a writer that forgot to own one would); and the writers of records between a
draft and its commit (the commit's own, the live service's ``draft.writing``) leave the
draft as it was."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Collection, Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.types import Action, Demand, Observation, VMState
from merkat.core import batch, batch_slo, commit, draft
from merkat.core.backend import ApplyReport
from merkat.core.model import App, AppNext, AppSpec, Charged, Decision, Ops
from merkat.core.period import Platform
from merkat.core.plan import make_plan
from merkat.market import NO_HOST, Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.workload.cluster import Cluster
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market
from test_lazy_records import _flaky, _world, jobs


def values(cols: draft.Columns) -> tuple[Any, ...]:
    """VM columns by value (the mappings' items), to compare across runs and times."""
    ids, states, bids, hosts, fresh, allocs = cols
    return (tuple(ids), tuple(states), tuple(tuple(b.items()) for b in bids), tuple(hosts),
            tuple(fresh), tuple(tuple(a.items()) for a in allocs))


def snapshot(apps: Mapping[str, App]) -> dict[str, tuple[Any, ...]]:
    return {i: values(a.columns) for i, a in apps.items()}


def eager_next(app: App, base: draft.Columns, ids: list[str], states: list[VMState],
               bids: list[dict[str, float]], hosts: list[int], fresh: list[bool],
               allocs: list[dict[str, float]]) -> AppNext:
    """``draft._next`` as it was before copy on write: every column list copied."""
    return AppNext(app.spec.id, app.status, app.start_time, app.end_time, app.reason,
                   app.outcome, app.suspensions, app.resumes, app.vm_count, app.broke_since,
                   ids[:], states[:], bids[:], hosts[:], fresh[:], allocs[:])


def state(nx: AppNext) -> tuple[Any, ...]:
    """A next state by value (its fields, its columns' values, its flags)."""
    return (nx.id, nx.status, nx.start_time, nx.end_time, nx.reason, nx.outcome,
            nx.suspensions, nx.resumes, nx.vm_count, nx.broke_since,
            values((nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs)), nx.same_vms,
            nx.moved)


def eager_rebid(app: App, bid: dict[str, float], columns: draft.Columns) -> AppNext:
    """``draft.rebid_columns`` as it was before copy on write (a new next state, its
    columns copied)."""
    ids, states, bids, hosts, fresh, allocs = columns
    if bids and bids[0] == bid:
        bid = bids[0]
    return eager_next(app, columns, ids, states, [bid] * len(ids), hosts, fresh, allocs)


def _watch(monkeypatch: pytest.MonkeyPatch, eager: bool
           ) -> tuple[dict[str, int], list[tuple[Any, ...]]]:
    """Patches for one run: a backend failing about one in four starts, moves and
    suspends (``test_lazy_records``), about one in nine bills withheld, every commit's
    columns of the applications it wrote logged (by value). ``eager``: drafts copy every
    list (the reference); without it, every decision, admission and withholding is checked
    to change no record's columns. Returns the counts and the log, filled as the run goes."""
    monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply))
    if eager:
        monkeypatch.setattr(draft, "_next", eager_next)
    seen = {"commits": 0, "kept": 0, "installs": 0, "withheld": 0, "checked": 0, "reused": 0,
            "rebids": 0}
    log: list[tuple[Any, ...]] = []
    settle, decide, admit, withhold = (commit.settle, Platform.decide, Platform.admit,
                                       Platform.withhold)
    charge = Economy.charge

    def unchanged(fn: Any) -> Any:
        def checked(self: Platform, *a: Any) -> Any:
            before = snapshot(self.apps)
            out = fn(self, *a)
            if not eager:
                assert snapshot(self.apps) == before, fn.__name__  # no record written
                seen["checked"] += 1
            return out
        return checked

    def settled(apps: Mapping[str, App], decision: Decision, report: ApplyReport,
                charged: Any) -> Any:
        held = {i: apps[i].columns for i in decision.apps}
        out = settle(apps, decision, report, charged)
        seen["commits"] += 1
        for i in decision.apps:
            seen["installs"] += 1
            seen["kept"] += apps[i].columns is held[i]
        # every record (a decision holds only the applications it changes: the others'
        # records are their next states)
        log.append((decision.time, decision.admission,
                    sorted((i, values(a.columns), a.status) for i, a in apps.items()),
                    out[0]))
        return out

    def charging(self: Economy, decision: Decision, accounts: Mapping[str, str],
                 *a: Any) -> Charged:
        c = charge(self, decision, accounts, *a)
        extra = {i for i, _ in decision.bills
                 if zlib.crc32(f"{i}@{decision.time}".encode()) % 9 == 0} - c.unpaid
        if not extra:
            return c
        seen["withheld"] += len(extra)
        paid = {i: v for i, v in c.paid.items() if i not in extra}
        return Charged(paid, c.unpaid | extra, sum(paid.values()), c.minted, c.redistributed)

    def withholding(self: Platform, decision: Decision, unpaid: Collection[str]) -> Decision:
        return unchanged(withhold)(self, decision, unpaid)  # type: ignore[no-any-return]

    rebid = draft.rebid_columns

    def rebidding(app: App, bid: dict[str, float], columns: draft.Columns) -> AppNext:
        clean = app.clean
        nx = rebid(app, bid, columns)
        seen["rebids"] += 1
        seen["reused"] += nx is clean
        assert state(nx) == state(eager_rebid(app, bid, columns))  # a fresh one's values
        return nx

    if not eager:
        monkeypatch.setattr(draft, "rebid_columns", rebidding)  # (draft.bidding's too)
        monkeypatch.setattr(batch, "rebid_columns", rebidding, raising=False)  # (by name)
        monkeypatch.setattr(batch_slo, "rebid_columns", rebidding)
    monkeypatch.setattr(commit, "settle", settled)
    monkeypatch.setattr(Platform, "decide", unchanged(decide))
    monkeypatch.setattr(Platform, "admit", unchanged(admit))
    monkeypatch.setattr(Platform, "withhold", withholding)
    monkeypatch.setattr(Economy, "charge", charging)
    return seen, log


def _run(monkeypatch: pytest.MonkeyPatch, eager: bool, policy: str, hosts: int
         ) -> tuple[str, list[tuple[Any, ...]], dict[str, int]]:
    """A short run of 40 many-VM jobs of ``policy`` on ``hosts`` one-core hosts, watched
    (:func:`_watch`); returns its digest, its log and its counts."""
    seen, log = _watch(monkeypatch, eager)
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


class Uneven:
    """A custom controller (the scalar path) of an application trading CPU and memory that
    goes round its VMs' writers: uneven bids per VM (``set_bids``' loop), the same bids
    again (nothing changed), a VM added, one released, a suspension, a resumption, one bid
    for all."""

    name = "uneven"
    reads_price_history = False
    price_history_periods = 0

    def __init__(self, shift: int) -> None:
        self.shift = shift

    def decide(self, obs: Observation) -> Demand:
        ids = [v.id for v in obs.vms]
        step = (int(obs.time // 60) + self.shift) % 7
        if not ids:
            return Demand(Action.START, nvms=3, new_vm_bid={"cpu": 0.4, "memory": 0.01})
        if obs.vms[0].state is VMState.SUSPENDED:
            return Demand(Action.RESUME, nvms=len(ids), new_vm_bid={"cpu": 0.3, "memory": 0.01},
                          reason="resume") if step in (5, 6) else Demand()
        if step == 4:
            return Demand(Action.SUSPEND, nvms=len(ids), reason="suspend")
        nvms = len(ids) + (step == 2) - (step == 3 and len(ids) > 1)
        bids = {i: {"cpu": (0.2, 0.5)[(k + (step > 1)) % 2], "memory": 0.01}
                for k, i in enumerate(ids)} if step != 6 else {}
        return Demand(Action.NONE, nvms=nvms, bids=bids,
                      new_vm_bid={"cpu": 0.3, "memory": 0.01},
                      release=(ids[-1],) if step == 3 and len(ids) > 1 else ())


def _scripted(monkeypatch: pytest.MonkeyPatch, eager: bool
              ) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """Four :class:`Uneven` applications on four two-core hosts trading CPU and memory,
    40 periods, watched (:func:`_watch`)."""
    seen, log = _watch(monkeypatch, eager)
    platform = Platform(Hosts(("n0", "n1", "n2", "n3"), np.array([[2.0, 4096.0]] * 4)),
                        period=60.0, reserve={"cpu": 0.01, "memory": 0.001})
    d = Driver(platform, SimBackend(boot_s=0.0), Economy(MemoryLedger()))
    for k in range(4):
        spec = AppSpec(f"u{k}", "uneven", 3, {"cpu": 1.0, "memory": 512.0}, 0.0, 1e4,
                       renewal=50.0, vm_min={"memory": 1500.0})  # (two VMs a host: crowded)
        d.submit(spec, RigidApp(vms=3, work_total=1e12), Uneven(k))  # type: ignore[arg-type]
    for t in range(40):
        d.step(60.0 * t)
    monkeypatch.undo()
    return log, seen


def test_a_scalar_controller_s_writers_equal_the_eager_copies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log, seen = _scripted(monkeypatch, False)
    ref_log, _ = _scripted(monkeypatch, True)
    assert seen["checked"] >= 40 and seen["withheld"] > 0 and seen["kept"] > 0
    assert len(log) == len(ref_log) == 40
    for got, want in zip(log, ref_log, strict=True):
        assert got == want


@pytest.mark.parametrize(("policy", "hosts"), [("vertical-deadline", 6), ("deadline-strict", 12), ("deadline-strict", 20)])
def test_the_copy_on_write_state_equals_the_eager_copies_after_every_commit(
        monkeypatch: pytest.MonkeyPatch, policy: str, hosts: int) -> None:
    digest, log, seen = _run(monkeypatch, False, policy, hosts)
    ref_digest, ref_log, ref_seen = _run(monkeypatch, True, policy, hosts)
    # every writer went: suspends, resumes, moves, failed operations, withholdings
    assert seen["suspended"] > 0 and seen["resumed"] > 0 and seen["migrations"] > 0
    assert seen["failed"] > 10 and seen["withheld"] > 10
    assert seen["checked"] > 100  # decisions, admissions, withholdings: no record written
    assert len(log) == len(ref_log) == seen["commits"] > 100
    for got, want in zip(log, ref_log, strict=True):
        assert got == want  # the columns after every commit, value for value
    assert digest == ref_digest  # the same run, bit for bit
    # copy on write kept the columns (and views) of the applications nothing changed, and
    # handed their installed next states out again (each equal to a fresh one); the eager
    # copies never could
    assert seen["kept"] > 0 and ref_seen["kept"] == 0
    assert seen["reused"] > 0 and ref_seen["reused"] == 0


def test_a_draft_is_not_changed_by_the_writers_of_its_record() -> None:
    """The commit's writers (a start, a failed start, a failed move) and the live service's
    (``draft.writing``) give the record new lists: a draft made before them, which shares
    the old ones, keeps its values."""
    _, app = _world()
    for write in (lambda: draft.starting(app)[0].__setitem__(0, VMState.SUSPENDED),
                  lambda: draft.unplace(app, 1),
                  lambda: draft.move_back(app, app.columns[0][2], 3),
                  lambda: _write(app)):
        nx = draft.draft(app)
        before = values((nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs))
        shared = app.columns
        write()
        assert values((nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs)) == before
        assert values(shared) == before and app.columns is not shared


def _write(app: App) -> None:
    with draft.writing(app) as vms:
        vms[0].host, vms[0].alloc = NO_HOST, {}


def test_a_writer_owns_what_it_changes_and_an_unchanged_draft_keeps_the_columns() -> None:
    """``own``, ``own_allocs`` and ``own_bids`` copy a shared list once (the record's lists
    stay as they were); a draft no writer touched installs in O(1): the same columns, the
    record view kept; a rebid of the bid every VM holds shares every list."""
    d, app = _world()
    d.step(120.0)
    view = app.records()
    cols = app.columns
    nx = draft.draft(app)
    draft.install(app, nx)
    assert app.columns is cols and app.view is view  # nothing changed: nothing written
    nx = draft.rebid_columns(app, dict(cols[2][0]), cols)
    assert nx.bids is cols[2] and nx.ids is cols[0]  # the same bid: every list shared
    nx = draft.rebid_columns(app, {"cpu": cols[2][0]["cpu"] + 1.0}, cols)
    assert nx.bids is not cols[2] and nx.hosts is cols[3] and len(set(map(id, nx.bids))) == 1
    allocs = draft.own_allocs(nx)
    assert allocs is nx.allocs is not cols[5] and draft.own_allocs(nx) is allocs
    allocs[0] = {"cpu": 0.0}
    bids = draft.own_bids(nx)
    assert bids is nx.bids  # (already its own: the new bid's list)
    draft.own(nx)
    nx.hosts[0] = NO_HOST
    assert cols[3][0] != NO_HOST and cols[5][0] != {"cpu": 0.0}  # the record's untouched
    assert all(getattr(nx, c) is not cols[k] for k, c in enumerate(
        ("ids", "states", "bids", "hosts", "fresh", "allocs")))
    draft.install(app, nx)
    assert app.columns[3][0] == NO_HOST and app.view is None  # written: the view dropped


def test_the_plan_owns_the_allocations_it_writes() -> None:
    """A VM the clearing leaves unplaced after a failed start (allocation ``{}``) takes the
    zero allocation, and a placed one a new allocation, in the next state's own list: the
    record's stays as it was (the general path of ``core/plan.py``)."""
    d, app = _world()
    draft.unplace(app, 1)  # (its start failed: no host, no allocation)
    const = d.platform.decider.const(app)
    cols = app.columns
    before = values(cols)
    nx = draft.draft(app)
    hosts = cols[3]
    result = SimpleNamespace(host=np.array([hosts[0], NO_HOST, hosts[2]]),
                             allocation=np.array([[0.25, 0.0], [0.0, 0.0], [1.0, 0.0]]))
    plan = make_plan(0.0, 60.0, [(nx, const, None)], result, Ops(), np.array(hosts))
    assert values(app.columns) == before and app.columns is cols  # the record untouched
    assert nx.allocs is not cols[5] and nx.allocs[1] == const.zero
    assert nx.allocs[0] == {"cpu": 0.25} and plan.allocations[cols[0][0]] is nx.allocs[0]
    assert nx.hosts is cols[3]  # (no VM moved: the hosts still shared)
