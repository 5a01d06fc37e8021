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

from merkat.bank.ledger import AccountKind
from merkat.service.api import create_app
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import StoreError, open_store
from merkat.service.manager import Manager
from test_service_api import h

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


# --- quotas (item 8) -------------------------------------------------------------------------


def farm(name: str, count: int, clusters: int = 1) -> str:
    body = "".join(f"  - {{name: c{k}, command: 'sleep 60', count: {count}, cpu: 0.1, "
                   "memory: 16, min_memory: 4}\n" for k in range(clusters))
    return f"name: {name}\ncontroller: {{policy: best-effort}}\nbudget: 1\nclusters:\n{body}"


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[TestClient, Manager, dict[str, str]]]:
    cfg = load_config(None, data_dir=tmp_path, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")},
                      quotas={"platforms": 2, "vms": 5, "vms_per_platform": 4,
                              "template_bytes": 2000})
    store = open_store(cfg.database)
    keys = {"alice": store.add_user("alice", budget=100_000_000),
            "bob": store.add_user("bob", budget=100_000_000)}
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield c, m, keys
    m.close()


def test_quotas_refuse_with_the_quota_and_the_use_and_store_nothing(small: Any) -> None:
    c, m, keys = small
    a = keys["alice"]
    # the 120 clusters x 1,000 VMs: over the per-platform size, nothing stored
    r = submit(c, a, farm("huge", 1000, 120))
    assert r.status_code == 422 and r.json()["detail"].startswith("quota template_bytes: ")
    r = submit(c, a, farm("big", 5))
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == ("quota vms_per_platform: the template asks for 5 VMs; "
                                  "alice's limit per platform is 4")
    from merkat.service import quotas as q

    q.set_quota(m.store.engine, "alice", {"vms_per_platform": 10})  # 6 VMs: more than her 5
    r = submit(c, a, farm("six", 6))
    assert r.status_code == 422 and r.json()["detail"].startswith("quota vms: ")
    q.reset(m.store.engine, "alice")
    assert submit(c, a, farm("f1", 3)).status_code == 201
    r = submit(c, a, farm("f2", 3))
    assert r.status_code == 429
    assert r.json()["detail"] == ("quota vms: the template asks for 3 VMs; alice's platforms "
                                  "hold 3 of her 5")
    assert submit(c, a, farm("f2", 2)).status_code == 201
    r = submit(c, a, farm("f3", 1))
    assert r.status_code == 429 and r.json()["detail"].startswith(
        "quota platforms: alice has 2 platform(s) that have not ended, her limit is 2")
    assert [p.name for p in m.store.platforms("alice")] == ["f1", "f2"]
    assert submit(c, keys["bob"], farm("b1", 4)).status_code == 201  # bob's own quota
    # an ended platform frees its place; an admin's override raises the limit at once
    assert c.post("/api/v1/platforms/f1/stop", headers=h(a)).json()["state"] == "stopped"
    assert submit(c, a, farm("f3", 3)).status_code == 201
    from merkat.service import quotas

    quotas.set_quota(m.store.engine, "alice", {"platforms": 3, "vms": 10})
    assert submit(c, a, farm("f4", 4)).status_code == 201
    assert quotas.usage(m, "alice") == {"platforms": 3, "vms": 9}
    doc = c.get("/api/v1/openapi.json").json()["paths"]  # the codes are published
    assert {"409", "422", "429"} <= set(doc["/api/v1/platforms"]["post"]["responses"])
    assert "409" in doc["/api/v1/transfers"]["post"]["responses"]


def test_growth_is_bounded_so_the_owners_vms_never_exceed_her_quota(small: Any) -> None:
    """bound_growth: each platform's nvms_max (what its controller may grow to) at most
    vms_per_platform, never below its own size, the owner's free VMs shared."""
    c, m, keys = small
    from merkat.service import quotas

    assert submit(c, keys["alice"], farm("one", 1)).status_code == 201
    assert submit(c, keys["alice"], farm("two", 2)).status_code == 201
    assert submit(c, keys["bob"], farm("b", 1)).status_code == 201
    m.admit()
    quotas.bound_growth(m)
    caps = {n: m.platform.apps[n].spec.nvms_max for n in ("one", "two", "b")}
    # alice: 5 - (1 + 2) = 2 free, one each; bob: 4 free but at most 4 per platform
    assert caps == {"one": 2, "two": 3, "b": 4}
    assert caps["one"] + caps["two"] <= 5
    quotas.set_quota(m.store.engine, "alice", {"vms": 1})  # lowered below her use
    quotas.bound_growth(m)
    assert m.platform.apps["one"].spec.nvms_max == 1 and m.platform.apps["two"].spec.nvms_max == 2
    m.tick()  # the period runs with the bounds
    assert all(len(m.platform.apps[n].vms) <= m.platform.apps[n].spec.nvms_max
               for n in ("one", "two", "b"))


# --- budgets, stop, names (Low items) --------------------------------------------------------


def test_over_committed_budgets_say_so_and_leave_no_zombie(world: Any) -> None:
    """Two budgets that together exceed the owner's balance: the second is refused at
    submission, saying budget vs balance; nothing stays behind and the name is free."""
    c, m, keys = world
    a = keys["bob"]  # 10 credits
    assert submit(c, a, template("p1", "6")).status_code == 201
    r = submit(c, a, template("p2", "6"))
    assert r.status_code == 422
    assert r.json()["detail"] == ("budget: 6 exceeds bob's balance 10 less the budgets of "
                                  "her 1 queued platform(s), 6: 4 left")
    assert m.store.platform("p2") is None and "p2" not in m.platform.apps
    assert submit(c, a, template("p2", "4")).status_code == 201  # the name is free
    assert m.admit() == ["p1", "p2"]
    assert balance(m, "bob") == 0 and balance(m, "app:p2") == 4_000_000


def test_money_moved_after_submission_fails_the_admission_cleanly(world: Any) -> None:
    """The backstop: the owner gave her money away between submission and admission; the
    platform ends failed with the reason, no half-admitted platform stays in the period,
    the others are admitted and the periods go on."""
    c, m, keys = world
    assert submit(c, keys["bob"], template("gone", "8")).status_code == 201
    assert submit(c, keys["alice"], template("fine", "5")).status_code == 201
    r = c.post("/api/v1/transfers", json={"from": "bob", "to": "alice", "amount": "5"},
               headers=h(keys["bob"]))
    assert r.status_code == 201
    assert m.admit() == ["fine"]
    row = m.store.platform("gone")
    assert row is not None and row.state == "failed"
    assert row.outcome == ("cannot admit: budget: 8 exceeds bob's balance 5 at admission "
                           "(money moved since the submission)")
    assert "gone" not in m.platform.apps and "gone" not in m.live
    assert not m.store.ledger.has_account("app:gone")
    assert m.tick()["vms"] >= 0 and m.store.platform("fine").state == "running"  # type: ignore[union-attr]
    assert balance(m, "bob") == 5_000_000 and m.store.ledger.audit().ok


def test_stop_answers_the_new_state(world: Any) -> None:
    c, m, keys = world
    assert submit(c, keys["alice"], template("s")).status_code == 201
    m.admit()
    m.tick()
    assert m.store.platform("s").state == "running"  # type: ignore[union-attr]
    r = c.post("/api/v1/platforms/s/stop", headers=h(keys["alice"]))
    assert r.status_code == 200 and r.json()["state"] == "stopped"
    assert r.json()["outcome"] == "stopped by the user" and r.json()["ended"] is not None
    show = c.get("/api/v1/platforms/s", headers=h(keys["alice"])).json()
    assert show["state"] == "stopped" and show["vms"] == []
    # a queued platform likewise
    assert submit(c, keys["alice"], template("q")).status_code == 201
    assert c.post("/api/v1/platforms/q/stop", headers=h(keys["alice"])).json()["state"] == \
        "stopped"


def test_another_users_platform_name_is_taken_without_naming_her(world: Any) -> None:
    c, m, keys = world
    assert submit(c, keys["alice"], template("secret")).status_code == 201
    r = submit(c, keys["bob"], template("secret", "1"))
    assert r.status_code == 409
    assert r.json()["detail"] == "name: platform name 'secret' is taken; choose another"
    assert "alice" not in r.text
    # her own second try gets the same words; a delete frees the name for anyone, and the
    # next platform of that name has an account of its own, funded with its own budget
    assert submit(c, keys["alice"], template("secret")).json()["detail"] == r.json()["detail"]
    m.admit()
    assert c.delete("/api/v1/platforms/secret", headers=h(keys["bob"])).status_code == 404
    c.post("/api/v1/platforms/secret/stop", headers=h(keys["alice"]))
    assert c.delete("/api/v1/platforms/secret", headers=h(keys["alice"])).status_code == 200
    first = balance(m, "app:secret")  # the first platform's account stays in the books
    assert submit(c, keys["bob"], template("secret", "1")).status_code == 201
    m.admit()
    assert balance(m, "app:secret") == first and balance(m, "app:secret@2") == 1_000_000
    assert m.store.ledger.get_account("app:secret@2").owner == "bob"


# --- key revocation (item 12): the admin's CLI and the running server do not share memory ----


def test_rotated_and_removed_keys_are_refused_at_once_by_the_running_server(
        tmp_path: Path) -> None:
    """The admin commands open their own store on the data directory (as from another
    process: nothing in memory is shared with the server's); the server refuses the old keys
    at the next request."""
    import json
    import urllib.error
    import urllib.request

    from typer.testing import CliRunner

    from merkat.cli import app
    from merkat.service.server import Service
    from test_service_e2e import free_port

    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, [*args, "--data-dir", str(tmp_path)])

    def add(name: str) -> str:
        r = cli("user", "add", name, "--budget", "10", "--parsable")
        assert r.exit_code == 0, r.stderr
        return str(r.stdout.strip())

    alice, bob = add("alice"), add("bob")
    cfg = load_config(None, data_dir=tmp_path, port=free_port(), period=0.5, admission=0.25,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    svc = Service(cfg, on_period=lambda rec: None)
    svc.start_background()
    url = f"http://127.0.0.1:{svc.port}/api/v1"

    def call(key: str, path: str = "/prices", body: bytes | None = None,
             ctype: str = "application/json") -> int:
        req = urllib.request.Request(url + path, data=body, method="POST" if body else "GET",
                                     headers={"Authorization": f"Bearer {key}",
                                              "Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    try:
        assert call(alice) == 200 and call(bob) == 200
        r = cli("user", "rotate-key", "alice", "-o", "json")
        assert r.exit_code == 0, r.stderr
        new = json.loads(r.stdout)["key"]
        assert call(alice) == 401 and call(new) == 200  # at once: no cache
        assert call(bob, "/platforms", template("bobs", "1").encode(), "application/yaml") == 201
        r = cli("user", "remove", "bob")
        assert r.exit_code == 1 and "bobs" in r.stderr and "stop them first" in r.stderr
        assert call(bob) == 200
        assert call(bob, "/platforms/bobs/stop", b"{}") == 200
        req = urllib.request.Request(url + "/events/stream?poll=0.1",
                                     headers={"Authorization": f"Bearer {bob}"})
        stream = urllib.request.urlopen(req, timeout=30)  # bob's open event stream
        assert stream.readline().startswith(b": merkat events")
        r = cli("user", "remove", "bob")
        assert r.exit_code == 0, r.stderr
        assert call(bob) == 401 and call(bob, "/platforms") == 401
        rest = stream.read()  # the stream ends: no session outlives the key
        assert b"event: revoked" in rest
        stream.close()
        users = json.loads(cli("user", "list", "-o", "json").stdout)
        assert [u["name"] for u in users["items"]] == ["alice"]
        assert cli("user", "remove", "bob").exit_code == 2  # unknown now
        # the books keep his account and his money: 10 less what his platform paid (its
        # budget's rest came home when it stopped)
        ledger = svc.manager.store.ledger
        assert ledger.balance("bob") == 10_000_000 - round(svc.manager.spent("bobs") * 1e6)
        assert (not ledger.has_account("app:bobs") or ledger.balance("app:bobs") == 0)
        assert ledger.audit().ok
    finally:
        svc.shutdown()


def test_an_internal_key_collision_fails_that_admission_only(world: Any) -> None:
    """Whatever holds a platform's budget key already (no request can write one; here the
    server's own ledger does), the collision fails that platform's admission with the reason,
    never the admission of the others or the period."""
    c, m, keys = world
    assert submit(c, keys["alice"], template("clash", "5")).status_code == 201
    assert submit(c, keys["bob"], template("other", "1")).status_code == 201
    m.store.ledger.transfer("alice", "bob", 1, "earlier", idempotency_key="budget:clash")
    assert m.admit() == ["other"]
    row = m.store.platform("clash")
    assert row is not None and row.state == "failed" and "idempotency key" in row.outcome
    assert "clash" not in m.platform.active
    # the backend forgot what the admission told it (LiveBackend.unregister)
    assert "clash" not in m.backend.launchers and "clash" not in m.backend.monitored  # type: ignore[attr-defined]
    m.tick()
    assert m.store.platform("other").state == "running"  # type: ignore[union-attr]
    assert balance(m, "alice") == 100_000_000 - 1 and m.store.ledger.audit().ok


def test_user_admin_commands_bad_input_exit_2_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from merkat.cli import app

    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, [*args, "--data-dir", str(tmp_path)])

    assert cli("user", "add", "alice").exit_code == 0
    for args in (("user", "quota", "nobody", "--vms", "3"), ("user", "quota", "alice", "--vms",
                                                             "-1"),
                 ("user", "rotate-key", "nobody"), ("user", "remove", "nobody"),
                 ("user", "quota", "alice", "--platforms", "x")):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = cli("user", "quota", "alice", "--vms", "3", "-o", "json")
    assert r.exit_code == 0
    import json

    out = json.loads(r.stdout)
    assert out["quotas"]["vms"] == 3 and out["overrides"] == {"vms": 3}
    out = json.loads(cli("user", "quota", "alice", "--reset", "-o", "json").stdout)
    assert out["overrides"] == {} and out["quotas"]["vms"] == 200


def test_a_user_cannot_be_given_the_banks_own_accounts(tmp_path: Path) -> None:
    """A user's account is her name: ``merkat user add provider`` gave the new user the
    provider's account (every platform's charges, and a way to spend them), ``app:NAME`` a
    platform's. Refused, exit 2, one line; before the server ever ran too (the provider's
    account is made at its first start, and must not be hers). So is ``a/b``, whose account
    no URL can name (``GET /accounts/a%2Fb`` is routed as ``/accounts/a/b``: Not Found)."""
    from typer.testing import CliRunner

    from merkat.cli import app

    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, [*args, "--data-dir", str(tmp_path)])

    for name in ("provider", "virtual-bank", "app:x", "app:s:hold", "a/b"):
        r = cli("user", "add", name)
        assert r.exit_code == 2, (name, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
        assert ("no '/'" if "/" in name else "choose another") in r.stderr
    store = open_store(load_config(None, data_dir=tmp_path).database)
    try:
        store.ledger.create_account("bank-fees", AccountKind.bank)
        with pytest.raises(StoreError, match="the bank's bank account"):
            store.add_user("bank-fees")
        assert [u.name for u in store.users()] == []
    finally:
        store.close()
    assert cli("user", "add", "alice").exit_code == 0


def test_boosting_a_queued_platform_says_why_not_yet(world: Any) -> None:
    """A queued platform (no account until it is admitted) answered 409 ``platform 'q' is
    queued: only a queued, waiting or running platform can be boosted``: the reason
    contradicted itself. It says when it can be; once admitted the boost goes through; once
    ended, which states can be boosted. Nothing moves until then."""
    c, m, keys = world
    assert submit(c, keys["alice"], template("q", "10")).status_code == 201
    boost = {"amount": "5"}
    r = c.post("/api/v1/platforms/q/boost", json=boost, headers=h(keys["alice"]))
    assert r.status_code == 409
    assert r.json()["detail"] == ("platform 'q' is queued: it has no account until it is "
                                  "admitted (within 0.5 s); boost it then")
    assert balance(m, "alice") == 100_000_000
    m.admit()
    assert c.post("/api/v1/platforms/q/boost", json=boost,
                  headers=h(keys["alice"])).status_code == 201
    assert balance(m, "alice") == 85_000_000
    c.post("/api/v1/platforms/q/stop", headers=h(keys["alice"]))
    r = c.post("/api/v1/platforms/q/boost", json=boost, headers=h(keys["alice"]))
    assert r.status_code == 409 and r.json()["detail"] == (
        "platform 'q' is stopped: only a waiting, running or suspended platform can be boosted")
    assert balance(m, "alice") == 100_000_000 and m.store.ledger.audit().ok
