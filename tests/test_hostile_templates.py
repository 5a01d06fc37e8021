"""Hostile input that passed validation and hurt later: a NUL character in any string of a
template (one tenant's command made every period of the server fail), of a request's body,
path or query (PostgreSQL cannot hold one: a 503 "database unavailable"). In process (FastAPI
TestClient over a manager, a backend without cgroups: the ``world`` fixture)."""

from __future__ import annotations

import json
from typing import Any

import pytest

BASE: dict[str, Any] = {"name": "nul", "controller": {"policy": "best-effort"}, "budget": "1",
                        "clusters": [{"name": "c", "command": "sleep 60", "cpu": 0.1,
                                      "memory": 32}]}


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    t = json.loads(json.dumps(BASE))
    node = t
    for k in path[:-1]:
        node = node.setdefault(k, {}) if isinstance(k, str) else node[k]
    node[path[-1]] = value
    return t


@pytest.mark.parametrize(("path", "value", "field"), [
    (["clusters", 0, "command"], "sleep 60\0x", "clusters.0.command"),
    (["clusters", 0, "monitor"], {"kind": "command", "command": "echo\0"},
     "clusters.0.monitor.command"),
    (["commands", "start"], "echo hi\0", "commands.start"),
    (["clusters", 0, "monitor"], {"kind": "log", "regex": "x", "path": "a\0"},
     "clusters.0.monitor.path"),
    (["controller", "params"], {"seed\0": 1}, "controller.params.seed\\0"),
])
def test_a_nul_anywhere_in_a_template_is_refused_at_submit(
        world: Any, path: list[Any], value: Any, field: str) -> None:
    """``"command": "sleep 60\\u0000x"`` was queued and admitted; its VM's start then raised
    ``ValueError: embedded null byte`` inside the period, so every period failed, for every
    user, while the platform existed (``/health`` 503, nothing scheduled, retried forever);
    on PostgreSQL a NUL in any stored text fails too. 422 naming the field, nothing stored,
    and the periods go on."""
    c, m, keys = world
    r = c.post("/api/v1/platforms", json=_with(path, value),
               headers={"Authorization": f"Bearer {keys['alice']}"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == (f"body: {field}: holds a NUL character (\\0): no command, "
                                  "file name, environment or database text can")
    assert m.store.platform("nul") is None
    assert m.admit() == []
    m.tick()  # the period runs


def test_a_nul_in_a_yaml_template_names_its_line(world: Any) -> None:
    c, _, keys = world
    text = ('name: nul\ncontroller: {policy: best-effort}\nbudget: 1\nclusters:\n'
            '  - {name: c, command: "sleep 60\\0"}\n')
    r = c.post("/api/v1/platforms", content=text, headers={
        "Authorization": f"Bearer {keys['bob']}", "content-type": "application/yaml"})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("template line 5: clusters.0.command: holds a NUL")


@pytest.mark.parametrize(("method", "path", "body", "detail"), [
    ("get", "/events?platform=%00", None, "query: holds a NUL character (%00)"),
    ("get", "/platforms/a%00b", None, "path: holds a NUL character (%00)"),
    ("post", "/platforms/a%00b/stop", {}, "path: holds a NUL character (%00)"),
    ("post", "/transfers", {"from": "alice", "to": "bob", "amount": "1", "reason": "a\0"},
     "body: reason: holds a NUL character (\\0): no command, file name, environment or "
     "database text can"),
    ("post", "/transfers", {"from": "alice", "to": "b\0b", "amount": "1"},
     "body: to: holds a NUL character (\\0): no command, file name, environment or "
     "database text can"),
])
def test_a_nul_in_a_request_is_bad_input(world: Any, method: str, path: str, body: Any,
                                         detail: str) -> None:
    """On PostgreSQL these were 503 "database unavailable: ... cannot contain NUL" (or a 422
    "database error"); on SQLite a transfer's reason kept the NUL. 422, nothing moved."""
    c, m, keys = world
    kw = {"json": body} if body is not None else {}
    r = getattr(c, method)(f"/api/v1{path}", headers={
        "Authorization": f"Bearer {keys['alice']}"}, **kw)
    assert (r.status_code, r.json()["detail"]) == (422, detail)
    assert m.store.ledger.balance("bob") == 10_000_000


def test_a_long_reason_to_end_neither_stalls_the_periods_nor_keeps_the_money(
        world: Any) -> None:
    """A ``files_in`` name of 300 characters (the limit is 1,024) that is not there fails the
    platform with a reason quoting it; its money's way home (one transaction with its end)
    wrote the history line ``returned: platform NAME failed (...)`` past the bank's 200
    characters: ``InvalidInput: reason``, so every period of the server failed, for every
    user, and again after a restart (the platform re-admitted, failed again). The line is
    cut now: the platform fails, its money comes home, the periods go on."""
    c, m, keys = world
    t = _with(["clusters", 0, "files_in"], ["x" * 300])
    t["name"] = "long"
    r = c.post("/api/v1/platforms", json=t, headers={"Authorization": f"Bearer {keys['bob']}"})
    assert r.status_code == 201, r.text
    other = {**BASE, "name": "other"}
    assert c.post("/api/v1/platforms", json=other, headers={
        "Authorization": f"Bearer {keys['alice']}"}).status_code == 201
    m.admit()
    for _ in range(3):
        m.tick()  # raised InvalidInput at each period
    row = m.store.platform("long")
    assert row is not None and row.state == "failed" and "x" * 100 in (row.outcome or "")
    assert m.store.ledger.balance("bob") == 10_000_000  # everything came home
    assert m.store.ledger.balance("app:long") == 0 and m.store.ledger.audit().ok
    (line,) = [t for t in m.store.ledger.history("bob", 10) if t.payer == "app:long"]
    assert line.reason.startswith("returned: platform long failed (") and len(line.reason) == 200
    assert m.store.platform("other").state == "running"  # type: ignore[union-attr]
