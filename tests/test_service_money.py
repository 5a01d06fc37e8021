"""Budgets come home (issue 26): an ended platform's money goes back to its owner in the
transaction that records its end, in the live service and, with ``return_budgets``, in the
driver; the ledger's ``also`` runs inside the movement's transaction."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import ReturnBudget, hold_account
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.service.templates import parse

M = 1_000_000


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25,
                      backend={"cgroup_prefix": f"merkat-money-{uuid.uuid4().hex[:8]}"})
    store = open_store(cfg.database)
    store.add_user("alice", budget=100 * M)
    m = Manager(cfg, store, make_backend(cfg))
    yield m
    m.close()


def template(name: str, command: str, budget: int = 10) -> Any:
    return parse(f"name: {name}\ncontroller: {{policy: best-effort}}\nbudget: {budget}\n"
                 f"clusters:\n  - name: main\n    command: {command}\n    cpu: 1\n"
                 f"    memory: 64\n")


def run_until_ended(m: Manager, names: list[str], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        m.admit()
        m.tick()
        rows = [m.store.platform(n) for n in names]
        if all(r is not None and r.state in ("finished", "stopped", "failed") for r in rows):
            return
        time.sleep(0.3)
    raise AssertionError(f"not ended: {[m.store.platform(n) for n in names]}")


def test_finished_and_stopped_platforms_give_their_budgets_back(manager: Manager) -> None:
    """Every platform ends; each account is at 0; the owner holds what she started with
    minus what her platforms paid; one ``returned`` event and one history line each."""
    m = manager
    ledger = m.store.ledger
    m.submit("alice", template("quick", "sleep 0.6"))
    m.submit("alice", template("long", "sleep 600", budget=20))
    m.admit()
    m.tick()
    m.tick()
    m.stop("long")
    run_until_ended(m, ["quick", "long"])
    quick, long_ = m.store.platform("quick"), m.store.platform("long")
    assert quick is not None and long_ is not None
    # (the outcome says why, should a loaded machine ever end it otherwise)
    assert (quick.state, long_.state) == ("finished", "stopped"), (
        quick.outcome, long_.outcome, [e["message"] for e in m.store.events(limit=50)])
    paid = m.platform.apps["quick"].spent + m.platform.apps["long"].spent
    assert paid > 0
    bal = ledger.balances(["alice", "app:quick", "app:long"])
    assert bal == {"alice": 100 * M - paid, "app:quick": 0, "app:long": 0}
    events = [e for e in m.store.events(limit=1000) if e["kind"] == "returned"]
    assert sorted(e["platform"] for e in events) == ["long", "quick"]
    lines = [t for t in ledger.history("alice") if t.reason.startswith("returned")]
    assert {t.payer for t in lines} == {"app:quick", "app:long"}
    assert sum(t.amount for t in lines) == 30 * M - paid
    assert ledger.audit().ok


def test_the_end_and_the_return_are_one_transaction(manager: Manager,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """If writing the end fails, no money moves and the platform is not ended in the store;
    the next period ends it and returns the money once."""
    import merkat.service.money as money

    m = manager
    m.submit("alice", template("once", "sleep 600"))
    m.admit()
    m.tick()
    real = money.write_row

    def broken(name: str, values: Any) -> Any:
        def write(conn: Any) -> None:
            real(name, values)(conn)
            raise RuntimeError("disk full")
        return write

    monkeypatch.setattr(money, "write_row", broken)
    m.stop("once")
    before = m.store.ledger.balances(["alice", "app:once"])
    with pytest.raises(RuntimeError):
        m.tick()
    assert m.store.ledger.balances(["alice", "app:once"]) == before
    assert m.store.platform("once").state == "running"  # type: ignore[union-attr]
    monkeypatch.setattr(money, "write_row", real)
    m.tick()
    assert m.store.platform("once").state == "stopped"  # type: ignore[union-attr]
    assert m.store.ledger.balance("app:once") == 0
    assert m.store.ledger.balance("alice") == 100 * M - m.platform.apps["once"].spent


def test_return_budget_plans_the_account_and_its_hold() -> None:
    moves = ReturnBudget.plan({"app:a": 5, hold_account("app:a"): 2, "app:b": 0},
                              {"app:a": "alice", "app:b": "bob"})
    assert moves == [("app:a", "alice", 5), (hold_account("app:a"), "alice", 2)]


def test_the_memory_ledger_runs_also_before_any_change() -> None:
    from merkat.bank.ledger import AccountKind

    ledger = MemoryLedger()
    ledger.create_account("alice", AccountKind.user)
    ledger.create_account("app:a", AccountKind.application, owner="alice")
    ledger.mint("app:a", 7, "initial budget")
    seen: list[Any] = []

    def boom(conn: Any) -> None:
        seen.append(conn)
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        ReturnBudget().apply(ledger, 3, {"app:a": "alice"}, also=boom)
    assert ledger.balances(["alice", "app:a"]) == {"alice": 0, "app:a": 7} and seen == [None]
    assert ReturnBudget().apply(ledger, 3, {"app:a": "alice"}, also=seen.append) == {"app:a": 7}
    assert ledger.balances(["alice", "app:a"]) == {"alice": 7, "app:a": 0}
    assert ledger.audit().ok


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups)")
def test_charging_by_use_live_pays_the_measured_cpu_and_refunds_the_rest(
        tmp_path: Path, cpu_heavy: int) -> None:
    """Two platforms bid alike; the one that computes pays more than the one that sleeps, each
    at most its bids; the deposits' unspent part is refunded and, at the end, returned."""
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25, charging="use",
                      backend={"cgroup_prefix": f"merkat-use-{uuid.uuid4().hex[:8]}",
                               "nodes": [{"name": "n0", "cpus": str(cpu_heavy),
                                          "memory": 1024}]})
    store = open_store(cfg.database)
    store.add_user("alice", budget=100 * M)
    m = Manager(cfg, store, make_backend(cfg))
    try:
        assert m.backend.enforced
        m.submit("alice", template("hog", "exec yes > /dev/null"))
        m.submit("alice", template("nap", "sleep 600"))
        m.admit()
        for _ in range(6):
            m.tick()
            time.sleep(0.5)
        m.stop("hog")
        m.stop("nap")
        m.tick()
        hog, nap = m.platform.apps["hog"], m.platform.apps["nap"]
        assert hog.vms == [] and nap.vms == []
        assert 0 <= nap.spent < hog.spent
        ledger = store.ledger
        bids = sum(t.amount for t in ledger.history("app:hog")
                   if t.payee == "app:hog:hold")
        assert hog.spent < bids  # never more than deposited; the rest refunded
        refunds = [t for t in ledger.history("app:nap") if t.payer == "app:nap:hold"
                   and t.payee == "app:nap"]
        assert refunds
        bal = ledger.balances(["alice", "app:hog", "app:nap", "app:hog:hold", "app:nap:hold"])
        assert bal == {"alice": 100 * M - hog.spent - nap.spent, "app:hog": 0, "app:nap": 0,
                       "app:hog:hold": 0, "app:nap:hold": 0}
        assert ledger.balance("provider") == hog.spent + nap.spent
        assert ledger.audit().ok
    finally:
        m.close()


def test_a_platform_that_cannot_be_admitted_again_fails_and_is_refunded_once(
        tmp_path: Path) -> None:
    """Recovery: a platform the restarted server cannot admit again ends as failed, its money
    returned in the transaction that fails it; a second restart returns nothing more."""
    import json

    from sqlalchemy import update

    from merkat.service import schema as s

    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25,
                      backend={"cgroup_prefix": f"merkat-money-{uuid.uuid4().hex[:8]}"})
    store = open_store(cfg.database)
    store.add_user("alice", budget=100 * M)
    m = Manager(cfg, store, make_backend(cfg))
    m.submit("alice", template("gone", "sleep 600"))
    m.admit()
    m.tick()
    held = store.ledger.balance("app:gone")
    assert 0 < held < 10 * M
    m.backend.close()  # (the server dies; its platform is still running in the store)
    row = store.platform("gone")
    assert row is not None and row.state == "running"
    bad = dict(row.template, controller={"policy": "no-such-policy"})
    with store.engine.begin() as conn:
        conn.execute(update(s.platforms).where(s.platforms.c.name == "gone")
                     .values(template=json.dumps(bad)))
    for _ in range(2):  # restarted twice
        m2 = Manager(cfg, store, make_backend(cfg))
        m2.close()
        row = store.platform("gone")
        assert row is not None and row.state == "failed"
        assert store.ledger.balances(["alice", "app:gone"]) == {
            "alice": 100 * M - (10 * M - held), "app:gone": 0}
    back = [t for t in store.ledger.history("alice") if t.reason.startswith("returned")]
    assert [t.amount for t in back] == [held]
    assert store.ledger.audit().ok


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--economy", "tycoon", "economy: the live service runs the economies themis, closed"),
    ("--charging", "rent", "charging: the live service charges by bid, use, not 'rent'"),
    ("--redistribute-every", "0", "--redistribute-every"),
])
def test_the_server_refuses_a_bad_economy_or_charging_in_one_line(
        tmp_path: Path, flag: str, value: str, message: str) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "merkat", "server", "--data-dir",
                        str(tmp_path / "d"), flag, value], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()  # nothing created
