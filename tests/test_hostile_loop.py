"""The period loop under attack and accident (issue 25: items 4, 5 and the Low items on
stalls and crashes between charge and record): a database that fails is reported by
``/health`` (503) and ``/metrics`` and retried with back-off, never in a tight loop, and the
loop resumes when it recovers; a stall of several periods is covered by one period, not
replayed; a crash between a period's charge and its record does not make the restarted
period conflict with its own idempotency keys."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from merkat.control.registry import POLICIES
from merkat.control.slo import BestEffort
from merkat.control.types import Demand, Observation
from merkat.service.backends import make_backend
from merkat.service.db import open_store
from merkat.service.loop import first_period, next_boundary
from merkat.service.manager import Manager
from merkat.service.templates import parse
from merkat.web.app import create_app
from test_hostile_loop_support import SLEEPER, Loop, _manager, broken, manager_fixture, wait  # noqa: F401


def test_a_failing_database_is_reported_retried_with_backoff_and_the_loop_resumes(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager
    m.submit("alice", parse(SLEEPER))
    attempts: list[float] = []
    tick = m.tick

    def counted() -> Any:
        attempts.append(time.monotonic())
        return tick()

    monkeypatch.setattr(m, "tick", counted)
    with TestClient(create_app(m)) as c:
        loop = Loop(m)
        try:
            wait(lambda: m.store.platform("s").state == "running")  # type: ignore[union-attr]
            assert c.get("/api/v1/health").status_code == 200
            # the whole database fails: every write, including the events the handler of old
            # wrote (and died on)
            store = m.store
            for name in ("add_price", "add_event", "add_events", "set_platform"):
                monkeypatch.setattr(store, name, broken)
            monkeypatch.setattr(store.ledger, "balances", broken)
            r = wait(lambda: (x := c.get("/api/v1/health")).status_code == 503 and x)
            body = r.json()
            assert body["status"] == "error" and not body["loop"]["ok"]
            assert "OperationalError" in body["loop"]["reason"]
            assert "malformed" in body["loop"]["reason"]
            n0 = len(attempts)
            time.sleep(3.0)
            # back-off: an attempt per second at most (a period of 0.5 s), not ~30 a second
            assert 1 <= len(attempts) - n0 <= 4
            metrics = c.get("/metrics").text
            assert "merkat_period_loop_up 0.0" in metrics
            failures = [ln for ln in metrics.splitlines()
                        if ln.startswith("merkat_period_loop_failures_total ")]
            assert failures and float(failures[0].split()[1]) >= 2
            assert loop.thread.is_alive()
            monkeypatch.undo()  # the database is back
            monkeypatch.setattr(m, "tick", counted)
            r = wait(lambda: (x := c.get("/api/v1/health")).status_code == 200 and x)
            assert r.json()["loop"]["ok"] and r.json()["status"] == "ok"
            n1 = len(attempts)
            wait(lambda: len(attempts) >= n1 + 2)  # periods run again
            events = m.store.events(limit=1000)
            assert any(e["kind"] == "loop" and "recovered" in e["message"] for e in events)
            assert "merkat_period_loop_up 1.0" in c.get("/metrics").text
        finally:
            loop.close()
    assert m.store.ledger.audit().ok


def test_a_corrupted_database_file_gives_503_and_the_loop_survives(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    db = Path(m.config.data_dir) / "merkat.db"
    bob = {"Authorization": f"Bearer {m.store.add_user('bob', budget=1_000_000)}"}
    try:
        m.submit("alice", parse(SLEEPER))
        with TestClient(create_app(m)) as c:
            loop = Loop(m)
            try:
                wait(lambda: m.store.platform("s").state == "running")  # type: ignore[union-attr]
                assert c.get("/api/v1/prices", headers=bob).status_code == 200
                m.store.engine.dispose()  # new connections read the header again
                with open(db, "r+b") as f:
                    head = f.read(16)
                    f.seek(0)
                    f.write(b"\xde\xad\xbe\xef" * 4)
                r = wait(lambda: (x := c.get("/api/v1/health")).status_code == 503 and x)
                assert r.json()["loop"]["reason"]
                assert loop.thread.is_alive()
                # another user: the prices (from memory) within 1 s; what needs the database
                # a clear 503, never a 500
                for _ in range(5):
                    t = time.monotonic()
                    r = c.get("/api/v1/prices", headers=bob)
                    assert r.status_code == 200 and time.monotonic() - t < 1.0
                    time.sleep(0.2)
                r = c.get("/api/v1/platforms", headers=bob)
                assert r.status_code == 503 and r.headers["retry-after"] == "5"
                assert r.json()["detail"].startswith("database unavailable: ")
                with open(db, "r+b") as f:
                    f.write(head)
                m.store.engine.dispose()
                wait(lambda: c.get("/api/v1/health").status_code == 200)
                assert c.get("/api/v1/platforms", headers=bob).status_code == 200
            finally:
                loop.close()
    finally:
        m.close()


def test_after_a_stall_the_missed_periods_are_not_replayed(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager
    P = m.config.period
    m.submit("alice", parse(SLEEPER))
    starts: list[float] = []
    tick = m.tick

    def slow() -> Any:
        starts.append(time.monotonic())
        if len(starts) == 3:
            time.sleep(4 * P)  # the loop stalls for four periods
        return tick()

    monkeypatch.setattr(m, "tick", slow)
    loop = Loop(m)
    try:
        wait(lambda: len(starts) >= 7, timeout=15)
    finally:
        loop.close()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # never two periods back to back: each period starts at least (almost) a period later
    assert min(gaps) >= 0.8 * P, gaps
    assert m.health.stalls_total == 1 and m.health.periods_skipped_total >= 3
    events = [e["message"] for e in m.store.events(limit=1000) if e["kind"] == "loop"]
    assert any("not replayed" in e for e in events)
    # each period charged once at one period's bids: as many charges as periods, all equal
    charges = [t for t in m.store.ledger.history("app:s") if t.payee == m.config.provider
               and "admission" not in (t.idempotency_key or "")]  # (not a prorated start)
    periods = {p["period"] for p in m.store.prices()}
    assert sorted(t.period for t in charges) == sorted(periods)
    assert len({t.amount for t in charges}) == 1


def test_next_boundary_drops_missed_periods() -> None:
    assert next_boundary(10.0, 10.1, 10.2, 5.0) == 15.0  # on time
    assert next_boundary(10.0, 31.0, 31.2, 5.0) == 36.0  # stalled: a period after the start
    assert next_boundary(10.0, 10.0, 22.0, 5.0) == 22.0  # a long period: the next at once


def test_a_crash_between_charge_and_record_resumes_without_conflict(tmp_path: Path) -> None:
    m = _manager(tmp_path, period=5.0)
    m.submit("alice", parse(SLEEPER))
    m.admit()
    m.tick()
    m.tick()
    charged_before = m.store.ledger.balance("provider")
    index = m.platform.index
    # the period charges, then the process dies before its price record is written
    m.store.add_price = broken  # type: ignore[method-assign]
    with pytest.raises(OperationalError):
        m.tick()
    paid = m.store.ledger.balance("provider") - charged_before
    assert paid > 0  # the charge of period `index` is in the bank
    assert m.store.last_period() == index - 1  # its record is not
    m.backend.close()
    # restart on the same database: the next period is index + 1 and charges normally
    cfg = m.config
    store = open_store(cfg.database)
    m2 = Manager(cfg, store, make_backend(cfg))
    try:
        assert first_period(store) == index + 1 == m2.platform.index
        rec = m2.tick()
        assert rec["index"] == index + 1
        assert store.ledger.balance("provider") == charged_before + 2 * paid
        rec = m2.tick()
        assert rec["index"] == index + 2
        assert store.ledger.audit().ok
    finally:
        m2.close()


def test_a_failure_after_the_charge_is_retried_under_a_new_index(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    m = manager
    m.submit("alice", parse(SLEEPER))
    failed = threading.Event()
    redistribute = m.driver.economy.redistribute

    def once(period: int) -> int:  # runs after the charge and before the record
        if not failed.is_set() and m.platform.apps.get("s") and m.platform.index >= 2:
            failed.set()
            raise OperationalError("UPDATE", {}, Exception("disk I/O error"))
        return redistribute(period)

    monkeypatch.setattr(m.driver.economy, "redistribute", once)
    loop = Loop(m)
    try:
        wait(failed.is_set)
        wait(lambda: m.health.recoveries_total == 1, timeout=10)
        n = len(m.store.prices())
        wait(lambda: len(m.store.prices()) >= n + 2)
        assert m.health.failures_total == 1  # one failure, no IdempotencyConflict after it
    finally:
        loop.close()
    assert m.store.ledger.audit().ok


# --- monitors: outside the lock, in linear time, within time limits --------------------------

def test_a_starved_loop_notes_its_stalls_once_a_minute_with_the_count() -> None:
    from types import SimpleNamespace

    from merkat.service.loop import LoopHealth, _stalled

    notes: list[str] = []
    m: Any = SimpleNamespace(store=SimpleNamespace(add_event=lambda k, msg: notes.append(msg)))
    h = LoopHealth()
    for k in range(30):  # behind by 2 periods every period for 60 s (P = 1 s, each 2 s)
        t = 2.0 * k
        _stalled(m, h, t, t + 2.0, 1.0)
    assert h.stalls_total == 30 and h.periods_skipped_total == 60
    assert len(notes) == 1  # t = 0 .. 58: one note
    _stalled(m, h, 60.0, 62.0, 1.0)
    assert len(notes) == 2
    assert "30 such stalls since the last note (60 periods not replayed)" in notes[1]


def test_a_failure_between_the_decision_and_the_charge_leaves_no_ghost(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision placed a new VM, then the charge failed (the database): the VM was never
    created. The retry must create it, not bill a VM that does not exist forever."""
    m = manager
    m.submit("alice", parse(SLEEPER))
    failed = threading.Event()
    charge = m.driver.economy.charge

    def once(decision: Any, accounts: Any) -> Any:
        if not failed.is_set() and decision.bills:
            failed.set()
            raise OperationalError("UPDATE", {}, Exception("database is locked"))
        return charge(decision, accounts)

    monkeypatch.setattr(m.driver.economy, "charge", once)
    loop = Loop(m)
    try:
        wait(failed.is_set)
        wait(lambda: m.health.recoveries_total == 1)
        wait(lambda: "s/vm1" in m.backend.vms)  # created after all
        p = m.backend.vms["s/vm1"]
        wait(lambda: p.proc is not None and p.proc.poll() is None)
        wait(lambda: m.store.platform("s").state == "running")  # type: ignore[union-attr]
        (vm,) = m.platform.apps["s"].vms
        assert vm.state.value == "running"
    finally:
        loop.close()
    assert m.health.failures_total == 1
    assert m.store.ledger.audit().ok


def test_reconcile_destroys_what_a_lost_decision_released(manager: Manager) -> None:
    from merkat.control.types import AppStatus
    from merkat.service.failures import reconcile

    m = manager
    m.submit("alice", parse(SLEEPER))
    m.admit()
    m.tick()
    assert "s/vm1" in m.backend.vms
    app = m.platform.apps["s"]
    # what a decision that stopped it did in memory, its destroy never applied
    app.vms, app.status = [], AppStatus.STOPPED
    m.platform.active.pop("s")
    with m.lock:
        assert reconcile(m) == ["s/vm1: destroyed (its platform released it)"]
    assert "s/vm1" not in m.backend.vms


def test_a_period_stuck_on_a_locked_database_is_reported_while_it_waits(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    from merkat.service import loop as loop_module

    monkeypatch.setattr(loop_module, "BUSY_MIN", 1.0)
    m = manager
    release = threading.Event()
    tick = m.tick

    def stuck() -> Any:
        release.wait(20)  # (as the bank waits for a database another process locked)
        return tick()

    monkeypatch.setattr(m, "tick", stuck)
    with TestClient(create_app(m)) as c:
        loop = Loop(m)
        try:
            r = wait(lambda: (x := c.get("/api/v1/health")).status_code == 503 and x)
            assert "has been running for" in r.json()["loop"]["reason"]
            release.set()
            wait(lambda: c.get("/api/v1/health").status_code == 200)
        finally:
            release.set()
            loop.close()


def test_a_cpu_only_template_does_not_fail_the_period_for_everyone(manager: Manager) -> None:
    """A template trading only CPU (``trade: [cpu]``) while sizing memory made the market
    refuse its VM's memory bid of 0 as under the reserve: every period failed, for every
    user's platform (issue 26, found by the demo). Now it runs beside the others."""
    manager.submit("alice", parse(SLEEPER))
    manager.submit("alice", parse(SLEEPER.replace("name: s", "name: c")
                                  .replace("budget: 50", "budget: 50\ntrade: [cpu]")))
    manager.admit()
    rec = manager.tick()
    assert rec["vms"] == 2
    apps = manager.platform.apps
    assert [str(apps[n].status) for n in ("s", "c")] == ["running", "running"]
    assert set(apps["c"].vms[0].bid) == {"cpu"}
    assert not [e for e in manager.store.events(limit=100) if e["kind"] == "error"]


@contextlib.contextmanager
def _buggy_beside_bob(m: Manager, policy: type[BestEffort], name: str) -> Iterator[None]:
    """Bob's sleeper ``s`` and alice's platform ``name`` under the plugin ``policy``
    (registered while the block runs)."""
    m.store.add_user("bob", budget=100_000_000)
    POLICIES.register(policy)
    try:
        m.submit("bob", parse(SLEEPER))
        m.submit("alice", parse(SLEEPER.replace("name: s", f"name: {name}")
                                .replace("best-effort", policy.name)))
        yield
    finally:
        POLICIES.unregister(policy.name)


class _Boom(BestEffort):
    """A plugin policy with a bug: it starts, then its ``reconfigure`` divides by zero."""

    name = "boom-test"

    def reconfigure(self, obs: Observation) -> Demand:
        raise ZeroDivisionError("float division by zero")


def test_a_raising_controller_fails_its_platform_only_and_the_loop_goes_on(
        manager: Manager) -> None:
    """A controller that raises (a plugin's bug) made ``Platform.decide`` raise: every period
    failed and was retried forever, every tenant's market stopped. Now its platform fails
    with the reason; the other user's keeps running and ``/health`` stays 200."""
    m = manager
    with _buggy_beside_bob(m, _Boom, "bad"):
        ticks: list[int] = []
        tick = m.tick

        def counted() -> Any:
            rec = tick()
            ticks.append(rec["index"])
            return rec

        m.tick = counted  # type: ignore[method-assign]
        with TestClient(create_app(m)) as c:
            loop = Loop(m)
            try:
                wait(lambda: m.store.platform("bad").state == "failed")  # type: ignore[union-attr]
                n = len(ticks)
                wait(lambda: len(ticks) >= n + 3)  # several periods more
                assert c.get("/api/v1/health").status_code == 200
                assert m.health.failures == 0
            finally:
                loop.close()
    assert m.store.platform("s").state == "running"  # type: ignore[union-attr]
    assert str(m.platform.apps["s"].status) == "running"
    reason = "controller error: ZeroDivisionError: float division by zero"
    assert m.platform.apps["bad"].reason == reason
    assert m.store.platform("bad").outcome == reason  # type: ignore[union-attr]
    events = m.store.events(limit=1000, platform="bad")
    assert any(e["kind"] == "state" and reason in e["message"] and "failed" in e["message"]
               for e in events)
    assert all("failed" not in e["message"] for e in m.store.events(limit=1000, platform="s"))
    assert m.store.ledger.balance("app:bad") == 0  # its budget came home
    assert m.store.ledger.audit().ok


class _NaNBids(BestEffort):
    """A plugin policy with a bug that raises nothing: it starts, then bids NaN."""

    name = "nan-bids-test"

    def reconfigure(self, obs: Observation) -> Demand:
        return self.uniform(obs, {r: float("nan") for r in obs.vm_size})


def test_a_non_finite_bid_fails_its_platform_only_and_the_periods_go_on(
        manager: Manager) -> None:
    """A plugin bidding NaN made ``Platform.decide`` raise ``NonFiniteBid``: every period
    failed, for every tenant. Now its platform fails with the reason, its money comes home,
    and the other user's platform keeps running through the next periods."""
    m = manager
    with _buggy_beside_bob(m, _NaNBids, "nan"):
        m.admit()
        records = [m.tick() for _ in range(3)]
    assert [r["index"] for r in records] == [records[0]["index"] + k for k in range(3)]
    row = m.store.platform("nan")
    assert row is not None and row.state == "failed"
    assert row.outcome.startswith("controller error: NonFiniteBid: policy 'nan-bids-test' bid")
    assert m.store.platform("s").state == "running"  # type: ignore[union-attr]
    assert records[-1]["vms"] == 1  # bob's VM only, still running and billed
    assert m.store.ledger.balance("app:nan") == 0  # its budget came home
    assert m.store.ledger.audit().ok
