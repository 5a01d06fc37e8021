"""Hostile tenants against each other and the server's own state (issue 25: items 2, 8, 12
and the Low items on amounts, over-committed budgets, stop, names): idempotency keys in
per-user namespaces, quotas, key revocation, platform names. In process (FastAPI TestClient,
a backend without cgroups); the revocation test runs the real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from merkat.service.api import create_app
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager

LONG = """\
name: {name}
controller: {{policy: best-effort}}
budget: {budget}
clusters:
  - name: main
    command: "sleep 60"
    cpu: 1
    memory: 64
"""


def template(name: str = "s", budget: str = "10") -> str:
    return LONG.format(name=name, budget=budget)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[TestClient, Manager, dict[str, str]]]:
    cfg = load_config(None, data_dir=tmp_path, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    store = open_store(cfg.database)
    keys = {"alice": store.add_user("alice", budget=100_000_000),
            "bob": store.add_user("bob", budget=10_000_000),
            "root": store.add_user("root", admin=True)}
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield c, m, keys
    m.close()


def h(key: str, ctype: str | None = None) -> dict[str, str]:
    out = {"Authorization": f"Bearer {key}"}
    if ctype:
        out["content-type"] = ctype
    return out


def submit(c: TestClient, key: str, text: str) -> Any:
    return c.post("/api/v1/platforms", content=text, headers=h(key, "application/yaml"))


def balance(m: Manager, account: str) -> int:
    return m.store.ledger.balance(account)


# --- idempotency keys (critical item 2) ------------------------------------------------------


def test_a_users_key_cannot_take_the_next_periods_charge_key(world: Any) -> None:
    """Critical item 2: bob's tiny transfer under the key of the next period's charge lands
    in bob's namespace; the next period charges alice's platform normally."""
    c, m, keys = world
    assert submit(c, keys["alice"], template("a")).status_code == 201
    assert submit(c, keys["bob"], template("b", "5")).status_code == 201
    m.admit()
    m.tick()
    nxt = m.platform.index
    key = f"charge-by-bid/{m.config.provider}/{nxt}"
    r = c.post("/api/v1/transfers", json={"from": "bob", "to": "app:b", "amount": "0.000001",
                                          "idempotency_key": key}, headers=h(keys["bob"]))
    assert r.status_code == 201, r.text
    # the same key again is bob's retry (one move), another operation under it a 409
    again = c.post("/api/v1/transfers", json={"from": "bob", "to": "app:b",
                                              "amount": "0.000001", "idempotency_key": key},
                   headers=h(keys["bob"]))
    assert again.status_code == 201 and again.json()["id"] == r.json()["id"]
    other = c.post("/api/v1/transfers", json={"from": "bob", "to": "app:b", "amount": "0.000002",
                                              "idempotency_key": key}, headers=h(keys["bob"]))
    assert other.status_code == 409 and other.json()["detail"].startswith("idempotency_key:")
    spent = m.platform.apps["a"].spent
    provider = balance(m, m.config.provider)
    rec = m.tick()
    assert rec["index"] == nxt and rec["charged"] > 0
    assert m.platform.apps["a"].spent > spent
    assert balance(m, m.config.provider) - provider == round(rec["charged"] * 1e6)
    journal = m.store.ledger.history(m.config.provider, 100)
    charge = [t for t in journal if t.period == nxt and t.reason == "charge by bid"]
    assert {t.idempotency_key for t in charge} == {key}
    mine = m.store.ledger.history("bob", 100)
    assert {t.idempotency_key for t in mine if t.amount == 1} == {f"u:bob#{key}"}
    assert m.tick()["charged"] > 0  # and the one after
    assert m.store.ledger.audit().ok


def test_a_guessed_budget_key_does_not_block_another_users_admission(world: Any) -> None:
    """The ``budget:<name>`` variant: bob sends every key the server could use for alice's
    platform's budget (even the exact one); her platform is admitted with its budget."""
    c, m, keys = world
    assert submit(c, keys["alice"], template("victim", "25")).status_code == 201
    row = m.store.platform("victim")
    assert row is not None
    for k in ("budget:victim", f"budget:victim@{row.submitted!r}", "refund:victim"):
        r = c.post("/api/v1/transfers", json={"from": "bob", "to": "alice",
                                              "amount": "0.000001", "idempotency_key": k},
                   headers=h(keys["bob"]))
        assert r.status_code == 201, r.text
    assert m.admit() == ["victim"]
    assert balance(m, "app:victim") == 25_000_000
    assert m.store.platform("victim").state == "waiting"  # type: ignore[union-attr]
    m.tick()
    assert m.store.platform("victim").state == "running"  # type: ignore[union-attr]


def test_users_keys_never_meet_each_other(world: Any) -> None:
    """The same key sent by two users is two keys; a user's key of 200 characters fits."""
    c, m, keys = world
    c.post("/api/v1/transfers", json={"from": "alice", "to": "bob", "amount": "1"},
           headers=h(keys["alice"]))
    k = "k" * 200
    for who in ("alice", "bob"):
        r = c.post("/api/v1/transfers", json={"from": who, "to": "root", "amount": "1",
                                              "idempotency_key": k}, headers=h(keys[who]))
        assert r.status_code == 201, r.text
    assert balance(m, "root") == 2_000_000
    hist = m.store.ledger.history("root", 10)
    assert len({t.idempotency_key for t in hist}) == 2
    assert all(t.idempotency_key and t.idempotency_key.startswith("u:") for t in hist)
