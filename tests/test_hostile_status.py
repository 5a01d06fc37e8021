"""Hostile tenants against the status views (issue 26): what one user's monitor reports or
pushes (absurd, huge, past its deadline) never breaks ``platform list`` / ``show`` /
``events`` for her or anyone else; no one else's platform can be deleted or seen through
them. In process (FastAPI TestClient, a backend without cgroups)."""

from __future__ import annotations

import json
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

TEMPLATE = """\
name: {name}
controller: {{policy: best-effort, reference: 1}}
budget: 5
clusters:
  - name: a
    command: "sleep 60"
    cpu: 0.5
    memory: 64
    monitor: {{kind: push}}
  - name: b
    command: "sleep 60"
    cpu: 0.5
    memory: 64
    depends: a
    monitor: {{kind: command, command: "echo work_done=0 work_total=1e308"}}
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[TestClient, Manager, dict[str, str]]]:
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    store = open_store(cfg.database)
    keys = {"alice": store.add_user("alice", budget=100_000_000),
            "bob": store.add_user("bob", budget=100_000_000)}
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield c, m, keys
    m.close()


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_absurd_readings_past_the_deadline_never_break_the_views(world: Any) -> None:
    c, m, keys = world
    for who in ("alice", "bob"):
        r = c.post("/api/v1/platforms", content=TEMPLATE.format(name=f"p-{who}"),
                   headers={**h(keys[who]), "content-type": "application/yaml"})
        assert r.status_code == 201, r.text
    m.admit()
    for _ in range(4):
        m.tick()
    r = c.post("/api/v1/platforms/p-alice/metrics", headers=h(keys["alice"]),
               json={"work_done": 1, "work_total": 1e308, "progress_rate": 1e-300})
    assert r.status_code == 202
    import time

    time.sleep(1.2)  # past both deadlines
    m.tick()
    for who in ("alice", "bob"):
        listed = c.get("/api/v1/platforms", headers=h(keys[who]))
        assert listed.status_code == 200
        (p,) = listed.json()["items"]  # her own only
        assert p["name"] == f"p-{who}"
        show = c.get(f"/api/v1/platforms/p-{who}", headers=h(keys[who]))
        assert show.status_code == 200, show.text
        body = show.json()
        json.dumps(body, allow_nan=False)  # every number finite
        assert p["outcome"].startswith("running: late by") or p["state"] != "running", p
        for cl in body["clusters"]:
            assert cl["rate_needed"] is None or cl["rate_needed"] >= 0
    # another user's platform: not listed, not shown, not deleted, its events not seen
    assert c.get("/api/v1/platforms/p-alice", headers=h(keys["bob"])).status_code == 404
    assert c.delete("/api/v1/platforms/p-alice", headers=h(keys["bob"])).status_code == 404
    ev = c.get("/api/v1/events?tail=100&platform=p-alice", headers=h(keys["bob"])).json()
    assert ev["items"] == []
    assert c.get("/api/v1/events?tail=5&since=1e400", headers=h(keys["bob"])).status_code == 422


def test_a_deadline_no_clock_can_show_is_refused_at_submit(world: Any) -> None:
    """``reference: 1e300`` was admitted: the deadline (submission + 1e300 s) then made the
    owner's ``merkat platform list`` (and an admin's) fail with ``OverflowError`` and its
    ``deadline-met`` event hold a 300-digit number. Refused (422 naming the field)."""
    c, _, keys = world
    for ref in ("1e300", "315360001"):
        text = TEMPLATE.format(name="far").replace("reference: 1", f"reference: {ref}")
        r = c.post("/api/v1/platforms", content=text,
                   headers={**h(keys["alice"]), "content-type": "application/yaml"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith("template line 2: controller.reference: "), r.text
    ok = TEMPLATE.format(name="far").replace("reference: 1", "reference: 315360000")
    assert c.post("/api/v1/platforms", content=ok, headers={
        **h(keys["alice"]), "content-type": "application/yaml"}).status_code == 201


@pytest.mark.parametrize("since", ["nan", "inf", "-inf", "1e400", "-1"])
def test_a_price_history_since_no_time_is_422(world: Any, since: str) -> None:
    """``GET /prices/history?since=nan`` (or ``inf``) answered 200 with nothing, ``-inf`` the
    whole history: bounded as ``GET /events``' ``since`` is (Unix seconds, 0 to 1e11)."""
    c, _, keys = world
    r = c.get(f"/api/v1/prices/history?since={since}", headers=h(keys["bob"]))
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("since: "), r.text
    assert c.get("/api/v1/prices/history?since=0", headers=h(keys["bob"])).status_code == 200
