"""Prometheus metrics (``merkat.web.metrics``) fed by real periods, read back through
``GET /metrics`` with prometheus_client's text parser."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.core.period import MICRO, AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.web.metrics import MIB, MarketMetrics, MarketSnapshot
from merkat.web.routes import install
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import SloConfig, build_workload
from merkat.workload.lublin import write as write_lublin
from merkat.workload.swf import read_swf
from merkat.worlds.merkat.trace import MarketConfig, simulate_market

NAME = re.compile(r"^merkat_[a-z_]+$")


def scrape(client: TestClient) -> dict[str, tuple[str, dict[tuple[tuple[str, str], ...], float]]]:
    """name -> (type, {sorted labels: value}) for every sample of ``GET /metrics``."""
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, tuple[str, dict[tuple[tuple[str, str], ...], float]]] = {}
    for fam in text_string_to_metric_families(r.text):
        if not fam.name.startswith("merkat_"):
            continue
        samples = out.setdefault(fam.name, (fam.type, {}))[1]
        for s in fam.samples:
            key = (("__name__", s.name), *sorted(s.labels.items()))
            samples[key] = s.value
    return out


def value(m: dict[str, tuple[str, dict]], sample: str, **labels: str) -> float:  # type: ignore[type-arg]
    fam = sample.removesuffix("_total").removesuffix("_bucket").removesuffix("_count")
    fam = fam.removesuffix("_sum")
    key = (("__name__", sample), *sorted(labels.items()))
    return float(m[fam][1][key])


def two_hosts_platform() -> tuple[Driver, SimBackend, MemoryLedger]:
    ledger = MemoryLedger()
    backend = SimBackend(trade_memory=True)
    hosts = Hosts(("n0", "n1"), np.array([[4.0, 8192.0], [2.0, 4096.0]]))
    platform = Platform(hosts, period=60.0, reserve={"cpu": 0.01, "memory": 1e-5})
    driver = Driver(platform, backend, Economy(ledger))
    for k in range(3):
        driver.submit(
            AppSpec(
                id=f"a{k}", policy="best-effort", size=2,
                vm_size={"cpu": 1.0, "memory": 1024.0}, vm_min={"memory": 256.0},
                submit_time=0.0, budget=100.0 + 50 * k,
            ),
            RigidApp(vms=2, work_total=1e6, cpu=1.0, memory=1024.0),
        )  # fmt: skip
    return driver, backend, ledger


def test_metrics_match_the_platform_after_each_period() -> None:
    driver, _, ledger = two_hosts_platform()
    platform = driver.platform
    metrics = MarketMetrics()
    app = FastAPI()
    install(app, metrics, dashboard=False)
    client = TestClient(app)
    before = scrape(client)
    assert before["merkat_periods"][0] == "counter"
    assert value(before, "merkat_periods_total") == 0
    for k in range(3):
        rec = driver.step(60.0 * k)
        metrics.observe_platform(platform, rec, duration_s=0.003 * (k + 1))
    m = scrape(client)
    # Names follow the rules; types are what they say.
    for name in m:
        assert NAME.match(name), name
    types = {n: t for n, (t, _) in m.items()}
    assert types["merkat_price_credits"] == "gauge"
    assert types["merkat_credits_charged"] == "counter"
    assert types["merkat_period_duration_seconds"] == "histogram"
    for g in ("merkat_allocated", "merkat_capacity", "merkat_node_allocated", "merkat_vms",
              "merkat_platforms", "merkat_node_vms", "merkat_node_capacity"):  # fmt: skip
        assert types[g] == "gauge", g
    # Prices: per core, and per byte of memory (the market counts MiB).
    assert value(m, "merkat_price_credits", resource="cpu", unit="cores") == pytest.approx(
        rec.prices["cpu"]
    )
    assert value(m, "merkat_price_credits", resource="memory", unit="bytes") == pytest.approx(
        rec.prices["memory"] / MIB
    )
    assert rec.prices["cpu"] > 0
    assert value(m, "merkat_capacity", resource="cpu", unit="cores") == 6.0
    assert value(m, "merkat_capacity", resource="memory", unit="bytes") == 12288 * MIB
    assert value(m, "merkat_allocated", resource="cpu", unit="cores") == pytest.approx(
        rec.allocated["cpu"]
    )
    # Per node: the VMs the platform placed there and their allocations.
    for h, node in enumerate(("n0", "n1")):
        vms = [vm for a in platform.apps.values() for vm in a.vms if vm.host == h]
        assert value(m, "merkat_node_vms", node=node) == len(vms)
        assert value(m, "merkat_node_allocated", node=node, resource="cpu", unit="cores") == (
            pytest.approx(sum(vm.alloc.get("cpu", 0.0) for vm in vms))
        )
    assert value(m, "merkat_node_capacity", node="n1", resource="memory", unit="bytes") == (
        4096 * MIB
    )
    node_cpu = sum(
        value(m, "merkat_node_allocated", node=n, resource="cpu", unit="cores")
        for n in ("n0", "n1")
    )
    assert node_cpu == pytest.approx(rec.allocated["cpu"])
    # States: every VM and platform counted once; absent states show 0.
    assert value(m, "merkat_vms", state="running") + value(m, "merkat_vms", state="booting") == 6
    assert value(m, "merkat_vms", state="migrating") == 0
    assert value(m, "merkat_platforms", state="running") == 3
    assert value(m, "merkat_platforms", state="finished") == 0
    # Counters: sums over the periods.
    recs = platform.records
    assert value(m, "merkat_periods_total") == 3
    assert value(m, "merkat_admissions_total") == 3
    assert value(m, "merkat_vm_creations_total") == sum(r.created for r in recs) == 6
    charged = sum(r.charged for r in recs)
    assert charged > 0 and charged == ledger.balance("provider")
    assert value(m, "merkat_credits_charged_total") == pytest.approx(charged / MICRO)
    assert value(m, "merkat_period_duration_seconds_count") == 3
    assert value(m, "merkat_period_duration_seconds_sum") == pytest.approx(0.018)
    assert value(m, "merkat_period_duration_seconds_bucket", le="0.005") == 1
    assert value(m, "merkat_last_period_timestamp_seconds") == 120.0
    # No per-user or per-platform ids anywhere in the labels.
    for _, samples in m.values():
        for key in samples:
            for label, v in key[1:]:
                assert label in ("resource", "unit", "node", "state", "le"), label
                assert not v.startswith("a"), v


def test_operation_counters_sum_a_simulated_run(tmp_path: Path) -> None:
    """A loaded simulated market (suspends, resumes): the counters are the records' sums."""
    write_lublin(tmp_path / "t.swf", 120, seed=2, nodes=32)
    cluster = Cluster(4, 8, None)
    w = build_workload(read_swf(tmp_path / "t.swf"), cluster, slo=SloConfig(1.2, 3.0, 60.0))
    out = simulate_market(w, cluster, MarketConfig(policy="deadline-strict", period=300.0))
    metrics = MarketMetrics()
    for rec in out.records:
        metrics.observe(rec, MarketSnapshot(rec.time, rec.prices, rec.allocated, rec.capacity))
    app = FastAPI()
    install(app, metrics, dashboard=False)
    m = scrape(TestClient(app))
    for sample, field in (
        ("merkat_suspends_total", "suspended"),
        ("merkat_resumes_total", "resumed"),
        ("merkat_migrations_total", "migrations"),
        ("merkat_vm_destructions_total", "destroyed"),
    ):
        assert value(m, sample) == sum(getattr(r, field) for r in out.records), sample
    assert value(m, "merkat_suspends_total") > 0
    assert value(m, "merkat_periods_total") == len(out.records)
    last = out.records[-1]
    assert value(m, "merkat_price_credits", resource="cpu", unit="cores") == last.prices["cpu"]
