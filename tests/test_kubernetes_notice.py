"""The notice before preemption on the emulator (notice.py; docs/kubernetes.md, "A notice before
preemption"): ``merkat.io/preempt-at`` is on the pod, readable through its downward API file, at
least ``notice_s`` (one period by default) before the pod is stopped; a resumption before that
time withdraws it and keeps the pod; a migration waits for it, and a pod placed where the held
one still is waits for the room."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from merkat.backends.kubernetes.emulator import KubeEmulator
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.kubernetes.objects import pod_name
from merkat.backends.local import Launch
from merkat.core.backend import Plan, VMPlacement
from test_kubernetes_state import STATE, VM, count, setup

A1_POD = pod_name("a/vm1", "main")
APP1_POD = pod_name("app/vm1", "main")
BIG1_POD = pod_name("big/vm1", "main")

pytestmark = pytest.mark.kubernetes

T = 1_790_000_000.0  # the period's time, as the live service's (time.time) plan carries it
P = 40.0
ONE = {VM: {"cpu": 1.0}}


def notice_file(live: KubernetesLive) -> str:
    r = live.exec_in(VM, 'cat "$MERKAT_NOTICE/annotations"')
    assert r.ok, r.problem()
    return r.stdout


def pod_calls(emu: KubeEmulator, verb: str) -> list[Any]:
    return [c for c in emu.calls if c.verb == verb and c.path.endswith(f"/pods/{APP1_POD}")]


def test_the_notice_is_readable_in_the_pod_a_period_before_it_is_deleted(tmp_path: Path) -> None:
    emu, live = setup(tmp_path, STATE)
    uid = emu.pod("merkat", APP1_POD)["metadata"]["uid"]
    assert count(live) == 1
    live.apply(Plan(T, P, suspend=(VM,)))
    assert [(r.op, r.error, r.reason) for r in live.report] == [
        ("notice", None, "the pod stops at 2026-09-21T14:14:00Z, suspended")]
    (patch,) = pod_calls(emu, "PATCH")
    assert patch.content_type.startswith("application/merge-patch+json")
    assert patch.body == {"metadata": {"annotations": {
        "merkat.io/preempt-at": "2026-09-21T14:14:00Z"}}}  # T + 40 s
    assert notice_file(live) == ('merkat.io/preempt-at="2026-09-21T14:14:00Z"\n'
                                 f'merkat.io/vm="{VM}"\n')
    assert live.describe(VM)["preempt_at"] == "2026-09-21T14:14:00Z"
    live.apply(Plan(T + P / 2, P))  # an admission half a period later: not yet
    assert emu.pod("merkat", APP1_POD)["metadata"]["uid"] == uid
    assert pod_calls(emu, "DELETE") == [] and count(live) == 2  # it still runs
    checkpoints_before = len(emu.execs)
    live.apply(Plan(T + P, P))  # the time has come: checkpoint, then SIGTERM with grace
    assert ("merkat", APP1_POD) not in emu.pods
    (delete,) = pod_calls(emu, "DELETE")
    assert delete.query["gracePeriodSeconds"] == "2"
    assert emu.calls.index(delete) > emu.calls.index(patch)
    assert STATE["checkpoint"] in emu.execs[checkpoints_before].argv[-1]
    live.apply(Plan(T + 2 * P, P, resume=(VMPlacement(VM, "app", 0),), allocations=ONE))
    assert count(live) == 3  # the checkpoint taken at the deadline was restored
    assert "preempt-at" not in notice_file(live)  # a new pod: no notice
    assert emu.schema_errors == []
    import yaml

    from test_kubernetes_access import _rbac_verb

    deploy = Path(__file__).parent.parent / "deploy" / "kubernetes"
    for f in ("rbac.yaml", "rbac-per-user.yaml"):  # the shipped roles grant the notice's PATCH
        granted = {(r, v) for doc in yaml.safe_load_all((deploy / f).read_text())
                   if doc["kind"] in ("Role", "ClusterRole") for rule in doc["rules"]
                   for r in rule["resources"] for v in rule["verbs"]}
        assert {_rbac_verb(c.verb, c.path)[:2] for c in emu.calls if "/pods" in c.path} <= granted


def test_a_resume_before_the_deadline_withdraws_the_notice_and_keeps_the_pod(
        tmp_path: Path) -> None:
    emu, live = setup(tmp_path, STATE)
    uid = emu.pod("merkat", APP1_POD)["metadata"]["uid"]
    live.apply(Plan(T, P, suspend=(VM,)))
    assert "preempt-at" in notice_file(live)
    live.apply(Plan(T + P / 2, P, resume=(VMPlacement(VM, "app", 0),), allocations=ONE))
    assert all(r.error is None for r in live.report), live.report
    assert ("notice", VM) in [(r.op, r.vm) for r in live.report]
    withdraw = pod_calls(emu, "PATCH")[-1]
    assert withdraw.body == {"metadata": {"annotations": {"merkat.io/preempt-at": None}}}
    assert "preempt-at" not in notice_file(live)
    live.apply(Plan(T + 2 * P, P, allocations=ONE))
    assert emu.pod("merkat", APP1_POD)["metadata"]["uid"] == uid  # never stopped
    assert pod_calls(emu, "DELETE") == [] and count(live) == 1
    assert emu.schema_errors == []


def test_the_templates_notice_s_sets_the_delay_within_the_servers_limit(tmp_path: Path) -> None:
    emu, live = setup(tmp_path, {**STATE, "notice_s": 100})
    live.apply(Plan(T, P, suspend=(VM,)))
    assert pod_calls(emu, "PATCH")[0].body["metadata"]["annotations"][
        "merkat.io/preempt-at"] == "2026-09-21T14:15:00Z"  # T + 100 s
    for t in (T + P, T + 2 * P):
        live.apply(Plan(t, P))
        assert ("merkat", APP1_POD) in emu.pods
    live.apply(Plan(T + 3 * P, P))  # 120 s >= 100 s
    assert ("merkat", APP1_POD) not in emu.pods


def test_a_migration_waits_for_its_notice_and_a_pod_placed_on_the_held_node_waits_for_room(
        tmp_path: Path) -> None:
    emu, live = setup(tmp_path, STATE)
    live.register("big", lambda app, vm, i: Launch("sleep 1000", "main", i))
    three = {VM: {"cpu": 3.0}}
    live.apply(Plan(T, P, allocations=three))
    assert count(live) == 1
    live.apply(Plan(T + P, P, migrate=((VM, 0, 1),),
                    create=(VMPlacement("big/vm1", "big", 0),),
                    allocations={**three, "big/vm1": {"cpu": 3.0}}))
    ops = {(r.op, r.vm): r.error for r in live.report}
    assert ops[("notice", VM)] is None
    assert "node node-0 is still held by app/vm1's pod until its notice ends" in str(
        ops[("create", "big/vm1")])
    assert emu.pod("merkat", APP1_POD)["spec"]["nodeName"] == "node-0"
    assert emu.pod("merkat", APP1_POD)["status"]["phase"] == "Running"
    assert ("merkat", BIG1_POD) not in emu.pods  # no pod rejected by the kubelet
    live.apply(Plan(T + 2 * P, P, create=(VMPlacement("big/vm1", "big", 0),),
                    allocations={**three, "big/vm1": {"cpu": 3.0}}))
    assert all(r.error is None for r in live.report), live.report
    assert emu.pod("merkat", APP1_POD)["spec"]["nodeName"] == "node-1"
    assert emu.pod("merkat", BIG1_POD)["status"]["phase"] == "Running"
    assert count(live) == 2  # checkpointed at the deadline, restored on node-1
    assert emu.schema_errors == []


def test_without_state_a_suspension_deletes_the_pod_at_once(tmp_path: Path) -> None:
    emu, live = setup(tmp_path, None)
    live.apply(Plan(T, P, suspend=(VM,)))
    assert emu.pods == {} and pod_calls(emu, "PATCH") == []


def test_a_server_restarted_during_a_notice_checkpoints_the_suspended_vm_before_deleting_it(
        tmp_path: Path) -> None:
    """The notices live in the server's memory: the recovery of a suspended VM whose pod is
    still there (under notice) runs its checkpoint, then deletes it; the counter survives."""
    from merkat.backends.kubernetes import KubernetesBackend
    from merkat.backends.kubernetes.emulator import emulated_client

    emu, live = setup(tmp_path, STATE)
    assert [count(live) for _ in range(2)] == [1, 2]
    live.apply(Plan(T, P, suspend=(VM,)))  # noticed; then the server is killed
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    again = KubernetesLive(kube, logs=tmp_path / "logs")
    again.register("app", lambda app, vm, i: Launch("sleep 1000", "main", i, state=STATE))
    assert again.adopt(VM, "app", 0, 0, None).op == "adopt-frozen"
    assert emu.pods == {}
    again.apply(Plan(T + P, P, resume=(VMPlacement(VM, "app", 1),), allocations=ONE))
    assert count(again) == 3


def test_a_vm_moved_under_notice_is_billed_at_what_its_held_pod_had(tmp_path: Path) -> None:
    """Through the service: a (with ``state:``) shares node-0 with c (1 of its 2 cores each), b
    has node-1; b stops and the market moves a to node-1 at 2 cores, but a's pod stays on
    node-0, at 1 core, for its notice: the next period refunds the half of a's CPU charge it did
    not get (as a Deferred resize's), with one event; its pod then runs on node-1 at 2 cores."""
    import time

    from merkat.core.model import MICRO
    from merkat.service.templates import parse
    from test_kubernetes_recovery import manager
    from test_kubernetes_refusals import TWO_CORES, refunded_half

    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"))
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "2", "4Gi")
    emu.add_node("node-1", "2", "4Gi")
    m = manager(tmp_path, emu)  # periods of 0.5 s: the notice is one
    m.store.add_user("alice", budget=100_000_000)
    for name in ("a", "b", "c"):
        extra = "    state: {restore: 'true'}\n" if name == "a" else ""
        m.submit("alice", parse(TWO_CORES.format(name=name) + extra, "x.yaml"))
        m.admit()
        m.tick()
        m.tick()
    assert emu.pod("merkat", A1_POD)["spec"]["nodeName"] == "node-0"
    m.stop("b")
    m.tick()  # the market moves a to node-1 (2 cores): noticed, its pod held on node-0
    (vm,) = m.platform.apps["a"].vms
    assert m.platform.hosts.ids[vm.host] == "node-1" and vm.alloc["cpu"] == 2.0
    assert emu.pod("merkat", A1_POD)["spec"]["nodeName"] == "node-0"
    bid_cpu, period = round(vm.bid["cpu"] * MICRO), m.platform.index - 1
    time.sleep(0.5)
    m.tick()  # its notice's time: moved; the held period refunded
    refunded_half(m, period, bid_cpu, "Moving", "its pod stayed on its old node, at its old "
                  "size, during its notice)")
    pod = emu.pod("merkat", A1_POD)
    assert pod["spec"]["nodeName"] == "node-1"
    assert pod["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] == "2"
    assert m.store.ledger.audit().ok
    m.close()
