"""The REST API in process (FastAPI TestClient): auth rules, templates, the life of a platform
driven by the manager's admission and periods (on a backend without cgroups)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from merkat.service.config import load_config

SOLVER = """\
name: solver
controller: {policy: best-effort}
budget: 50
clusters:
  - name: main
    command: "for i in $(seq 1 5); do echo iteration $i/5; sleep 0.05; done"
    cpu: 1
    memory: 64
    monitor: {kind: log, regex: 'iteration (?P<work_done>\\\\d+)/(?P<work_total>\\\\d+)'}
"""


def h(key: str, ctype: str | None = None) -> dict[str, str]:
    out = {"Authorization": f"Bearer {key}"}
    if ctype:
        out["content-type"] = ctype
    return out


def submit(c: TestClient, key: str, text: str = SOLVER) -> Any:
    return c.post("/api/v1/platforms", content=text, headers=h(key, "application/yaml"))


def test_no_key_is_401_and_the_openapi_document_is_served(world: Any) -> None:
    c, _, keys = world
    assert c.get("/api/v1/platforms").status_code == 401
    assert c.get("/api/v1/platforms", headers=h("mk_wrong")).status_code == 401
    assert c.get("/api/v1/prices", headers={"X-API-Key": keys["bob"]}).status_code == 200
    doc = c.get("/api/v1/openapi.json").json()
    assert "/api/v1/platforms/{name}/metrics" in doc["paths"]
    assert "/api/v1/events/stream" in doc["paths"]


def test_own_objects_only_and_admin_sees_all(world: Any) -> None:
    c, _, keys = world
    assert submit(c, keys["alice"]).status_code == 201
    assert c.get("/api/v1/platforms/solver", headers=h(keys["bob"])).status_code == 404
    assert c.post("/api/v1/platforms/solver/stop", headers=h(keys["bob"])).status_code == 404
    assert c.get("/api/v1/platforms", headers=h(keys["bob"])).json() == {"items": []}
    assert [p["name"] for p in c.get("/api/v1/platforms", headers=h(keys["root"])).json()[
        "items"]] == ["solver"]
    assert c.get("/api/v1/accounts/alice", headers=h(keys["bob"])).status_code == 404
    assert c.get("/api/v1/accounts/alice", headers=h(keys["alice"])).json() == {
        "name": "alice", "balance": "100"}
    r = c.post("/api/v1/transfers", json={"from": "alice", "to": "bob", "amount": "1.5"},
               headers=h(keys["bob"]))
    assert r.status_code == 404  # bob cannot spend alice's money
    assert c.get("/api/v1/events", headers=h(keys["bob"])).json()["items"] == []


@pytest.mark.parametrize(("text", "ctype", "detail"), [
    (SOLVER.replace("budget: 50", "budget: -5"), "application/yaml",
     "line 3: budget: Input should be greater than or equal to 0"),
    (SOLVER.replace("best-effort", "no-such-policy"), "application/yaml",
     "controller.policy: unknown policy 'no-such-policy'"),
    (SOLVER.replace("budget: 50", "budget: 500"), "application/yaml",
     "budget: 500 exceeds alice's balance 100"),
    ('{"name": "x", "budget": 1}', "application/json", "controller: Field required"),
    ("<platform><name>x</name>", "application/xml", "not valid XML"),
])
def test_bad_templates_are_422_naming_the_field_and_change_nothing(
        world: Any, text: str, ctype: str, detail: str) -> None:
    c, _, keys = world
    r = c.post("/api/v1/platforms", content=text, headers=h(keys["alice"], ctype))
    assert r.status_code == 422, r.text
    assert detail in r.json()["detail"]
    assert c.get("/api/v1/platforms", headers=h(keys["alice"])).json() == {"items": []}
    assert c.get("/api/v1/accounts/alice", headers=h(keys["alice"])).json()["balance"] == "100"


def test_invalid_bodies_name_the_field(world: Any) -> None:
    c, _, keys = world
    assert submit(c, keys["alice"]).status_code == 201
    r = c.post("/api/v1/platforms/solver/metrics", json={"work_done": -1},
               headers=h(keys["alice"]))
    assert r.status_code == 422 and r.json()["detail"].startswith("work_done: ")
    r = c.post("/api/v1/transfers", json={"from": "alice", "to": "bob"}, headers=h(keys["alice"]))
    assert r.status_code == 422 and r.json()["detail"] == "amount: Field required"
    assert submit(c, keys["alice"]).status_code == 409  # the name is taken


def test_a_platform_lives_queued_running_finished_and_pays(world: Any) -> None:
    c, m, keys = world
    assert submit(c, keys["alice"]).json()["state"] == "queued"
    assert m.admit() == ["solver"]
    assert c.get("/api/v1/accounts/app:solver", headers=h(keys["alice"])).json()["balance"] == "50"
    m.tick()
    show = c.get("/api/v1/platforms/solver", headers=h(keys["alice"])).json()
    assert show["state"] == "running"
    (vm,) = show["vms"]
    assert vm["id"] == "solver/vm1" and vm["node"] == "node0" and vm["state"] == "running"
    assert vm["allocation"]["cpu"] > 0 and set(vm["bid"]) == {"cpu", "memory"}
    deadline = time.monotonic() + 10
    while c.get("/api/v1/platforms/solver", headers=h(keys["alice"])).json()[
            "state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        m.tick()
    show = c.get("/api/v1/platforms/solver", headers=h(keys["alice"])).json()
    assert show["state"] == "finished" and show["outcome"] == "finished"  # no deadline
    assert show["reason"] == "finished"
    assert show["spent"] > 0
    logs = c.get("/api/v1/platforms/solver/logs", headers=h(keys["alice"])).text
    assert "iteration 5/5" in logs
    prices = c.get("/api/v1/prices", headers=h(keys["alice"])).json()
    assert set(prices) >= {"time", "cpu", "memory"}
    hist = c.get("/api/v1/prices/history", headers=h(keys["alice"])).json()["items"]
    assert len(hist) >= 2
    kinds = [e["kind"] for e in c.get("/api/v1/events", headers=h(keys["alice"])).json()["items"]]
    assert kinds[:3] == ["submitted", "admitted", "vm-start"] and "vm-exit" in kinds
    assert {"state", "charge"} <= set(kinds)
    page = c.get("/api/v1/events?after=1&limit=1", headers=h(keys["alice"])).json()
    assert [e["id"] for e in page["items"]] == [2] and page["next"] == 2
    assert m.store.ledger.audit().ok


def test_user_stop_and_pushed_metrics(world: Any) -> None:
    c, m, keys = world
    text = SOLVER.replace("seq 1 5", "seq 1 500").replace(
        "monitor: {kind: log, regex: 'iteration (?P<work_done>\\\\d+)/(?P<work_total>\\\\d+)'}",
        "monitor: {kind: push}")
    assert submit(c, keys["alice"], text).status_code == 201
    m.admit()
    m.tick()
    r = c.post("/api/v1/platforms/solver/metrics", json={"work_done": 3, "work_total": 10},
               headers=h(keys["alice"]))
    assert r.status_code == 202
    assert m.live["solver"].tracker.metrics().work_left == 7
    r = c.post("/api/v1/platforms/solver/stop", headers=h(keys["alice"]))
    assert r.json()["state"] == "stopped"  # the new state, not the one before the stop
    m.tick()
    show = c.get("/api/v1/platforms/solver", headers=h(keys["alice"])).json()
    assert show["state"] == "stopped" and show["outcome"] == "stopped"
    assert show["reason"] == "stopped by the user"
    assert show["vms"] == []


def test_the_event_stream_sends_server_sent_events(tmp_path: Path) -> None:
    import http.client
    import uuid

    from merkat.service.server import Service

    cfg = load_config(None, data_dir=tmp_path, port=0, period=3600.0, admission=3600.0,
                      backend={"cgroup_root": str(tmp_path / "none"),
                               "cgroup_prefix": f"merkat-sse-{uuid.uuid4().hex[:6]}"})
    svc = Service(cfg, on_period=lambda rec: None)
    key = svc.store.add_user("alice", budget=100_000_000)
    svc.start_background()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
        conn.request("GET", "/api/v1/events/stream?poll=0.1", headers=h(key))
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("content-type", "").startswith("text/event-stream")
        assert resp.readline() == b": merkat events\n"
        svc.store.add_event("state", "hello", "p", "alice")
        svc.store.add_event("state", "not hers", "q", "bob")
        svc.store.add_event("state", "again", "p", "alice")
        lines = [resp.readline() for _ in range(8)]
        conn.close()
        data = [line for line in lines if line.startswith(b"data: ")]
        assert [json.loads(d[6:])["message"] for d in data] == ["hello", "again"]
        assert lines[0] == b"\n" and lines[1].startswith(b"id: ") and lines[2] == b"event: state\n"
    finally:
        svc.shutdown()


def test_boosting_a_running_platform_moves_the_owners_money_once(world: Any) -> None:
    """Tycoon §3's boosting on the live platform: credits from the owner to the running
    platform's account (its controller then spreads the larger balance over the periods
    left); refused, with nothing moved, for someone else's platform, a bad amount, more than
    the owner has, or a platform that has ended."""
    c, m, keys = world
    text = SOLVER.replace("seq 1 5", "seq 1 500")
    assert submit(c, keys["alice"], text).status_code == 201
    m.admit()
    m.tick()
    alice = h(keys["alice"])

    def balance(name: str) -> str:
        return str(c.get(f"/api/v1/accounts/{name}", headers=alice).json()["balance"])

    before_app, before_alice = balance("app:solver"), balance("alice")
    r = c.post("/api/v1/platforms/solver/boost",
               json={"amount": "12.5", "idempotency_key": "b1"}, headers=alice)
    assert r.status_code == 201, r.text
    assert r.json()["amount"] == "12.5" and r.json()["name"] == "solver"
    assert float(balance("app:solver")) == float(before_app) + 12.5
    assert float(balance("alice")) == float(before_alice) - 12.5
    again = c.post("/api/v1/platforms/solver/boost",
                   json={"amount": "12.5", "idempotency_key": "b1"}, headers=alice)
    assert again.status_code == 201 and float(balance("alice")) == float(before_alice) - 12.5
    kinds = [e["kind"] for e in c.get("/api/v1/events", headers=alice).json()["items"]]
    assert kinds.count("boost") == 1
    snapshot = (balance("alice"), balance("app:solver"))
    for body, who, code in (
        ({"amount": "1"}, keys["bob"], 404),
        ({"amount": "0"}, keys["alice"], 422),
        ({"amount": "-3"}, keys["alice"], 422),
        ({"amount": "lots"}, keys["alice"], 422),
        ({"amount": "1000000"}, keys["alice"], 422),  # more than alice has
        ({"amount": "1", "extra": 1}, keys["alice"], 422),
    ):
        r = c.post("/api/v1/platforms/solver/boost", json=body, headers=h(who))
        assert r.status_code == code, (body, r.text)
    assert (balance("alice"), balance("app:solver")) == snapshot
    m.tick()  # the boosted platform goes on
    assert c.get("/api/v1/platforms/solver", headers=alice).json()["state"] == "running"
    c.post("/api/v1/platforms/solver/stop", headers=alice)
    m.tick()
    r = c.post("/api/v1/platforms/solver/boost", json={"amount": "1"}, headers=alice)
    assert r.status_code == 409 and "only a waiting, running or suspended" in r.json()["detail"]
    assert m.store.ledger.audit().ok


def test_a_platform_admitted_between_periods_starts_before_the_next_one(world: Any) -> None:
    """Merkat §4.2.2: the applications manager checks the queue every admission interval and
    starts what can start at the last prices, without waiting for the next period."""
    c, m, keys = world
    assert submit(c, keys["alice"]).status_code == 201
    m.admit()
    m.tick()  # the first period: solver runs, the market has a price
    assert m.driver.admits_between
    assert submit(c, keys["alice"], SOLVER.replace("name: solver", "name: later")).status_code == 201
    assert m.admit() == ["later"]
    m.next_period = m.clock() + 1.0  # the next period is a second away
    assert m.start_queued() == ["later"]
    show = c.get("/api/v1/platforms/later", headers=h(keys["alice"])).json()
    assert show["state"] == "running" and show["vms"][0]["state"] == "running"
    assert show["vms"][0]["allocation"]["cpu"] > 0
    paid = show["spent"]
    assert 0 < paid <= 1.0 * sum(show["vms"][0]["bid"].values())  # at most a period's bid
    assert m.start_queued() == []  # nothing left in the queue
    kinds = [e["kind"] for e in c.get("/api/v1/events?platform=later",
                                      headers=h(keys["alice"])).json()["items"]]
    assert "vm-start" in kinds and "charge" in kinds


def test_the_listening_socket_says_tcp_so_responses_are_not_held_by_nagle(tmp_path: Path) -> None:
    """asyncio sets TCP_NODELAY only on accepted sockets whose proto is IPPROTO_TCP; with proto 0
    every keep-alive GET waited ~40 ms for the client's delayed ACK (90 requests/s instead of
    2,400 in `merkat bench service`). The accepted sockets inherit the listening socket's proto."""
    import asyncio.base_events
    import socket
    import uuid

    from merkat.service.server import Service

    cfg = load_config(None, data_dir=tmp_path, port=0, period=3600.0, admission=3600.0,
                      backend={"cgroup_root": str(tmp_path / "none"),
                               "cgroup_prefix": f"merkat-tcp-{uuid.uuid4().hex[:6]}"})
    svc = Service(cfg, on_period=lambda rec: None)
    try:
        svc._uvicorn()
        assert svc.sock.proto == socket.IPPROTO_TCP
        svc.sock.listen()
        client = socket.create_connection(("127.0.0.1", svc.port))
        conn, _ = svc.sock.accept()
        asyncio.base_events._set_nodelay(conn)  # what asyncio's transport does on accept
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        conn.close()
        client.close()
    finally:
        svc.sock.close()
        svc.manager.close()
