"""What a platform has paid (``spent`` in ``GET /platforms/{name}``, the dashboard's column)
is what the books say it paid, also after a server restart: it was 0 for every platform that
had ended before the server started (only the loop's memory was read), and a platform charged
by use and admitted again after a restart counted its deposit's payments as nothing."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.service.api import create_app
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.service.recovery import paid_before
from merkat.service.templates import parse
from test_report_live import SOLVER, finish


def test_an_ended_platform_shows_what_it_paid_after_a_restart(tmp_path: Path) -> None:
    cfg = load_config(None, data_dir=tmp_path, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})  # fmt: skip
    store = open_store(cfg.database)
    key = store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    m.submit("alice", parse(SOLVER))
    m.admit()
    finish(m, store)
    before = m.spent("solver")
    assert before > 0
    m.close()
    store.close()

    store = open_store(cfg.database)  # the server started again
    m = Manager(cfg, store, make_backend(cfg))
    try:
        with TestClient(create_app(m)) as c:
            p = c.get("/api/v1/platforms/solver", headers={"X-API-Key": key}).json()
        assert p["state"] == "finished"
        assert p["spent"] == before == p["paid"]  # (was 0.0)
        assert m.spent("nothing") == 0.0
    finally:
        m.close()
        store.close()


def test_paid_before_counts_the_deposits_payments() -> None:
    """Charging by use pays the provider from ``app:x:hold``, not from ``app:x``."""
    ledger = MemoryLedger()
    ledger.create_account("alice", AccountKind.user)
    ledger.create_account("provider", AccountKind.provider)
    ledger.create_account("app:x", AccountKind.application, owner="alice")
    ledger.create_account("app:x:hold", AccountKind.sub, owner="app:x")
    ledger.mint("app:x", 100, "budget")
    ledger.transfer("app:x", "app:x:hold", 30, "deposit")
    ledger.transfer("app:x:hold", "provider", 12, "charge by use")
    ledger.transfer("app:x:hold", "app:x", 18, "refund")
    ledger.transfer("app:x", "provider", 5, "charge")
    assert paid_before(ledger, "app:x", "provider") == 17
