"""A resize that stays Deferred (moves.py; docs/kubernetes.md, "Resizes the cluster may refuse"):
sent again every RETRY_PERIODS periods, and after MOVE_PERIODS periods a VM with ``state:`` is
moved, through the notice and the checkpoint, to a node with room, where the grow is applied
and its counter goes on; a VM without ``state:`` stays (retried), and so does one no node has
room for. Through the service, the VM's record follows it to the new node (event vm-move)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from merkat.backends.kubernetes.moves import MOVE_PERIODS
from merkat.backends.kubernetes.objects import pod_name
from merkat.backends.kubernetes.refusals import RETRY_PERIODS
from merkat.core.backend import Plan
from merkat.service.templates import parse
from test_kubernetes_recovery import manager
from test_kubernetes_refusals import TWO_CORES, cluster, foreign_pod, resize_calls
from test_kubernetes_state import STATE, VM, count, setup

A1_POD = pod_name("a/vm1", "main")
APP1_POD = pod_name("app/vm1", "main")

pytestmark = pytest.mark.kubernetes

P = 40.0
TWO = {VM: {"cpu": 2.0}}


def deferred_on_node_0(tmp_path: Path, state: dict[str, object] | None, node_1: str = "4"
                       ) -> tuple[object, object]:
    """app/vm1 on node-0 (2 cores) at 1 core, another tenant's pod there taking 1 core, and
    the market asking 2 cores: the grow is Deferred."""
    emu, live = setup(tmp_path, state)  # node-0 and node-1, 4 cores each
    emu.nodes["node-0"]["status"]["allocatable"]["cpu"] = "2"
    emu.nodes["node-1"]["status"]["allocatable"]["cpu"] = node_1
    foreign_pod(emu, "node-0", "1")
    live.apply(Plan(P, P, allocations=TWO))  # the grow: sent, Deferred by the kubelet
    return emu, live


def test_a_resize_deferred_for_move_periods_moves_a_vm_with_state_to_a_node_with_room(
        tmp_path: Path) -> None:
    emu, live = deferred_on_node_0(tmp_path, STATE)
    assert count(live) == 1
    t = 2 * P
    for k in range(1, MOVE_PERIODS):  # read Deferred k periods in a row: not moved yet
        live.apply(Plan(t, P, allocations=TWO))
        t += P
        assert live.unapplied()[VM]["state"] == "Deferred"
        assert "move" not in [r.op for r in live.report]
        assert ("resize-retry" in [r.op for r in live.report]) == (k % RETRY_PERIODS == 0)
    live.apply(Plan(t, P, allocations=TWO))  # the MOVE_PERIODS-th: moved, noticed first
    ops = {r.op: r for r in live.report}
    assert ops["move"].error is None and ops["move"].node == "node-1"
    pod = emu.pod("merkat", APP1_POD)
    assert pod["spec"]["nodeName"] == "node-0" and "merkat.io/preempt-at" in pod["metadata"][
        "annotations"]
    live.apply(Plan(t + P, P, allocations=TWO))  # the notice's time: checkpoint, move
    pod = emu.pod("merkat", APP1_POD)
    assert pod["spec"]["nodeName"] == "node-1" and pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] == "2"
    live.apply(Plan(t + 2 * P, P, allocations=TWO))
    assert live.unapplied() == {}  # the whole grow applied: billed in full again
    assert count(live) == 2  # its counter went on (checkpoint, claim, restore)
    assert emu.schema_errors == []


def test_a_vm_without_state_is_not_moved_and_keeps_being_retried(tmp_path: Path) -> None:
    emu, live = deferred_on_node_0(tmp_path, None)
    n = len(resize_calls(emu, APP1_POD))
    for k in range(2 * MOVE_PERIODS):
        live.apply(Plan(2 * P + k * P, P, allocations=TWO))
        assert "move" not in [r.op for r in live.report]
    assert emu.pod("merkat", APP1_POD)["spec"]["nodeName"] == "node-0"
    assert len(resize_calls(emu, APP1_POD)) == n + 2 * MOVE_PERIODS // RETRY_PERIODS


def test_no_node_with_room_leaves_the_vm_where_it_is(tmp_path: Path) -> None:
    emu, live = deferred_on_node_0(tmp_path, STATE, node_1="1500m")  # node-1 too small
    for k in range(2 * MOVE_PERIODS):
        live.apply(Plan(2 * P + k * P, P, allocations=TWO))
        assert "move" not in [r.op for r in live.report]
    assert emu.pod("merkat", APP1_POD)["spec"]["nodeName"] == "node-0"


def test_through_the_service_the_moved_vm_is_recorded_on_its_new_node(tmp_path: Path) -> None:
    emu = cluster("2", exec_dir=str(tmp_path / "containers"))
    m = manager(tmp_path, emu)  # one period: 0.5 s
    m.store.add_user("alice", budget=100_000_000)
    state = "    state: {restore: 'true'}\n"
    for name in ("a", "b"):
        m.submit("alice", parse(TWO_CORES.format(name=name) + state, "x.yaml"))
    m.admit()
    m.tick()
    m.tick()
    m.stop("b")
    foreign_pod(emu, "node-0", "500m")  # a's grow to 2 cores is Deferred from now on
    emu.add_node("node-1", "2", "4Gi")  # a node with room appears
    for _ in range(MOVE_PERIODS + 2):
        m.tick()
        if any(e["kind"] == "vm-move" for e in m.store.events(platform="a")):
            break
    (ev,) = [e for e in m.store.events(platform="a") if e["kind"] == "vm-move"]
    assert ev["message"] == ("a/vm1: move (resize Deferred 6 periods on node node-0: moved to "
                             "node node-1)")
    (vm,) = m.platform.apps["a"].vms
    assert m.platform.hosts.ids[vm.host] == "node-1"  # the market clears it there now
    time.sleep(0.5)  # its notice: one period
    m.tick()
    m.tick()
    (v,) = m.vms("a")
    assert v["node"] == "node-1" and v["applied"]["cpu"] == 2.0 and v["resize"] == "Done"
    assert emu.pod("merkat", A1_POD)["spec"]["nodeName"] == "node-1"
    assert m.store.ledger.audit().ok
    m.close()
