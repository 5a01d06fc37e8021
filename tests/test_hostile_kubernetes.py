"""Hostile input on the Kubernetes backend: a user's ``state:`` checkpoint that never ends
cannot hold the period (and so every other user's platform) for longer than the backend's
limit, and the checkpoints of one period run side by side, not one after another; a notice
(``notice_s``) cannot keep a suspended VM's pod on its node beyond the server's limit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from merkat.backends.kubernetes import KubernetesBackend
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.local import Launch
from merkat.core.backend import Plan, VMPlacement

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
    assert ("merkat", "mallory-main-1") in emu.pods
    live.apply(Plan(120.0, 40.0))
    assert emu.pods == {}


def test_a_platform_whose_pod_name_is_anothers_never_mounts_her_state_volume(
        tmp_path: Path) -> None:
    """Alice's platform ``a-b`` (cluster ``c``) and Mallory's ``a`` (cluster ``b-c``) both map
    to the pod ``a-b-c-1`` and the claim ``a-b-c-1-state``. Alice suspended keeps her claim
    (her checkpoint in it); Mallory's VM with ``state:`` took the 409 AlreadyExists of that
    claim for her own and mounted Alice's volume. It is refused now, and Alice resumes with
    her data."""
    emu, live = cluster(tmp_path)
    state = {"checkpoint": 'echo alice-secret > "$MERKAT_STATE/data"', "notice_s": 0}
    live.register("a-b", lambda a, vm, i: Launch("sleep 1000", "c", i, state=state))
    mine = {"size": "1Mi"}
    live.register("a", lambda a, vm, i: Launch("sleep 1000", "b-c", i, state=mine))
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("a-b/vm1", "a-b", 0),),
                    allocations={"a-b/vm1": {"cpu": 0.5}}))
    live.apply(Plan(40.0, 40.0, suspend=("a-b/vm1",)))
    live.apply(Plan(80.0, 40.0))
    assert emu.pods == {} and ("merkat", "a-b-c-1-state") in emu.claims  # Alice's, kept
    for t in (120.0, 130.0):  # known to this server; then as a restarted one sees it
        live.apply(Plan(t, 10.0, create=(VMPlacement("a/vm1", "a", 0),),
                        allocations={"a/vm1": {"cpu": 0.5}}))
        (r,) = [r for r in live.report if r.vm == "a/vm1"]
        assert r.op == "create" and r.error is not None and "not a/vm1's" in r.error, r
        assert emu.pods == {}  # no pod of Mallory's mounts it
        live.kube.claims.clear()
    live.apply(Plan(160.0, 40.0, resume=(VMPlacement("a-b/vm1", "a-b", 0),),
                    allocations={"a-b/vm1": {"cpu": 0.5}}))
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
