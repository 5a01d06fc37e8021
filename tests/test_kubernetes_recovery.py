"""A restarted server re-adopts its pods (the Kubernetes backend's ``adopt``, docs/kubernetes.md
"Restart"), on the emulator: first the backend's contract op by op, then the service: a
Manager on the kubernetes backend dropped without ``close`` (as SIGKILL would), a second one on
the same store and emulator takes the running pod back (same uid, no DELETE or POST of it),
recreates the pod deleted meanwhile, keeps a suspended platform without pod, deletes the
orphan, and its period counter, controllers and bank go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from merkat.backends.kubernetes import KubernetesBackend
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.kubernetes.objects import pod_name
from merkat.control.types import AppStatus, VMState
from merkat.core.backend import Plan, VMPlacement
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.service.templates import parse
from test_kubernetes_live_adapter import Launch
from test_service_recovery import SLEEP, assert_recovery_events  # the local backend's scenario

A1_POD = pod_name("a/vm1", "default")
B1_POD = pod_name("b/vm1", "default")
C1_POD = pod_name("c/vm1", "default")
D1_POD = pod_name("d/vm1", "default")
E1_POD = pod_name("e/vm1", "default")
F1_POD = pod_name("f/vm1", "default")
FRZ1_POD = pod_name("frz/vm1", "main")
G1_POD = pod_name("g/vm1", "default")
GHOST1_POD = pod_name("ghost/vm1", "default")
GONE1_POD = pod_name("gone/vm1", "main")
RUN1_POD = pod_name("run/vm1", "main")

pytestmark = pytest.mark.kubernetes


def live(emu: KubeEmulator, tmp_path: Path) -> KubernetesLive:
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    return KubernetesLive(kube, logs=tmp_path / "logs")


def cluster() -> KubeEmulator:
    emu = KubeEmulator()
    emu.namespaces.add("merkat")
    emu.add_node("node-a", "4", "8Gi")
    emu.add_node("node-b", "4", "8Gi")
    emu.add_node("node-c", "4", "8Gi")
    return emu


def uid(emu: KubeEmulator, name: str) -> str:
    return str(emu.pod("merkat", name)["metadata"]["uid"])


def kubectl_delete(emu: KubeEmulator, name: str) -> None:
    from lightkube.resources.core_v1 import Pod

    emulated_client(emu, "merkat").delete(Pod, name, namespace="merkat", grace_period=0)


def writes(emu: KubeEmulator, since: int) -> list[tuple[str, str]]:
    """The requests after ``since`` that change something (not GET)."""
    return [(c.verb, c.path) for c in emu.calls[since:] if c.verb != "GET"]


def test_adopt_takes_pods_back_restarts_the_rest_and_reaps_orphans(tmp_path: Path) -> None:
    emu = cluster()
    first = live(emu, tmp_path)
    vms = ("a", "b", "c", "d", "e", "f", "g", "h", "ghost")
    for app in vms:
        first.register(app, lambda app, vm, i: Launch("sleep 1000"))
    hosts = {"a": 0, "b": 0, "c": 0, "d": 0, "e": 1, "f": 0, "g": 0, "h": 2, "ghost": 0}
    first.apply(Plan(0.0, 40.0, create=tuple(VMPlacement(f"{a}/vm1", a, h)
                                             for a, h in hosts.items()),
                     allocations={f"{a}/vm1": {"cpu": 0.5} for a in vms}))
    assert all(r.error is None for r in first.report), first.report
    before = {a: uid(emu, pod_name(f"{a}/vm1", "default")) for a in vms}
    emu.finish("merkat", C1_POD, code=1)  # c's container failed meanwhile
    kubectl_delete(emu, D1_POD)         # d's pod deleted behind merkat's back
    emu.nodes["node-b"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    emu.remove_node("node-c")                    # h's node left the cluster...
    emu.gc()                                     # ...and its pod with it
    # The server is killed (no close): a new one finds its pods by label.
    again = live(emu, tmp_path)
    assert again.adopted == {**{f"{a}/vm1": "node-a" for a in ("a", "b", "c", "f", "g", "ghost")},
                             "e/vm1": "node-b"}
    assert [n.name for n in again.node_list()] == ["node-a", "node-b"]  # the new host indices
    for app in vms:
        again.register(app, lambda app, vm, i: Launch("sleep 1000"))
    mark = len(emu.calls)
    # a: as stored -> taken back, no call at all.
    r = again.adopt("a/vm1", "a", 0, 0, {"cpu": 0.5})
    assert (r.op, r.error, r.node) == ("adopt", None, "node-a")
    assert uid(emu, A1_POD) == before["a"] and writes(emu, mark) == []
    # b: stored with 1.25 cores -> the same pod, resized once (PATCH .../resize).
    r = again.adopt("b/vm1", "b", 0, 0, {"cpu": 1.25})
    assert (r.op, r.error) == ("adopt", None) and uid(emu, B1_POD) == before["b"]
    assert writes(emu, mark) == [("PATCH", f"/api/v1/namespaces/merkat/pods/{B1_POD}/resize")]
    limits = emu.pod("merkat", B1_POD)["spec"]["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == "1250m"
    # c: its container failed -> the pod deleted and created again on its node.
    mark = len(emu.calls)
    r = again.adopt("c/vm1", "c", 0, 0, {"cpu": 0.5})
    assert (r.op, r.error, r.node) == ("restart", None, "node-a")
    assert writes(emu, mark) == [("DELETE", f"/api/v1/namespaces/merkat/pods/{C1_POD}"),
                                 ("POST", "/api/v1/namespaces/merkat/pods"),
                                 ("POST", f"/api/v1/namespaces/merkat/pods/{C1_POD}/binding")]
    assert uid(emu, C1_POD) != before["c"]
    # d: its pod gone -> created again on its node (POST pods, POST binding).
    mark = len(emu.calls)
    r = again.adopt("d/vm1", "d", 0, 0, {"cpu": 0.5})
    assert (r.op, r.error, r.node) == ("restart", None, "node-a")
    assert writes(emu, mark) == [("POST", "/api/v1/namespaces/merkat/pods"),
                                 ("POST", f"/api/v1/namespaces/merkat/pods/{D1_POD}/binding")]
    # e: its node is NotReady -> its pod deleted, not created again there: an error and no
    # pod (recovery sees describe() None: the next period places it).
    mark = len(emu.calls)
    r = again.adopt("e/vm1", "e", 1, 0, {"cpu": 0.5})
    assert (r.op, r.error) == ("restart", "node node-b is gone or not schedulable")
    assert again.describe("e/vm1") is None
    assert writes(emu, mark) == [("DELETE", f"/api/v1/namespaces/merkat/pods/{E1_POD}")]
    # h: its node left with its pod; recovery knows no host for it and passes 0: created on
    # node-a (the report's node tells recovery where).
    r = again.adopt("h/vm1", "h", 0, 0, {"cpu": 0.5})
    assert (r.op, r.error, r.node) == ("restart", None, "node-a")
    # g: stored on node-b (gone) but its pod runs on node-a -> taken back where it runs.
    r = again.adopt("g/vm1", "g", 1, 0, {"cpu": 0.5})
    assert (r.op, r.error, r.node) == ("adopt", None, "node-a")
    assert uid(emu, G1_POD) == before["g"]
    # f: its platform was suspended (alloc None) but the pod is there -> deleted.
    mark = len(emu.calls)
    r = again.adopt("f/vm1", "f", 0, 0, None)
    assert (r.op, r.error) == ("adopt-frozen", None) and again.describe("f/vm1") is None
    assert writes(emu, mark) == [("DELETE", f"/api/v1/namespaces/merkat/pods/{F1_POD}")]
    assert again.adopt("a/vm1", "a", 0, 0, {"cpu": 0.5}).error == "already known"
    # The pod no stored VM claims is deleted; the adopted ones stay.
    assert again.reap_orphans() == ["ghost/vm1"]
    assert sorted(n for _, n in emu.pods) == [pod_name(f"{a}/vm1", "default") for a in "abcdgh"]
    assert uid(emu, A1_POD) == before["a"] and uid(emu, D1_POD) != before["d"]


def manager(tmp_path: Path, emu: KubeEmulator) -> Manager:
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25)
    return Manager(cfg, open_store(cfg.database), live(emu, tmp_path))


def test_a_restarted_manager_readopts_its_pods(tmp_path: Path) -> None:
    emu = cluster()
    m1 = manager(tmp_path, emu)
    m1.store.add_user("alice", budget=100_000_000)
    for name in ("run", "gone", "frz"):
        m1.submit("alice", parse(SLEEP.format(name=name), "x.yaml"))
    m1.admit()
    m1.tick()
    m1.tick()
    assert all(m1.platform.apps[n].status is AppStatus.RUNNING for n in ("run", "gone", "frz"))
    before = {n: uid(emu, pod_name(f"{n}/vm1", "main")) for n in ("run", "gone", "frz")}
    (vm,) = m1.platform.apps["run"].vms
    host, bid, alloc = vm.host, dict(vm.bid), dict(vm.alloc)
    index = m1.platform.index
    # While no server runs: gone's pod is deleted, the previous server had suspended frz
    # (the store says so; its pod is still there), and a pod no platform claims is left.
    kubectl_delete(emu, GONE1_POD)
    store = m1.store
    store.set_platform("frz", state="suspended")
    (row,) = store.vms("frz")
    store.save_vms({"frz": [type(row)(**{**row.__dict__, "state": "suspended"})]})
    stray = live(emu, tmp_path)
    stray.register("ghost", lambda app, vm, i: Launch("sleep 1000"))
    stray.apply(Plan(0.0, 40.0, create=(VMPlacement("ghost/vm1", "ghost", 0),),
                     allocations={"ghost/vm1": {"cpu": 0.25}}))
    paid = store.ledger.balance("app:run")
    mark = len(emu.calls)

    m2 = manager(tmp_path, emu)  # m1 was "killed": never closed

    run = m2.platform.apps["run"]
    assert run.status is AppStatus.RUNNING and run.vm_count == 1
    (vm,) = run.vms
    assert (vm.id, vm.state, vm.host, vm.bid, vm.alloc, vm.new) == (
        "run/vm1", VMState.RUNNING, host, bid, alloc, False)
    assert uid(emu, RUN1_POD) == before["run"]  # the same pod
    assert [m2.vms(n)[0]["adopted"] for n in ("run", "gone")] == [True, False]  # the API's
    assert uid(emu, GONE1_POD) != before["gone"]  # created again
    assert m2.platform.apps["frz"].status is AppStatus.SUSPENDED
    assert m2.platform.apps["frz"].vms[0].state is VMState.SUSPENDED
    assert ("merkat", FRZ1_POD) not in emu.pods  # a suspended VM holds no pod
    assert ("merkat", GHOST1_POD) not in emu.pods  # the orphan deleted
    assert m2.platform.index == index  # the period counter continues
    assert_recovery_events(m2)
    # The next periods: the controllers go on, the adopted pod is neither deleted nor created
    # again, the platform pays, the counter goes on and the books balance.
    assert m2.tick()["index"] == index
    assert m2.tick()["index"] == index + 1
    pod = f"/api/v1/namespaces/merkat/pods/{RUN1_POD}"
    assert [c for c in writes(emu, mark) if c[1].startswith(pod) and c[0] != "PATCH"] == []
    assert ("POST", "/api/v1/namespaces/merkat/pods") not in [
        (c.verb, c.path) for c in emu.calls[mark:] if (c.body or {}).get("metadata", {}).get(
            "name") == RUN1_POD]
    assert uid(emu, RUN1_POD) == before["run"]
    assert m2.platform.apps["run"].status is AppStatus.RUNNING
    assert m2.vms("run")[0]["adopted"] and m2.vms("run")[0]["process"] == "running"
    assert m2.store.ledger.balance("app:run") < paid
    assert m2.store.ledger.audit().ok
    m2.close()
    assert emu.pods == {}  # a graceful stop deletes the pods


def test_platform_show_marks_an_adopted_pod_without_pid() -> None:
    from merkat.cli.platforms import _pid

    assert [_pid(v) for v in ({"pid": None, "adopted": True}, {"pid": None, "adopted": False},
                              {"pid": 42, "adopted": True}, {"pid": 42})] == [
        "(adopted)", None, "42 (adopted)", "42"]
