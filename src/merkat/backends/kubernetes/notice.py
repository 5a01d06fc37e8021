"""The notice before preemption (issue 30; docs/kubernetes.md, "A notice before preemption"):
a VM with a ``state:`` section is told *before* its pod is stopped, as EC2 Spot's warning.

Contract, applied by :func:`intercept` to each plan before the backend carries it out:

- A **suspension** or a **migration** the market plans for such a VM does not stop its pod in
  that period: the pod is annotated ``merkat.io/preempt-at: <RFC 3339 UTC>`` (one ``PATCH
  pods/{name}``, a merge patch; the application reads it through the downward API in
  ``$MERKAT_NOTICE/annotations``) and **held**: kept running, at its size, until that time.
  The time is the period's time + the notice (``state.notice_s``, default one period, at most
  ``max(period, backend.notice_limit_s)``), written to the second (rounded down: the pod is
  never stopped before the time written).
- The first plan whose time is at or after ``preempt-at`` stops it through the usual path: the
  checkpoint runs in the pod, then the pod is deleted with the template's grace period (SIGTERM,
  SIGKILL ``grace`` s later); a migration's (or a resumption's elsewhere) pod is then created on
  its new node. So the pod is never stopped before the time it was told.
- The platform takes the operation as done in the period it planned it (the report has the
  operation ``notice``: ``the pod stops at ..., suspended``, and no failure): the market has given the VM's share away, a
  suspended VM is not billed while it waits, a moved one is billed at its new allocation.
  The part of a moved VM's charge its held pod did not get (its old size, short of the new
  allocation) is refunded the next period, as a Deferred resize's (``held_short``, read by
  ``KubernetesLive.unapplied``). Meanwhile the held pod still occupies its node: a creation there that would not fit next to
  it (by the pods' requests) waits (it fails with the reason, and the next period places it
  again); a grow there may be Deferred by the kubelet, billed at what is applied.
- **Cancelled**: a held VM the market resumes (or moves back) onto the node its pod is on keeps
  its pod; the annotation is removed (one ``PATCH``: ``null``). Destroyed: its pod is deleted at
  once (its platform ended: nothing to notify). Suspended, resumed elsewhere or moved again:
  the hold keeps its time, with the new destination.
- A notice the API refuses is reported (operation ``notice``) and the VM is stopped at once, as
  without a notice. A VM without ``state:``, or with ``notice_s: 0``, is stopped at once.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from merkat.backends.kubernetes.objects import ApiFailure, PodRecord, PodTemplate, Size
from merkat.core.backend import OpReport, Plan, VMPlacement

PREEMPT_AT = "merkat.io/preempt-at"
NOTICE_LIMIT_S = 120.0  # the server's bound on a template's notice_s (beyond one period)


@dataclass
class Held:
    """A pod kept until ``at`` (the plan's time base); ``host``: where the VM goes next
    (``None``: suspended)."""

    pod: PodRecord
    at: float
    host: int | None
    want: Size | None = None  # the size the market gives it this period (moving), for billing


class Pods(Protocol):
    """The backend's pods as the rules on them (the notice, :mod:`.moves`) read them
    (:class:`~merkat.backends.kubernetes.backend.KubernetesBackend`, which hands itself over):
    its pods, the held ones, its nodes and their room, the templates."""

    @property
    def pods(self) -> dict[str, PodRecord]: ...

    @property
    def held(self) -> dict[str, Held]: ...

    @property
    def node_ids(self) -> list[str]: ...

    @property
    def capacity(self) -> dict[str, tuple[float, float] | None]: ...

    def _template(self, app: str, vm: str | None = None) -> PodTemplate: ...


class Noticing(Pods, Protocol):
    """What a notice needs of the backend besides its pods: the API and the notice's bound."""

    @property
    def client(self) -> Any: ...

    @property
    def notice_limit_s(self) -> float: ...

    @property
    def held_short(self) -> dict[str, tuple[Size, Size | None]]: ...

    def _size(self, app: str, alloc: Mapping[str, float], current: Size | None,
              vm: str | None = None) -> Size: ...

    def _call(self, fn: Callable[[], Any], *, retry: bool = True) -> Any: ...


def rfc3339(t: float) -> str:
    """``t`` (epoch seconds) as RFC 3339 UTC, to the second (rounded down)."""
    return datetime.datetime.fromtimestamp(int(t), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def notice_of(backend: Noticing, vm: str, period: float) -> float:
    """The notice (s) ``vm``'s pod gets before a suspension or migration; 0: none."""
    p = backend.pods.get(vm)
    st = backend._template(p.app, vm).state if p is not None else None
    if st is None:
        return 0.0
    want = period if st.notice_s is None else float(st.notice_s)
    return max(0.0, min(want, max(period, backend.notice_limit_s)))


def _annotate(backend: Noticing, p: PodRecord, value: str | None) -> str | None:
    """Set (or remove: ``None``) the pod's ``preempt-at``; the API's refusal, or None."""
    from lightkube.resources.core_v1 import Pod
    from lightkube.types import PatchType


    body = {"metadata": {"annotations": {PREEMPT_AT: value}}}
    try:
        backend._call(lambda: backend.client.patch(Pod, p.name, body, namespace=p.namespace,
                                                   patch_type=PatchType.MERGE), retry=False)
    except ApiFailure as e:
        return e.reason
    return None


def intercept(backend: Noticing, plan: Plan) -> tuple[Plan, list[OpReport]]:
    """The part of ``plan`` to carry out now (module doc) and the operations answered here."""
    held = backend.held
    backend.held_short.clear()  # what the moving held pods had, against what they were billed
    backend.held_short.update({vm: (h.want, h.pod.actual) for vm, h in held.items()
                               if h.host is not None and h.want is not None})
    if not held and not plan.suspend and not plan.migrate:
        return plan, []
    ops: list[OpReport] = []
    suspend, migrate = list(plan.suspend), list(plan.migrate)
    resume = {p.vm: p for p in plan.resume}
    nodes = backend.node_ids

    def release(vm: str, withdraw: bool) -> None:
        h = held.pop(vm)
        backend.pods[vm] = h.pod
        if withdraw:
            why = _annotate(backend, h.pod, None)
            ops.append(OpReport("notice", vm, why is None, why or "notice withdrawn: the pod "
                                "stays", node=h.pod.node or ""))

    for vm, h in list(held.items()):  # what the market asks now of the VMs it held
        here = h.pod.node
        if vm in plan.destroy:
            release(vm, False)
            continue
        to = resume.get(vm)
        move = next((m for m in migrate if m[0] == vm), None)
        if to is not None or move is not None:
            host = to.host if to is not None else move[2]  # type: ignore[index]
            if 0 <= host < len(nodes) and nodes[host] == here:  # back where its pod is
                release(vm, True)
                if move is not None:
                    migrate.remove(move)
                continue
            h.host = host
            if to is not None:
                del resume[vm]
                ops.append(OpReport("notice", vm, True, f"resumed elsewhere: the pod stops at "
                                    f"{rfc3339(h.at)}, then starts on node {nodes[host]}",
                                    node=here or ""))
            else:
                migrate.remove(move)  # type: ignore[arg-type]
        if vm in suspend:
            h.host = None
            suspend.remove(vm)
    stopping: set[str] = set()
    for vm, h in list(held.items()):  # due: stopped now, through the usual path
        if plan.time >= h.at:
            release(vm, False)
            stopping.add(vm)
            if h.host is None:
                suspend.append(vm)
            else:
                migrate.append((vm, -1, h.host))
    for vm, host in [*[(v, None) for v in suspend], *[(m[0], m[2]) for m in migrate]]:
        if vm in stopping or vm in held or vm not in backend.pods:
            continue
        notice = notice_of(backend, vm, plan.period)
        if notice <= 0:
            continue
        p = backend.pods[vm]
        at = plan.time + notice
        why = _annotate(backend, p, rfc3339(at))
        if why is not None:
            ops.append(OpReport("notice", vm, False, f"notice failed: {why}", node=p.node or ""))
            continue
        held[vm] = Held(backend.pods.pop(vm), at, host)
        then = "suspended" if host is None else f"then starts on node {nodes[host]}"
        ops.append(OpReport("notice", vm, True, f"the pod stops at {rfc3339(at)}, {then}",
                            node=p.node or ""))
    for vm, h in held.items():  # a moving VM is billed at its new size: remember it
        alloc = plan.allocations.get(vm) if h.host is not None else None
        h.want = backend._size(h.pod.app, alloc, None, vm) if alloc is not None else None
    suspend = [v for v in suspend if v not in held]
    migrate = [m for m in migrate if m[0] not in held]
    allocs = {vm: a for vm, a in plan.allocations.items() if vm not in held}
    new = Plan(plan.time, plan.period, plan.destroy, tuple(suspend), plan.create,
               tuple(VMPlacement(p.vm, p.app, p.host) for p in resume.values()), tuple(migrate),
               allocs)
    return new, ops


def room(backend: Noticing, node: str, size: Size) -> str | None:
    """Why a pod of ``size`` cannot start on ``node`` while held pods still occupy it (by the
    requests of merkat's pods there), or None."""
    waiting = [(vm, h) for vm, h in backend.held.items() if h.pod.node == node]
    if not waiting:
        return None
    cap = backend.capacity.get(node) or (0.0, 0.0)
    pods: list[Any] = [p for p in backend.pods.values() if p.node == node]
    pods += [h.pod for _, h in waiting]
    cpu = sum(p.desired.cpu for p in pods if p.desired is not None) + size.cpu
    mem = sum(p.desired.memory or 0 for p in pods if p.desired is not None) + (size.memory or 0)
    if cpu <= cap[0] * 1000 + 1e-6 and mem <= cap[1] * 2**20 + 1:
        return None
    vm, h = min(waiting, key=lambda w: w[1].at)
    return (f"node {node} is still held by {vm}'s pod until its notice ends "
            f"({rfc3339(h.at)}); placed again next period")
