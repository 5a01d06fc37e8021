"""Pod and claim names on the Kubernetes backend (docs/kubernetes.md, "Pod names"): a readable
prefix and the hash of the VM's identity, so that no two VMs share one, whatever their
platforms' names; the same identity gives the same name after a restart; a VM whose pod and
claim were named the old way (``a-b-c-1``, ``a-b-c-1-state``) is adopted after the upgrade and
resumes with its state. The platforms that could deny each other's pods are in
tests/test_hostile_kubernetes.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from merkat.backends.kubernetes import KubernetesBackend
from merkat.backends.kubernetes import objects as objects_mod
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.kubernetes.objects import legacy_pod_name, pod_name
from merkat.backends.local import Launch
from merkat.core.backend import Plan, VMPlacement
from test_kubernetes_state import COUNT, STATE

pytestmark = pytest.mark.kubernetes

VM, ONE = "app/vm1", {"app/vm1": {"cpu": 1.0}}
OLD = "app-main-1"  # the pod's name before names carried the hash


def server(emu: KubeEmulator, tmp_path: Path) -> KubernetesLive:
    """A merkat server on ``emu`` (each call: a server started afresh, nothing in memory)."""
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    live = KubernetesLive(kube, logs=tmp_path / "logs")
    live.register("app", lambda app, vm, i: Launch("sleep 1000", "main", i, state=STATE))
    return live


def cluster(tmp_path: Path) -> KubeEmulator:
    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"))
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "4", "8Gi")
    return emu


def count(live: KubernetesLive) -> int:
    r = live.exec_in(VM, COUNT)
    assert r.ok, r.problem()
    return int(r.stdout.strip())


def test_a_long_readable_part_is_cut_and_the_names_stay_distinct() -> None:
    long_app, cluster_name = "p" * 200, "c" * 200
    names = {pod_name(f"{long_app}{k}/vm1", cluster_name) for k in range(50)}
    names |= {pod_name(f"{long_app}/vm{k}", cluster_name) for k in range(50)}
    assert len(names) == 100  # they differ only past the cut
    assert all(len(n) <= 57 and len(f"{n}-state") <= 63 for n in names)
    assert all(n.startswith("p" * 20) and n[-14] == "-" for n in names)
    odd = pod_name("Ünï_cöde.APP/vm3", "--")
    assert len(odd) <= 57 and odd.replace("-", "").isalnum() and odd.isascii()
    assert pod_name("a-b/vm1", "c") != pod_name("a/vm1", "b-c")  # legacy: both a-b-c-1
    assert legacy_pod_name("a-b/vm1", "c") == legacy_pod_name("a/vm1", "b-c") == "a-b-c-1"
    assert pod_name("a/vm1", "c", "one") != pod_name("a/vm1", "c", "two")  # servers sharing


def test_a_long_platform_name_runs_with_its_claim(tmp_path: Path) -> None:
    emu = cluster(tmp_path)  # the emulator refuses names that are no DNS label (> 63)
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    live = KubernetesLive(kube, logs=tmp_path / "logs")
    apps = ["x" * 120 + "-1", "x" * 120 + "-2"]
    for app in apps:
        live.register(app, lambda a, vm, i: Launch("sleep 1000", "y" * 60, i, state=STATE))
    live.apply(Plan(0.0, 40.0, create=tuple(VMPlacement(f"{a}/vm1", a, 0) for a in apps),
                    allocations={f"{a}/vm1": {"cpu": 0.5} for a in apps}))
    assert all(r.error is None for r in live.report), live.report
    assert len(emu.pods) == 2 and len(emu.claims) == 2
    assert all(len(n) <= 63 for _, n in [*emu.pods, *emu.claims])


def test_the_same_identity_gives_the_same_name_in_every_process() -> None:
    code = ("from merkat.backends.kubernetes.objects import pod_name; "
            "print(pod_name('a-b/vm1', 'c'), pod_name('Solver/vm12', 'main', 'prod'))")
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    outs = {tuple(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env=env, check=True).stdout.split()) for _ in range(2)}
    assert outs == {(pod_name("a-b/vm1", "c"), pod_name("Solver/vm12", "main", "prod"))}


def test_a_restarted_server_resumes_a_vm_in_the_pod_and_claim_it_named(tmp_path: Path) -> None:
    emu = cluster(tmp_path)
    first = server(emu, tmp_path)
    first.apply(Plan(0.0, 40.0, create=(VMPlacement(VM, "app", 0),), allocations=ONE))
    assert [count(first), count(first)] == [1, 2]
    first.apply(Plan(40.0, 40.0, suspend=(VM,)))
    first.apply(Plan(80.0, 40.0))
    assert emu.pods == {} and list(emu.claims) == [("merkat", f"{pod_name(VM, 'main')}-state")]
    again = server(emu, tmp_path)  # killed and started again: nothing known but the cluster
    again.kube.refresh()
    assert again.adopt(VM, "app", 0, 0, None).error is None  # suspended: no pod
    again.apply(Plan(120.0, 40.0, resume=(VMPlacement(VM, "app", 0),), allocations=ONE))
    assert all(r.error is None for r in again.report), again.report
    assert list(emu.pods) == [("merkat", pod_name(VM, "main"))]  # the same name
    assert count(again) == 3  # its state: the same claim, mounted again
    assert len(emu.claims) == 1


def old_server(emu: KubeEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               annotated: bool) -> None:
    """A server of the version before names carried the hash runs ``app/vm1`` (counted to 2),
    its pod ``app-main-1`` and its claim ``app-main-1-state`` (``annotated``: with the
    annotation ``merkat.io/vm``, else as made before it, labels only); then it is killed."""
    with monkeypatch.context() as m:
        m.setattr(objects_mod, "pod_name",
                  lambda vm, cluster="vms", instance="merkat": legacy_pod_name(vm, cluster))
        old = server(emu, tmp_path)
        old.apply(Plan(0.0, 40.0, create=(VMPlacement(VM, "app", 0),), allocations=ONE))
        assert [count(old), count(old)] == [1, 2]
    assert list(emu.pods) == [("merkat", OLD)] and list(emu.claims) == [("merkat", f"{OLD}-state")]
    if not annotated:
        del emu.claims[("merkat", f"{OLD}-state")]["metadata"]["annotations"]


@pytest.mark.parametrize("annotated", [True, False])
def test_a_pod_and_claim_named_the_old_way_are_adopted_and_resume_with_the_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, annotated: bool) -> None:
    emu = cluster(tmp_path)
    old_server(emu, tmp_path, monkeypatch, annotated)
    uid = emu.pod("merkat", OLD)["metadata"]["uid"]
    new = server(emu, tmp_path)  # the upgraded server
    new.kube.refresh()
    r = new.adopt(VM, "app", 0, 0, {"cpu": 1.0})
    assert (r.op, r.error) == ("adopt", None)
    assert emu.pod("merkat", OLD)["metadata"]["uid"] == uid  # the same pod, its old name
    assert count(new) == 3
    new.apply(Plan(40.0, 40.0, suspend=(VM,)))  # noticed, checkpointed, deleted
    new.apply(Plan(80.0, 40.0))
    assert emu.pods == {}
    again = server(emu, tmp_path)  # restarted while suspended: the claim is found again
    again.kube.refresh()
    assert again.adopt(VM, "app", 0, 0, None).error is None
    again.apply(Plan(120.0, 40.0, resume=(VMPlacement(VM, "app", 0),), allocations=ONE))
    assert all(r.error is None for r in again.report), again.report
    assert list(emu.pods) == [("merkat", pod_name(VM, "main"))]  # named the new way...
    claim = emu.pod("merkat", pod_name(VM, "main"))["spec"]["volumes"][0]
    assert claim["persistentVolumeClaim"]["claimName"] == f"{OLD}-state"  # ...its old claim
    assert list(emu.claims) == [("merkat", f"{OLD}-state")]
    assert count(again) == 4  # not from zero
    again.apply(Plan(160.0, 40.0, destroy=(VM,)))
    assert emu.pods == {} and emu.claims == {}  # destroyed: its claim goes with it


def test_a_destroyed_vm_of_the_old_way_has_its_claim_deleted_by_a_restarted_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    emu = cluster(tmp_path)
    old_server(emu, tmp_path, monkeypatch, annotated=True)
    new = server(emu, tmp_path)
    new.kube.refresh()
    new.adopt(VM, "app", 0, 0, {"cpu": 1.0})
    new.apply(Plan(40.0, 40.0, migrate=((VM, 0, 0),), allocations=ONE))
    new.apply(Plan(80.0, 40.0, allocations=ONE))  # moved: a new pod, named the new way
    assert list(emu.pods) == [("merkat", pod_name(VM, "main"))] and count(new) == 3
    again = server(emu, tmp_path)
    again.kube.refresh()
    again.adopt(VM, "app", 0, 0, {"cpu": 1.0})
    again.apply(Plan(120.0, 40.0, destroy=(VM,)))
    assert emu.pods == {} and emu.claims == {}
    notes = [c for c in emu.calls if c.verb == "DELETE" and "persistentvolumeclaims" in c.path]
    assert [c.path.rsplit("/", 1)[-1] for c in notes] == [f"{pod_name(VM, 'main')}-state",
                                                          f"{OLD}-state"]
