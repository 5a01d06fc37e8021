"""Hostile input on the Kubernetes backend: a user's ``state:`` checkpoint that never ends
cannot hold the period (and so every other user's platform) for longer than the backend's
limit, and the checkpoints of one period run side by side, not one after another; a notice
(``notice_s``) cannot keep a suspended VM's pod on its node beyond the server's limit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from merkat.backends.kubernetes import KubernetesBackend
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.kubernetes.objects import pod_name
from merkat.backends.local import Launch
from merkat.core.backend import Plan, VMPlacement

MALLORY1_POD = pod_name("mallory/vm1", "main")

pytestmark = pytest.mark.kubernetes


def cluster(tmp_path: Path, **limits: float) -> tuple[KubeEmulator, KubernetesLive]:
    """One 4-core node; the backend with the server's ``limits``."""
    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"))
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "4", "8Gi")
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None, **limits)  # type: ignore[arg-type]
    return emu, KubernetesLive(kube, logs=tmp_path / "logs")


def test_a_checkpoint_that_never_ends_is_cut_at_the_limit_side_by_side(tmp_path: Path) -> None:
    emu, live = cluster(tmp_path, checkpoint_limit_s=1.0)
    state = {"checkpoint": "sleep 100", "timeout": 60}  # the template allows 60 s at most
    apps = ("mallory", "mallet", "eve")
    for app in apps:
        live.register(app, lambda a, vm, i: Launch("sleep 1000", "main", i, state=state))
    live.apply(Plan(0.0, 40.0, create=tuple(VMPlacement(f"{a}/vm1", a, 0) for a in apps),
                    allocations={f"{a}/vm1": {"cpu": 0.5} for a in apps}))
    live.apply(Plan(40.0, 40.0, suspend=tuple(f"{a}/vm1" for a in apps)))  # noticed
    t0 = time.monotonic()
    live.apply(Plan(80.0, 40.0))  # the notice's time: checkpoints, then the deletions
    took = time.monotonic() - t0
    assert took < 2.5, took  # 1 s, not 3 x 1 s, nor 3 x 60 s
    assert emu.pods == {}  # the suspensions happened all the same
    live.apply(Plan(120.0, 40.0))
    assert sorted((r.op, r.vm, r.error) for r in live.report) == [
        ("checkpoint", f"{a}/vm1", "checkpoint failed: timed out after 1 s") for a in sorted(apps)]


def test_a_notice_of_an_hour_holds_the_node_no_longer_than_the_servers_limit(
        tmp_path: Path) -> None:
    """A template asking ``notice_s: 3600`` would keep its suspended pod (and the node's room
    the market gave to others) for an hour: the backend cuts it at ``notice_limit_s``."""
    emu, live = cluster(tmp_path, notice_limit_s=60.0)
    live.register("mallory", lambda a, vm, i: Launch("sleep 1000", "main", i,
                                                     state={"notice_s": 3600}))
    vm = "mallory/vm1"
    live.apply(Plan(0.0, 40.0, create=(VMPlacement(vm, "mallory", 0),),
                    allocations={vm: {"cpu": 0.5}}))
    live.apply(Plan(40.0, 40.0, suspend=(vm,)))
    assert live.describe(vm)["preempt_at"] == "1970-01-01T00:01:40Z"  # 40 + 60, not 40 + 3600
    live.apply(Plan(80.0, 40.0))
    assert ("merkat", MALLORY1_POD) in emu.pods
    live.apply(Plan(120.0, 40.0))
    assert emu.pods == {}


def test_two_platforms_whose_names_joined_read_the_same_both_run_their_pods(
        tmp_path: Path) -> None:
    """Alice's platform ``a-b`` (cluster ``c``) and Mallory's ``a`` (cluster ``b-c``) both
    mapped to the pod ``a-b-c-1`` (and the claim ``a-b-c-1-state``): whoever created first
    won, the other's creation got 409, was retried 5 times every period and failed — one
    tenant could deny another service by choosing a name. Each VM's pod and claim carry the
    hash of its identity now: both run, each with its own volume."""
    emu, live = cluster(tmp_path)
    alice = {"checkpoint": 'echo alice-secret > "$MERKAT_STATE/data"', "notice_s": 0}
    live.register("a-b", lambda a, vm, i: Launch("sleep 1000", "c", i, state=alice))
    live.register("a", lambda a, vm, i: Launch("sleep 1000", "b-c", i, state={"size": "1Mi"}))
    live.register("x-y", lambda a, vm, i: Launch("sleep 1000", "z", i))  # no state: too
    live.register("x", lambda a, vm, i: Launch("sleep 1000", "y-z", i))
    vms = {"a-b/vm1": "a-b", "a/vm1": "a", "x-y/vm1": "x-y", "x/vm1": "x"}
    live.apply(Plan(0.0, 40.0, create=tuple(VMPlacement(vm, app, 0) for vm, app in vms.items()),
                    allocations={vm: {"cpu": 0.5} for vm in vms}))
    assert [(r.op, r.error) for r in live.report] == [("create", None)] * 4, live.report
    assert len(emu.pods) == 4 and len(emu.claims) == 2
    assert sorted(n[:8] for _, n in emu.pods) == ["a-b-c-1-", "a-b-c-1-", "x-y-z-1-", "x-y-z-1-"]
    assert live.exec_in("a-b/vm1", 'echo alice > "$MERKAT_STATE/data"').ok
    assert live.exec_in("a/vm1", 'cat "$MERKAT_STATE/data"').stdout == ""  # her own volume
    live.apply(Plan(40.0, 40.0, allocations={vm: {"cpu": 0.5} for vm in vms}))
    assert [r.error for r in live.report] == [], live.report  # still both, no retries


def test_a_platform_whose_old_claim_name_is_anothers_never_mounts_her_state_volume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alice's claim was made by the version before names carried the hash: ``a-b-c-1-state``,
    the name Mallory's VM (platform ``a``, cluster ``b-c``) had too. A VM whose claim may be
    under its old name (a resumption, a restart, a migration) reads that name first: Mallory's
    finds Alice's there, leaves it alone and gets her own; Alice resumes with her data."""
    from merkat.backends.kubernetes import objects as objects_mod
    from merkat.backends.kubernetes.objects import legacy_pod_name

    emu, live = cluster(tmp_path)
    state = {"checkpoint": 'echo alice-secret > "$MERKAT_STATE/data"', "notice_s": 0}
    with monkeypatch.context() as m:  # the old server: Alice's VM, suspended
        m.setattr(objects_mod, "pod_name", lambda vm, cluster="vms", instance="merkat":
                  legacy_pod_name(vm, cluster))
        live.register("a-b", lambda a, vm, i: Launch("sleep 1000", "c", i, state=state))
        live.apply(Plan(0.0, 40.0, create=(VMPlacement("a-b/vm1", "a-b", 0),),
                        allocations={"a-b/vm1": {"cpu": 0.5}}))
        live.apply(Plan(40.0, 40.0, suspend=("a-b/vm1",)))
        live.apply(Plan(80.0, 40.0))
    assert emu.pods == {} and list(emu.claims) == [("merkat", "a-b-c-1-state")]  # Alice's
    live = KubernetesLive(KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                                            sleep=lambda s: None), logs=tmp_path / "logs")
    # ^ the upgraded server, started on the same cluster
    live.register("a-b", lambda a, vm, i: Launch("sleep 1000", "c", i, state=state))
    live.register("a", lambda a, vm, i: Launch("sleep 1000", "b-c", i, state={"size": "1Mi"}))
    live.apply(Plan(120.0, 40.0, resume=(VMPlacement("a/vm1", "a", 0),),
                    allocations={"a/vm1": {"cpu": 0.5}}))
    assert [(r.op, r.error) for r in live.report] == [("resume", None)], live.report
    mine = emu.pod("merkat", pod_name("a/vm1", "b-c"))["spec"]["volumes"][0]
    assert mine["persistentVolumeClaim"]["claimName"] == pod_name("a/vm1", "b-c") + "-state"
    assert live.exec_in("a/vm1", 'cat "$MERKAT_STATE/data" 2>&1').stdout != "alice-secret\n"
    live.apply(Plan(160.0, 40.0, resume=(VMPlacement("a-b/vm1", "a-b", 0),),
                    allocations={"a-b/vm1": {"cpu": 0.5}, "a/vm1": {"cpu": 0.5}}))
    assert live.exec_in("a-b/vm1", 'cat "$MERKAT_STATE/data"').stdout == "alice-secret\n"


def test_an_api_server_that_stops_answering_costs_a_period_one_timeout(tmp_path: Path) -> None:
    """Reads answer, writes time out (an overloaded API server, etcd down). Each call waited
    its 10 s six times (retried): 20 creations held the period loop — every user's — 20 minutes.
    Now a timeout is not retried and the rest of the period's calls are not sent."""
    import httpx2
    from lightkube import Client, KubeConfig

    from merkat.backends.kubernetes.emulator import kubeconfig

    emu = KubeEmulator()
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "64", "64Gi")
    posts = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and len(posts) < 1000:
            posts.append(request.url.path)
            raise httpx2.ReadTimeout("timed out", request=request)  # (10 s, not waited here)
        return emu.handle(request)

    client = Client(KubeConfig.from_dict(kubeconfig("merkat")),
                    transport=httpx2.MockTransport(handle), trust_env=False)
    kube = KubernetesBackend(client, namespace="merkat", sleep=lambda s: None)
    vms = [f"app{k}/vm1" for k in range(20)]
    plan = Plan(0.0, 40.0, create=tuple(VMPlacement(vm, vm[:-4], 0) for vm in vms),
                allocations={vm: {"cpu": 1.0} for vm in vms})
    report = kube.apply_report(plan)
    assert len(posts) == 1  # was 120 (20 creations x 6 attempts)
    errors = [r.error for r in report.ops]
    assert errors[0] == "ReadTimeout: timed out"
    assert set(errors[1:]) == {"not sent: ReadTimeout: timed out earlier this period"}
    assert len(errors) == 20
    posts.extend([""] * 1000)  # the API server answers again: the next period sends
    report = kube.apply_report(plan)
    assert [r.error for r in report.ops] == [None] * 20 and len(emu.pods) == 20


SECRET = {"checkpoint": 'echo alice-secret > "$MERKAT_STATE/data"', "notice_s": 0}
READ = 'cat "$MERKAT_STATE/data" 2>/dev/null || echo empty'


def test_a_suspended_vm_destroyed_takes_its_claim_with_it(tmp_path: Path) -> None:
    """A suspended VM has no pod; its destroy (its platform stopped, out of budget, past its
    deadline) still deletes its claim: before, ``_remove`` answered "no pod (already gone)"
    and left ``app-main-1-<hash>-state`` with the VM's checkpoint in it, for the next platform
    of that name to mount."""
    emu, live = cluster(tmp_path)
    live.register("app", lambda a, vm, i: Launch("sleep 1000", "main", i, state=SECRET))
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("app/vm1", "app", 0),),
                    allocations={"app/vm1": {"cpu": 0.5}}))
    live.apply(Plan(40.0, 40.0, suspend=("app/vm1",)))
    assert emu.pods == {} and len(emu.claims) == 1
    # a restarted server knows no claim: the name is computed as the create did
    live = KubernetesLive(KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                                            sleep=lambda s: None), logs=tmp_path / "logs")
    live.register("app", lambda a, vm, i: Launch("sleep 1000", "main", i, state=SECRET))
    live.apply(Plan(80.0, 40.0, destroy=("app/vm1",)))
    assert [(r.op, r.error) for r in live.report] == [("destroy", None)]
    assert emu.pods == {} and emu.claims == {}


def test_a_leftover_claim_is_never_mounted_by_a_new_vm_a_resumed_one_keeps_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim a new VM's first create meets (annotated with its id: an ended VM of the same
    identity left it, e.g. a server before this fix) is deleted and a fresh one made: the new
    VM sees an empty volume, and the event says so. A suspended VM's resumption after a
    restart still mounts its own claim and reads its checkpoint."""
    from merkat.backends.kubernetes import state as state_mod

    emu, live = cluster(tmp_path)
    live.register("app", lambda a, vm, i: Launch("sleep 1000", "main", i, state=SECRET))
    one = {"app/vm1": {"cpu": 0.5}, "app/vm2": {"cpu": 0.5}}
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("app/vm1", "app", 0),
                                       VMPlacement("app/vm2", "app", 0)), allocations=one))
    live.apply(Plan(40.0, 40.0, suspend=("app/vm1", "app/vm2")))
    with monkeypatch.context() as m:  # the claim left behind, as the old destroy did
        m.setattr(state_mod, "drop_vm_claim", lambda *a: None)
        live.apply(Plan(80.0, 40.0, destroy=("app/vm1",)))
    assert len(emu.claims) == 2 and emu.pods == {}
    live = KubernetesLive(KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                                            sleep=lambda s: None), logs=tmp_path / "logs")
    live.register("app", lambda a, vm, i: Launch("sleep 1000", "main", i, state=SECRET))
    live.apply(Plan(120.0, 40.0, create=(VMPlacement("app/vm1", "app", 0),),
                    resume=(VMPlacement("app/vm2", "app", 0),), allocations=one))
    ops = {r.op: r for r in live.report}
    assert [(r.op, r.error) for r in live.report] == [("create", None), ("resume", None)]
    assert "was left by an ended VM app/vm1" in ops["create"].reason
    assert "deleted, never mounted" in ops["create"].reason
    assert live.exec_in("app/vm1", READ).stdout == "empty\n"  # not the previous VM's
    assert live.exec_in("app/vm2", READ).stdout == "alice-secret\n"  # its own, resumed
    claims = {c["metadata"]["annotations"]["merkat.io/vm"] for c in emu.claims.values()}
    assert claims == {"app/vm1", "app/vm2"} and len(emu.claims) == 2


def test_a_leftover_claim_still_terminating_fails_the_create_until_it_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real cluster a deleted claim may linger (its finalizer): the create fails this
    period, saying why, and the next period's create makes the fresh claim."""
    from merkat.backends.kubernetes import state as state_mod

    emu, live = cluster(tmp_path)
    live.register("app", lambda a, vm, i: Launch("sleep 1000", "main", i, state=SECRET))
    alloc = {"app/vm1": {"cpu": 0.5}}
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("app/vm1", "app", 0),), allocations=alloc))
    with monkeypatch.context() as m:
        m.setattr(state_mod, "drop_vm_claim", lambda *a: None)
        live.apply(Plan(40.0, 40.0, destroy=("app/vm1",)))
    ((key, claim),) = emu.claims.items()
    real = emu._claims

    def lingering(verb: str, ns: str, name: str | None, body: Any) -> Any:
        r = real(verb, ns, name, body)
        if verb == "DELETE":  # gone a period later
            emu.claims[key] = {**claim, "metadata": {**claim["metadata"],
                                                     "deletionTimestamp": "now"}}
        return r

    monkeypatch.setattr(emu, "_claims", lingering)
    live = KubernetesLive(KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                                            sleep=lambda s: None), logs=tmp_path / "logs")
    live.register("app", lambda a, vm, i: Launch("sleep 1000", "main", i, state=SECRET))
    live.apply(Plan(80.0, 40.0, create=(VMPlacement("app/vm1", "app", 0),), allocations=alloc))
    ((op, error),) = [(r.op, r.error) for r in live.report]
    assert op == "create" and error is not None and "made once it is gone" in error
    assert emu.pods == {}
    monkeypatch.setattr(emu, "_claims", real)
    del emu.claims[key]  # its finalizer ran
    live.apply(Plan(120.0, 40.0, create=(VMPlacement("app/vm1", "app", 0),), allocations=alloc))
    assert [(r.op, r.error) for r in live.report] == [("create", None)]
    assert live.exec_in("app/vm1", READ).stdout == "empty\n"


def test_a_deleted_platforms_state_never_reaches_another_users_platform_of_its_name(
        tmp_path: Path) -> None:
    """Through the service: Alice's platform ``lab`` with ``state:`` is suspended (a
    price-limited best-effort platform priced out), stopped while suspended and deleted; Bob
    submits ``lab`` (the same VM ids, pod and claim names): his VM sees an empty volume, not
    Alice's checkpoint."""
    from merkat.service.records import delete_platform
    from merkat.service.templates import parse
    from test_kubernetes_recovery import manager
    from test_kubernetes_state import THRIFTY

    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"))
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "1", "4Gi")
    m = manager(tmp_path, emu)
    for user in ("alice", "bob"):
        m.store.add_user(user, budget=1_000_000_000)
    state = "    state: {checkpoint: 'echo alice-secret > \"$MERKAT_STATE/data\"', notice_s: 0}\n"
    m.submit("alice", parse(THRIFTY.format(name="lab", limit=0.0015, budget=10) + state, "a"))
    m.admit()
    m.tick()
    m.tick()
    m.submit("alice", parse(THRIFTY.format(name="urgent", limit=1, budget=500), "u.yaml"))
    m.admit()
    m.tick()
    m.tick()  # the price doubled: lab is suspended, its checkpoint in its claim
    assert m.platform.apps["lab"].status.value == "suspended"
    assert ("merkat", pod_name("lab/vm1", "main")) not in emu.pods and len(emu.claims) == 1
    m.stop("lab")  # its suspended VM destroyed: its claim too
    assert emu.claims == {}
    delete_platform(m, "lab")
    m.stop("urgent")
    m.submit("bob", parse(THRIFTY.format(name="lab", limit=1, budget=10)
                          + "    state: {restore: 'true'}\n", "b"))
    m.admit()
    m.tick()
    m.tick()
    assert m.platform.apps["lab"].status.value == "running"
    assert m.backend.exec_in("lab/vm1", READ).stdout == "empty\n"  # type: ignore[attr-defined]
    m.close()
