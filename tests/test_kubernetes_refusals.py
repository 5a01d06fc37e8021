"""Resizes the cluster may refuse (KEP-1287), on the emulator: a Deferred grow leaves the VM
billed at the allocation the kubelet applied (the difference refunded, an event), its
controller sees the applied share, the resize is sent again after RETRY_PERIODS periods and is
applied once the node has room; InProgress and Infeasible are read as the API reports them; a
resize under resizePolicy RestartContainer restarts the container, which is reported."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from merkat.backends.kubernetes import KubernetesBackend, PodTemplate
from merkat.backends.kubernetes.emulator import TOKEN, KubeEmulator, emulated_client
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.kubernetes.objects import pod_name
from merkat.backends.kubernetes.refusals import RETRY_PERIODS
from merkat.core.backend import Plan, VMPlacement
from merkat.core.model import MICRO
from merkat.service.manager import Manager
from merkat.service.templates import parse
from test_kubernetes_recovery import manager

A_MAIN1_POD = pod_name("a/vm1", "main")
A_VMS1_POD = pod_name("a/vm1", "vms")

pytestmark = pytest.mark.kubernetes

TWO_CORES = """\
name: {name}
controller: {{policy: best-effort}}
budget: 10
clusters:
  - name: main
    command: exec sleep 600
    cpu: 2
    memory: 64
    min_memory: 16
"""


def cluster(cpu: str = "2", **kw: object) -> KubeEmulator:
    emu = KubeEmulator(**kw)  # type: ignore[arg-type]
    emu.namespaces.add("merkat")
    emu.add_node("node-0", cpu, "4Gi")
    return emu


def foreign_pod(emu: KubeEmulator, node: str, cpu: str) -> None:
    """Another tenant's pod on ``node`` (not merkat's: the market does not see it)."""
    res = {"cpu": cpu, "memory": "16Mi"}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "merkat"},
            "spec": {"nodeName": node, "containers": [{"name": "vm", "image": "nginx",
                                                      "resources": {"requests": res,
                                                                    "limits": res}}]}}
    with httpx2.Client(transport=emu.transport(), base_url="https://k") as http:
        r = http.post("/api/v1/namespaces/merkat/pods", json=body,
                      headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 201, r.text


def resize_calls(emu: KubeEmulator, pod: str) -> list[dict[str, object]]:
    return [c.body for c in emu.calls
            if c.verb == "PATCH" and c.path.endswith(f"/pods/{pod}/resize")]


def refunded_half(m: Manager, period: int, bid_cpu: int, state: str, event: str) -> None:
    """a/vm1 got back half its CPU charge of ``period`` (it held 1 of the 2 cores billed) in
    one transfer from the provider, and one ``resize-refused`` event starts with ``event``."""
    refunds = [t for t in m.store.ledger.history("app:a")
               if t.idempotency_key == f"unapplied/a/vm1/{period}"]
    assert [(t.payer, t.amount) for t in refunds] == [(m.config.provider, round(bid_cpu / 2))]
    assert refunds[0].reason == f"refund: a/vm1 held 1 cores of the 2 cores billed (resize {state})"
    (ev,) = [e for e in m.store.events(platform="a") if e["kind"] == "resize-refused"]
    assert ev["message"].startswith(f"a/vm1: resize to 2 cores {state} ({event}")


def sharing(tmp_path: Path, emu: KubeEmulator) -> Manager:
    """Two 2-core best-effort platforms, a and b, running on node-0 (2 cores): 1 core each."""
    m = manager(tmp_path, emu)
    m.store.add_user("alice", budget=100_000_000)
    for name in ("a", "b"):
        m.submit("alice", parse(TWO_CORES.format(name=name), "x.yaml"))
    m.admit()
    m.tick()
    m.tick()
    return m


def test_a_deferred_resize_leaves_the_vm_billed_at_its_applied_allocation(tmp_path: Path) -> None:
    emu = cluster("2")
    m = sharing(tmp_path, emu)
    assert [v["applied"]["cpu"] for v in m.vms("a") + m.vms("b")] == [1.0, 1.0]
    m.stop("b")                       # b's pod goes: a would have the node's 2 cores...
    foreign_pod(emu, "node-0", "500m")  # ...but another tenant's pod takes half a core
    m.tick()                          # the market gives a 2 cores: the grow is Deferred
    (vm,) = m.platform.apps["a"].vms
    assert vm.alloc["cpu"] == 2.0
    assert resize_calls(emu, A_MAIN1_POD)[-1] == {"spec": {"containers": [{"name": "vm",
        "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}]}}
    bid_cpu = round(vm.bid["cpu"] * MICRO)  # what a paid for its CPU in that period
    period = m.platform.index - 1
    m.tick()                          # the next read: Deferred, 1 core applied
    (v,) = m.vms("a")
    assert (v["resize"], v["requested"]["cpu"], v["applied"]["cpu"]) == ("Deferred", 2.0, 1.0)
    assert v["allocation"]["cpu"] == 1.0  # the record (and the controller's view) holds 1 core
    refunded_half(m, period, bid_cpu, "Deferred", "Node didn't have enough resource); it holds "
                  "1 cores and is billed for that")
    # Still Deferred: refunded every period (one event only), sent again after RETRY_PERIODS.
    n = len(resize_calls(emu, A_MAIN1_POD))
    for _ in range(RETRY_PERIODS - 1):
        m.tick()
    assert len(resize_calls(emu, A_MAIN1_POD)) == n + 1  # the retry: the whole size
    assert resize_calls(emu, A_MAIN1_POD)[-1] == {"spec": {"containers": [{"name": "vm",
        "resources": {"requests": {"cpu": "2", "memory": "64Mi"},
                      "limits": {"cpu": "2", "memory": "64Mi"}}}]}}
    assert any(e["kind"] == "resize-retry" for e in m.store.events(platform="a"))
    assert len([t for t in m.store.ledger.history("app:a")
                if (t.idempotency_key or "").startswith("unapplied/")]) == RETRY_PERIODS
    assert len([e for e in m.store.events(platform="a") if e["kind"] == "resize-refused"]) == 1
    # The other tenant's pod leaves: the kubelet applies the grow; billing is whole again.
    emulated_client(emu, "merkat").delete(__import__(
        "lightkube.resources.core_v1", fromlist=["Pod"]).Pod, "other", namespace="merkat")
    m.tick()
    m.tick()
    (v,) = m.vms("a")
    assert (v["resize"], v["applied"]["cpu"], v["allocation"]["cpu"]) == ("Done", 2.0, 2.0)
    assert m.store.ledger.audit().ok
    m.close()


def live_on(emu: KubeEmulator, tmp_path: Path, template: PodTemplate) -> KubernetesLive:
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    kube.add_app("a", template)  # no launcher registered: the app's template is used
    return KubernetesLive(kube, logs=tmp_path / "logs")


def test_in_progress_and_infeasible_are_read_as_the_api_reports_them(tmp_path: Path) -> None:
    emu = cluster("4", resize_delay=3)
    live = live_on(emu, tmp_path, PodTemplate())
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("a/vm1", "a", 0),),
                    allocations={"a/vm1": {"cpu": 1.0}}))
    live.apply(Plan(40.0, 40.0, allocations={"a/vm1": {"cpu": 2.0}}))
    live.apply(Plan(80.0, 40.0, allocations={"a/vm1": {"cpu": 2.0}}))  # reads it in progress
    assert live.unapplied() == {"a/vm1": {"state": "InProgress", "message": "",
                                          "short": {"cpu": (2.0, 1.0)}, "current": True}}
    live.apply(Plan(120.0, 40.0, allocations={"a/vm1": {"cpu": 2.0}}))
    assert live.unapplied() == {}  # actuated three requests later
    emu.nodes["node-0"]["status"]["allocatable"]["cpu"] = "2500m"  # the node shrank
    live.apply(Plan(160.0, 40.0, allocations={"a/vm1": {"cpu": 3.0}}))
    n = len(resize_calls(emu, A_VMS1_POD))
    for k in range(2 * RETRY_PERIODS):
        live.apply(Plan(200.0 + 40 * k, 40.0, allocations={"a/vm1": {"cpu": 3.0}}))
        (state,) = live.unapplied().values()
        assert state["state"] == "Infeasible" and state["short"] == {"cpu": (3.0, 2.0)}
    assert len(resize_calls(emu, A_VMS1_POD)) == n  # an Infeasible resize is not retried


def test_restart_container_policy_applies_memory_decreases_with_a_restart(tmp_path: Path) -> None:
    emu = cluster("4")
    live = live_on(emu, tmp_path, PodTemplate(memory_restart=True, memory_mib=64))
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("a/vm1", "a", 0),),
                    allocations={"a/vm1": {"cpu": 1.0, "memory": 512.0}}))
    live.apply(Plan(40.0, 40.0, allocations={"a/vm1": {"cpu": 1.0, "memory": 256.0}}))
    assert resize_calls(emu, A_VMS1_POD)[-1] == {"spec": {"containers": [{"name": "vm",
        "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}}]}}
    live.apply(Plan(80.0, 40.0, allocations={"a/vm1": {"cpu": 1.5, "memory": 256.0}}))
    assert [(r.op, r.error) for r in live.report] == [("restart", None), ("resize", None)]
    status = emu.pod("merkat", A_VMS1_POD)["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1 and status["resources"]["limits"]["memory"] == "256Mi"
    live.apply(Plan(120.0, 40.0, allocations={"a/vm1": {"cpu": 1.5, "memory": 256.0}}))
    assert live.report == []  # a CPU change (NotRequired) did not restart it
    assert status["restartCount"] == 1


def test_an_infeasible_resize_leaves_the_vm_billed_at_its_applied_allocation(
        tmp_path: Path) -> None:
    """The node shrinks (allocatable 2 -> 1.5 cores) while the market, which sees it a period
    later, gives a 2 cores: the kubelet declares the grow Infeasible; a is refunded the half it
    did not get, one event says so, and the next clearing fits the node again."""
    emu = cluster("2")
    m = sharing(tmp_path, emu)
    m.stop("b")
    emu.nodes["node-0"]["status"]["allocatable"]["cpu"] = "1500m"
    m.tick()                          # the market still sees 2 cores: a asks 2, Infeasible
    (vm,) = m.platform.apps["a"].vms
    bid_cpu, period = round(vm.bid["cpu"] * MICRO), m.platform.index - 1
    assert vm.alloc["cpu"] == 2.0
    m.tick()                          # read: Infeasible, 1 core applied
    refunded_half(m, period, bid_cpu, "Infeasible", "Node didn't have enough capacity")
    m.tick()
    m.tick()                          # the market sees 1.5 cores: a fits, applied in full
    (v,) = m.vms("a")
    assert (v["resize"], v["applied"]["cpu"], v["allocation"]["cpu"]) == ("Done", 1.5, 1.5)
    assert m.store.ledger.audit().ok
    m.close()


def test_a_template_asks_for_resize_policy_restart_container_with_memory_resize(
        tmp_path: Path) -> None:
    """``memory_resize: restart`` in a cluster reaches the pod as the memory resizePolicy
    RestartContainer (decreases applied by a restart); a wrong value names its field."""
    from merkat.service.templates import TemplateError

    with pytest.raises(TemplateError, match=r"clusters\.0\.memory_resize"):
        parse(TWO_CORES.format(name="x") + "    memory_resize: later\n", "x.yaml")
    emu = cluster("4")
    m = manager(tmp_path, emu)
    m.store.add_user("alice", budget=100_000_000)
    for name, extra in (("r", "    memory_resize: restart\n"), ("k", "")):
        m.submit("alice", parse(TWO_CORES.format(name=name) + extra, "x.yaml"))
    m.admit()
    m.tick()
    policies = {name: {p["resourceName"]: p["restartPolicy"] for p in emu.pod(
        "merkat", pod_name(f"{name}/vm1", "main"))["spec"]["containers"][0]["resizePolicy"]}
        for name in "rk"}
    assert policies == {"r": {"cpu": "NotRequired", "memory": "RestartContainer"},
                        "k": {"cpu": "NotRequired", "memory": "NotRequired"}}
    m.close()
