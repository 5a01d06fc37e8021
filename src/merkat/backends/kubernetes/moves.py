"""A resize that stays Deferred (issue 30; docs/kubernetes.md, "Resizes the cluster may
refuse"): the rule that moves the VM to a node with room.

The kubelet defers a grow when the node's room is held by pods the market does not see (another
tenant's, a DaemonSet). Merkat sends it again every ``resize_retry_periods`` periods
(:mod:`.refusals`); when it is still Deferred after ``resize_move_periods`` consecutive periods
(6 by default), :func:`moves` picks, for each such VM **with a** ``state:`` **section**, the
schedulable node with the most room left for the size the market gives it now — room counted
from the node's allocatable and the requests of merkat's pods there (those it holds, those
held under notice, those this plan starts or moves there, each at the larger of its spec and
this plan's size) — and the VM is moved there through the migration path: the notice (a
period ahead), ``checkpoint`` in the old pod, the same claim and ``restore`` in the new one.
The operation ``move`` (event ``vm-move``) names the new node; the service moves the VM's
record there (:func:`merkat.service.applied.follow_moves`), so the market clears it there
from the next period.

**Decision**: a VM without ``state:`` is not moved (its move would restart it from zero: a
Deferred grow, billed at what it holds, is the lesser harm); it is retried as before. No node
with room: it stays, billed at the allocation applied, and is retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from merkat.backends.kubernetes.notice import Pods
from merkat.backends.kubernetes.objects import DEFERRED, Size
from merkat.core.backend import OpReport, Plan

MOVE_PERIODS = 6  # a resize Deferred this many periods in a row moves its VM (with state:)


class Moving(Pods, Protocol):
    """What the rule needs of the backend besides its pods (:class:`.notice.Pods`): its
    patience and the pod size of an allocation."""

    @property
    def resize_move_periods(self) -> int: ...

    def _size(self, app: str, alloc: Mapping[str, float], current: Size | None,
              vm: str | None = None) -> Size: ...


def _planned(backend: Moving, plan: Plan) -> dict[str, Size]:
    """What each node will hold for merkat's pods after ``plan`` (requests), by node name."""
    used: dict[str, list[int]] = {}

    def add(node: str | None, size: Size | None) -> None:
        if node is not None and size is not None:
            u = used.setdefault(node, [0, 0])
            u[0] += size.cpu
            u[1] += size.memory or 0

    leaving = {*plan.destroy, *plan.suspend, *(m[0] for m in plan.migrate)}
    for vm, p in backend.pods.items():
        if vm in leaving:
            continue
        size = p.desired
        if vm in plan.allocations and size is not None:
            want = backend._size(p.app, plan.allocations[vm], p.desired, vm)
            size = Size(max(size.cpu, want.cpu), max(size.memory or 0, want.memory or 0))
        add(p.node, size)
    for h in backend.held.values():
        add(h.pod.node, h.pod.desired)
    nodes = backend.node_ids
    arriving = [(p.vm, p.app, p.host) for p in (*plan.create, *plan.resume)]
    arriving += [(vm, vm.rpartition("/")[0] or vm, dst) for vm, _, dst in plan.migrate]
    for vm, app, host in arriving:
        if 0 <= host < len(nodes):
            add(nodes[host], backend._size(app, plan.allocations.get(vm, {}), None, vm))
    return {n: Size(u[0], u[1]) for n, u in used.items()}


def moves(backend: Moving, plan: Plan) -> tuple[Plan, list[OpReport]]:
    """``plan`` with the moves of the VMs whose resize stays Deferred (module doc) added to
    its migrations, and one ``move`` operation each."""
    stuck = [vm for vm, p in backend.pods.items()
             if p.state == DEFERRED and p.deferred >= backend.resize_move_periods
             and vm in plan.allocations and backend._template(p.app, vm).state is not None]
    busy = {*plan.destroy, *plan.suspend, *(m[0] for m in plan.migrate)}
    stuck = [vm for vm in stuck if vm not in busy]
    if not stuck:
        return plan, []
    ops: list[OpReport] = []
    migrate = list(plan.migrate)
    for vm in sorted(stuck):
        p = backend.pods[vm]
        want = backend._size(p.app, plan.allocations[vm], None, vm)
        used = _planned(backend, Plan(plan.time, plan.period, plan.destroy, plan.suspend,
                                      plan.create, plan.resume, tuple(migrate),
                                      plan.allocations))
        best: tuple[int, int] | None = None  # (room left in millicores, host)
        for h, node in enumerate(backend.node_ids):
            cap = backend.capacity.get(node)
            if node == p.node or not cap:
                continue
            u = used.get(node, Size(0, 0))
            cpu_left = int(cap[0] * 1000) - u.cpu - want.cpu
            mem_left = int(cap[1] * 2**20) - (u.memory or 0) - (want.memory or 0)
            if cpu_left >= 0 and mem_left >= 0 and (best is None or cpu_left > best[0]):
                best = (cpu_left, h)
        if best is None or p.node not in backend.node_ids:
            continue
        dst = best[1]
        migrate.append((vm, backend.node_ids.index(p.node), dst))
        ops.append(OpReport("move", vm, True, f"resize Deferred {p.deferred} periods on node "
                            f"{p.node}: moved to node {backend.node_ids[dst]}",
                            node=backend.node_ids[dst]))
    if not ops:
        return plan, []
    return Plan(plan.time, plan.period, plan.destroy, plan.suspend, plan.create, plan.resume,
                tuple(migrate), plan.allocations), ops
