"""The live service's ``/metrics`` and dashboard, in process: Prometheus' text parser reads
``/metrics`` and every figure is checked against what the REST API says."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.web.app import create_app
from merkat.web.metrics import MIB
from test_web_metrics import scrape, value

SLEEPER = """\
name: {name}
controller: {{policy: best-effort}}
budget: {budget}
clusters:
  - name: main
    command: "exec sleep 60"
    count: 2
    cpu: 1
    memory: 64
    min_memory: 16
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[TestClient, Manager, dict[str, str]]]:
    cfg = load_config(None, data_dir=tmp_path, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups"), "split": 2})  # fmt: skip
    store = open_store(cfg.database)
    keys = {"alice": store.add_user("alice", budget=100_000_000),
            "root": store.add_user("root", admin=True)}  # fmt: skip
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield c, m, keys
    m.close()


def get(c: TestClient, key: str, path: str) -> Any:
    r = c.get(f"/api/v1{path}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_metrics_agree_with_the_api(world: Any) -> None:
    c, m, keys = world
    for name, budget in (("small", 20), ("large", 60)):
        r = c.post("/api/v1/platforms", content=SLEEPER.format(name=name, budget=budget),
                   headers={"Authorization": f"Bearer {keys['alice']}",
                            "content-type": "application/yaml"})  # fmt: skip
        assert r.status_code == 201, r.text
    m.admit()
    m.tick()
    m.tick()
    metrics = scrape(c)  # no API key needed
    root = keys["root"]
    prices = get(c, root, "/prices")
    assert value(metrics, "merkat_price_credits", resource="cpu", unit="cores") == pytest.approx(
        prices["cpu"]
    )
    assert value(metrics, "merkat_price_credits", resource="memory", unit="bytes") == (
        pytest.approx(prices["memory"] / MIB)
    )
    assert prices["cpu"] > 0
    nodes = get(c, root, "/nodes")["items"]
    assert len(nodes) == 2
    allocs = get(c, root, "/allocations")["items"]
    for n in nodes:
        name = n["name"]
        # the market's capacity is the allocatable (the reserve, 0.5 core by default, split
        # between the two nodes)
        assert n["allocatable"]["cpu"] == pytest.approx(n["cores"] - 0.25)
        assert value(metrics, "merkat_node_capacity", node=name, resource="cpu",
                     unit="cores") == pytest.approx(n["allocatable"]["cpu"])  # fmt: skip
        assert value(metrics, "merkat_node_capacity", node=name, resource="memory",
                     unit="bytes") == pytest.approx(n["allocatable"]["memory"] * MIB)  # fmt: skip
        assert value(metrics, "merkat_node_allocated", node=name, resource="cpu",
                     unit="cores") == pytest.approx(n["allocated"]["cpu"])  # fmt: skip
        assert value(metrics, "merkat_node_vms", node=name) == sum(
            1 for a in allocs if a["node"] == name
        )
    states = Counter(a["state"] for a in allocs)
    assert states["running"] == 4
    for state, n in states.items():
        assert value(metrics, "merkat_vms", state=state) == n
    platforms = get(c, root, "/platforms")["items"]
    for state, n in Counter(p["state"] for p in platforms).items():
        assert value(metrics, "merkat_platforms", state=state) == n
    spent = sum(get(c, root, f"/platforms/{p['name']}")["spent"] for p in platforms)
    assert spent > 0
    assert value(metrics, "merkat_credits_charged_total") == pytest.approx(spent)
    assert value(metrics, "merkat_admissions_total") == 2
    assert value(metrics, "merkat_periods_total") == 2
    assert value(metrics, "merkat_vm_creations_total") == 4
    assert value(metrics, "merkat_period_duration_seconds_count") == 2
    # The event log has the VM starts and the charges the dashboard shows.
    kinds = Counter(e["kind"] for e in get(c, root, "/events?limit=1000")["items"])
    assert kinds["vm-start"] == 4 and kinds["charge"] == 4  # 2 platforms x 2 periods


def test_dashboard_is_served_by_the_service(world: Any) -> None:
    c, _, _ = world
    r = c.get("/")
    assert r.status_code == 200 and '<form id="login"' in r.text
    assert c.get("/static/vendor/uPlot.iife.min.js").status_code == 200
