"""Truthful status on the Kubernetes backend, on the emulator: `platform show` gives each VM's
pod, its node, the CPU and memory its spec requests and what the kubelet applied; the banner and
`merkat nodes` name the backend (`kubernetes, N nodes`), not cgroups."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from merkat.backends.kubernetes.emulator import KubeEmulator
from merkat.backends.kubernetes.objects import pod_name
from merkat.service.api import create_app
from merkat.service.manager import Manager
from merkat.service.templates import parse
from test_kubernetes_recovery import live, manager
from test_service_recovery import SLEEP

A1_POD = pod_name("a/vm1", "main")
S1_POD = pod_name("s/vm1", "main")

pytestmark = pytest.mark.kubernetes


def cluster(nodes: int = 2, cpu: str = "2") -> KubeEmulator:
    emu = KubeEmulator()
    emu.namespaces.add("merkat")
    for k in range(nodes):
        emu.add_node(f"node-{k}", cpu, "4Gi")
    return emu


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[KubeEmulator, Manager, TestClient, dict[str, str]]]:
    emu = cluster()
    m = manager(tmp_path, emu)
    key = m.store.add_user("alice", budget=100_000_000)
    with TestClient(create_app(m)) as c:
        yield emu, m, c, {"Authorization": f"Bearer {key}"}
    m.close()


def test_platform_show_gives_the_pods_node_requested_and_applied_size(world) -> None:  # type: ignore[no-untyped-def]
    emu, m, c, auth = world
    for name in ("a", "b"):
        m.submit("alice", parse(SLEEP.format(name=name), "x.yaml"))
    m.admit()
    m.tick()
    m.tick()  # the second period's read of the pods sees what the kubelet applied
    p = c.get("/api/v1/platforms/a", headers=auth).json()
    (v,) = p["vms"]
    pod = emu.pod("merkat", A1_POD)
    assert v["node"] == pod["spec"]["nodeName"] and v["pod"] == f"merkat/{A1_POD}"
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    held = pod["status"]["containerStatuses"][0]["resources"]["limits"]
    assert v["requested"] == {"cpu": int(limits["cpu"].rstrip("m")) / 1000, "memory": 64.0}
    assert v["applied"] == {"cpu": int(held["cpu"].rstrip("m")) / 1000, "memory": 64.0}
    assert v["allocation"]["cpu"] == pytest.approx(v["applied"]["cpu"], abs=1e-3)
    assert v["allocation"]["cpu"] > 0 and v["resize"] == "Done"
    assert p["suspension"]["keeps_state"] is False
    assert p["suspension"]["note"].startswith("destructive: ")
    from merkat.cli.platforms import print_show

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_show(p)
    text = out.getvalue()
    assert "APPLIED CPU" in text and f"merkat/{A1_POD}" in text and "CGROUP" not in text
    assert "suspension: destructive" in text


def test_the_banner_and_nodes_name_the_kubernetes_backend(world, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    emu, m, c, auth = world
    nodes = c.get("/api/v1/nodes", headers=auth).json()
    assert nodes["backend"] == "kubernetes, 2 nodes"
    assert [n["name"] for n in nodes["items"]] == ["node-0", "node-1"]
    emu.nodes["node-1"]["spec"] = {"unschedulable": True}  # cordoned
    m.tick()
    assert c.get("/api/v1/nodes", headers=auth).json()["backend"] == "kubernetes, 1 node"
    assert live(cluster(3), tmp_path).label == "kubernetes, 3 nodes"


def test_the_server_banner_says_kubernetes_not_cgroups(tmp_path: Path) -> None:
    from merkat.service.server import Service

    srv = Service.__new__(Service)  # the banner alone: no port, no loop
    m = manager(tmp_path, cluster(2))
    srv.backend, srv.manager, srv.config, srv.sock = m.backend, m, m.config, None
    text = srv.banner()
    assert "kubernetes, 2 nodes" in text and "cgroups" not in text.split(";")[0]
    m.close()


def test_platform_show_gives_the_time_a_vm_under_notice_is_stopped(world) -> None:  # type: ignore[no-untyped-def]
    """A VM whose suspension was planned keeps its pod until its notice ends: the API's
    ``preempt_at`` and a ``notice:`` line under the table say until when."""
    from merkat.backends.kubernetes.notice import rfc3339
    from merkat.cli.platforms import print_show
    from merkat.core.backend import Plan

    emu, m, c, auth = world
    m.submit("alice", parse(SLEEP.format(name="s") + "    state: {grace: 1}\n", "x.yaml"))
    m.admit()
    m.tick()
    t = m.clock()
    m.backend.apply(Plan(t, m.platform.period, suspend=("s/vm1",)))  # as the market would
    p = c.get("/api/v1/platforms/s", headers=auth).json()
    (v,) = p["vms"]
    assert v["preempt_at"] == rfc3339(t + m.platform.period)
    assert v["node"] == emu.pod("merkat", S1_POD)["spec"]["nodeName"]  # still there
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_show(p)
    assert (f"notice: s/vm1's pod stops at {v['preempt_at']} (merkat.io/preempt-at)"
            in out.getvalue())
