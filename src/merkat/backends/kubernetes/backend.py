"""The Kubernetes backend: each merkat VM is a pod, placed by the market, resized in place.

Contract (behind :class:`merkat.core.backend.Backend`):

- **Nodes** are read each period (``GET /api/v1/nodes``, one call): a schedulable, Ready node
  offers its ``status.allocatable``; :meth:`KubernetesBackend.hosts` gives them to the market
  under stable indices (a node keeps its index; one that leaves or is cordoned offers 0).
- **Pods** are read each period with one list call by the label ``merkat.io/instance``; that
  is also how a restarted server re-adopts its pods (:meth:`KubernetesBackend.adopt`).
- **apply(plan)** issues only the calls the changes need, in an order that keeps every node
  feasible: deletions (destroy, suspend, the source half of a migration), CPU/memory shrinks,
  creations (create, resume, the destination half of a migration: ``POST pods`` then ``POST
  pods/{name}/binding``), then grows (``PATCH pods/{name}/resize``). An allocation equal to the
  pod's spec (to the millicore and KiB) costs no call. So calls per period = 2 + changes.
- Every operation comes back as an :class:`OpReport` (done, or failed with the API server's
  reason) in the :class:`ApplyReport` :meth:`KubernetesBackend.apply_report` returns; the resize
  states the kubelet reported since (Deferred, Infeasible, InProgress, Proposed) and the VMs
  lost (node gone, pod failed or deleted behind merkat's back) are in the next period's report.
- 409 (Conflict, AlreadyExists: a pod of the same name still terminating), 429 and 5xx are
  retried ``retries`` times with exponential backoff; 422 (Invalid) is reported, not retried;
  a timeout is not retried, and ends the period's calls (the rest are reported "not sent").
- **Suspend** deletes the pod and **resume** recreates it (docs/kubernetes.md: Kubernetes has no
  freeze; a suspended VM must hold no node resources). A **migration** is delete + recreate on
  the new node; its duration (both API halves) is measured and reported.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from merkat.backends.kubernetes import moves as moves_mod
from merkat.backends.kubernetes import notice as notice_mod
from merkat.backends.kubernetes import state as state_mod
from merkat.backends.kubernetes.objects import (
    A_VM,
    DEFERRED,
    DONE,
    L_INSTANCE,
    PROPOSED,
    ApiFailure,
    Json,
    PodRecord,
    PodTemplate,
    Size,
    actual_size,
    binding,
    cores_to_millis,
    desired_size,
    dns_label,
    label_value,
    mib_to_bytes,
    node_capacity,
    pod_manifest,
    resize_patch,
    resize_state,
)
from merkat.backends.kubernetes.podexec import ExecResult, exec_in_pod
from merkat.backends.kubernetes.refusals import RETRY_PERIODS, restart_count, retry_due
from merkat.control.types import Metrics
from merkat.core.backend import ApplyReport as ApplyReport
from merkat.core.backend import OpReport as OpReport
from merkat.core.backend import Plan
from merkat.market import Hosts

RETRYABLE = frozenset({409, 429, 500, 502, 503, 504})


def _bind(client: Any, body: Any, name: str, namespace: str) -> None:
    """``POST pods/{name}/binding``. The API server answers 201 with a ``Status`` object, which
    lightkube tries to decode as a ``Binding`` and fails on: that failure after a 2xx is the
    success."""
    try:
        client.create(body, name=name, namespace=namespace)
    except ValueError as e:  # msgspec.ValidationError: the Status body of a 201
        if "target" not in str(e):
            raise


@dataclass
class KubernetesBackend:
    """Merkat VMs as pods through a lightkube ``Client`` (sync; the server runs the period in a
    worker thread). ``namespace``: the one namespace of every pod, or ``None`` for one namespace
    per merkat user (``merkat-<owner>``, created when first needed). ``instance`` tells this
    server's pods from others' (label ``merkat.io/instance``). ``bind``: ``"binding"`` (create
    unscheduled, then the binding subresource) or ``"node-name"`` (``spec.nodeName`` at create:
    one call less, no admission by a scheduler)."""

    client: Any
    namespace: str | None = "merkat"
    instance: str = "merkat"
    bind: str = "binding"
    retries: int = 5
    backoff_s: float = 0.05
    default_template: PodTemplate = field(default_factory=PodTemplate)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    templates: dict[str, PodTemplate] = field(default_factory=dict)
    # Per-VM templates (the live service's launchers: app, vm -> template), before ``templates``.
    template_of: Callable[[str, str], PodTemplate | None] | None = None
    api_calls: int = 0
    node_ids: list[str] = field(default_factory=list)
    capacity: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    _metrics: dict[str, Metrics] = field(default_factory=dict)
    _finished: set[str] = field(default_factory=set)
    _idle: dict[str, frozenset[str]] = field(default_factory=dict)
    _namespaces: set[str] = field(default_factory=set)
    _pending: list[OpReport] = field(default_factory=list)
    claims: dict[tuple[str, str], str] = field(default_factory=dict)  # PVC -> its VM (state.py)
    checkpoint_limit_s: float = 10.0  # a checkpoint's time at most, whatever its template says
    resize_retry_periods: int = RETRY_PERIODS  # a resize Deferred that long is sent again
    resize_move_periods: int = moves_mod.MOVE_PERIODS  # ... that long: moved (state:, moves.py)
    notice_limit_s: float = notice_mod.NOTICE_LIMIT_S  # a template's notice_s at most (>1 period)
    held: dict[str, notice_mod.Held] = field(default_factory=dict)  # pods under notice (notice.py)
    held_short: dict[str, tuple[Size, Size | None]] = field(default_factory=dict)  # (notice.py)
    last_report: ApplyReport | None = None
    _in_period: bool = False
    _unanswered: str | None = None  # why a call of this period got no answer (apply_report)

    def __post_init__(self) -> None:
        if self.bind not in ("binding", "node-name"):
            raise ValueError(f"bind must be 'binding' or 'node-name', got {self.bind!r}")

    # --- applications (the service registers each one's template) ----------------------

    def add_app(self, app: str, template: PodTemplate | None = None) -> None:
        self.templates[app] = template or self.default_template

    def push_metrics(self, app: str, metrics: Metrics, *, finished: bool = False,
                     idle: Iterable[str] = ()) -> None:
        """Metrics pushed by the application's monitor (Merkat §4.2.3)."""
        self._metrics[app] = metrics
        self._idle[app] = frozenset(idle)
        if finished:
            self._finished.add(app)

    def metrics(self, app: str) -> Metrics:
        return self._metrics.get(app) or Metrics()

    def finished(self, app: str) -> bool:
        """Pushed as finished, or every pod of ``app`` has exited successfully."""
        if app in self._finished:
            return True
        mine = [p for p in self.pods.values() if p.app == app]
        return bool(mine) and all(p.phase == "Succeeded" for p in mine)

    def idle(self, app: str) -> frozenset[str]:
        return self._idle.get(app, frozenset())

    # --- the cluster ------------------------------------------------------------------

    def hosts(self) -> Hosts:
        """The nodes under stable indices (a node gone or not schedulable offers 0)."""
        cap = [self.capacity.get(n) or (0.0, 0.0) for n in self.node_ids]
        return Hosts(tuple(self.node_ids), np.array(cap, dtype=float).reshape(-1, 2))

    def refresh(self) -> list[OpReport]:
        """Read the nodes and this instance's pods (two calls); return what changed behind
        merkat's back: VMs lost with their node or their pod, pods the kubelet failed, and
        resizes not actuated (Deferred, Infeasible, InProgress)."""
        from lightkube import ALL_NS
        from lightkube.resources.core_v1 import Node, Pod

        seen = {}
        for node in self._call(lambda: list(self.client.list(Node))):
            d = node.to_dict()
            seen[d["metadata"]["name"]] = node_capacity(d)
        for name in sorted(seen):
            if name not in self.capacity:
                self.node_ids.append(name)
        self.capacity = {n: seen.get(n) for n in self.node_ids}
        ns = ALL_NS if self.namespace is None else self.namespace
        labels = {L_INSTANCE: label_value(self.instance)}
        listed: dict[str, Json] = {}
        for pod in self._call(lambda: list(self.client.list(Pod, namespace=ns, labels=labels))):
            d = pod.to_dict()
            vm = (d["metadata"].get("annotations") or {}).get(A_VM)
            if vm and not d["metadata"].get("deletionTimestamp") and vm not in self.held:
                listed[vm] = d
        out: list[OpReport] = []
        for vm in [v for v in self.pods if v not in listed]:
            p = self.pods.pop(vm)
            out.append(OpReport("lost", vm, False, "pod deleted outside merkat", node=p.node or ""))
        for vm, d in listed.items():
            p = self._track(vm, d)
            if p.restarted:
                out.append(OpReport("restart", vm, True, "the container restarted to apply a "
                                    "resize (resizePolicy RestartContainer): its memory is lost",
                                    node=p.node or ""))
            if p.node and p.node not in seen:
                out.append(OpReport("lost", vm, False, f"node {p.node} is gone", node=p.node))
                self._delete_quietly(p)
                del self.pods[vm]
            elif p.phase == "Failed" and p.state != "reported":
                reason = (d.get("status") or {}).get("reason") or "the container failed"
                out.append(OpReport("failed", vm, False, str(reason), node=p.node or ""))
                p.state = "reported"
            elif p.state not in (DONE, "reported"):
                out.append(OpReport("resize-status", vm, p.state == PROPOSED
                                    or p.state == "InProgress", p.message, state=p.state,
                                    node=p.node or ""))
        return out

    def exec(self, vm: str, argv: Sequence[str], timeout: float = 5.0) -> ExecResult:
        """Run ``argv`` in ``vm``'s pod (``pods/{name}/exec``: one API call, not retried);
        failures and timeouts come back in the result (:mod:`.podexec`), never raised."""
        p = self.pods.get(vm) or (h.pod if (h := self.held.get(vm)) else None)  # noticed too
        if p is None:
            return ExecResult(error=f"no pod for {vm}")
        self.api_calls += 1
        return exec_in_pod(self.client, p.name, p.namespace, argv, timeout=timeout)

    def adopt(self) -> dict[str, str]:
        """After a restart: read the pods of this instance and take them over; returns
        ``{vm: node}`` (the platform's state store says which applications they belong to)."""
        self._pending.extend(self.refresh())
        return {vm: p.node or "" for vm, p in self.pods.items()}

    def _track(self, vm: str, d: Json) -> PodRecord:
        meta, status = d["metadata"], d.get("status") or {}
        app = vm.rpartition("/")[0] or vm
        p = self.pods.get(vm)
        if p is None or p.name != meta["name"]:
            p = self.pods[vm] = PodRecord(meta.get("namespace") or self.namespace or "default",
                                     meta["name"], app, None, None)
        p.node = (d.get("spec") or {}).get("nodeName")
        p.desired = p.read = desired_size(d)
        p.actual = actual_size(d)
        p.phase = str(status.get("phase") or "Pending")
        if p.state != "reported":
            p.state, p.message = resize_state(d) if actual_size(d) is not None else (DONE, "")
        p.deferred = p.deferred + 1 if p.state == DEFERRED else 0
        count = restart_count(d)
        p.restarted, p.restarts = count > p.restarts, count
        return p

    # --- the period -------------------------------------------------------------------

    def apply(self, plan: Plan) -> ApplyReport:
        return self.apply_report(plan)

    def apply_report(self, plan: Plan) -> ApplyReport:
        """Carry out ``plan``; see the module docstring for the order and the calls. Once a
        call got no answer (a timeout, a refused connection, a credential plugin that
        failed), the rest of the period's calls are not sent: each would wait as long."""
        self._unanswered, self._in_period = None, True
        try:
            return self._apply_report(plan)
        finally:
            self._unanswered, self._in_period = None, False

    def _apply_report(self, plan: Plan) -> ApplyReport:
        calls0 = self.api_calls
        ops: list[OpReport] = [*self._pending]
        self._pending.clear()
        try:
            ops += self.refresh()
        except ApiFailure as e:  # the API is unreachable: nothing can be done this period
            ops.append(OpReport("refresh", "", False, e.reason))
            report = ApplyReport(plan.time, tuple(ops), self.api_calls - calls0)
            self.last_report = report
            return report
        plan, moved = moves_mod.moves(self, plan)  # resizes Deferred too long: to a node with room
        plan, notified = notice_mod.intercept(self, plan)  # notices: stopped a period later
        ops += moved + notified
        allocs = plan.allocations
        moving = {vm: (src, dst) for vm, src, dst in plan.migrate}
        state_mod.checkpoint_all(self, [*plan.suspend, *moving])  # before the pods go
        for vm in plan.destroy:
            ops.append(self._remove("destroy", vm))
        for vm in plan.suspend:
            ops.append(self._remove("suspend", vm))
        started: dict[str, float] = {}
        for vm in moving:
            r = self._remove("migrate", vm)
            started[vm] = r.seconds
            if not r.ok:
                ops.append(r)
        creating = {p.vm: ("create", p.app, p.host) for p in plan.create}
        creating.update({p.vm: ("resume", p.app, p.host) for p in plan.resume})
        for vm, (op, _, host) in list(creating.items()):  # its pod exists (re-adopted)
            p = self.pods.get(vm)
            if p is None:
                continue
            if 0 <= host < len(self.node_ids) and p.node == self.node_ids[host]:
                del creating[vm]  # already there: only its allocation may change
                ops.append(OpReport(op, vm, True, "the pod exists already", node=p.node))
            else:  # elsewhere: recreated where the market wants it
                r = self._remove(op, vm)
                started[vm] = r.seconds
        creating.update({vm: ("migrate", vm.rpartition("/")[0] or vm, dst)
                         for vm, (_, dst) in moving.items()})
        grows: list[tuple[str, Size]] = []
        for vm, alloc in allocs.items():
            if vm in creating:
                continue
            p = self.pods.get(vm)
            if p is None:
                ops.append(OpReport("resize", vm, False, "no pod for this VM"))
                continue
            want = self._size(p.app, alloc, p.desired, vm)
            if want == p.desired:
                if p.state == DEFERRED and retry_due(p.deferred, self.resize_retry_periods):
                    ops.append(self._resize(vm, p, want, "resize-retry"))
                continue
            if p.desired is not None and want.cpu <= p.desired.cpu and (
                    want.memory or 0) <= (p.desired.memory or 0):
                ops.append(self._resize(vm, p, want))
            else:
                grows.append((vm, want))
        for vm, (op, app, host) in creating.items():
            prior = started.get(vm, 0.0)
            ops.append(self._create(op, vm, app, host, allocs.get(vm, {}), prior))
        for vm, want in grows:
            ops.append(self._resize(vm, self.pods[vm], want))
        report = ApplyReport(plan.time, tuple(ops), self.api_calls - calls0)
        self.last_report = report
        return report

    # --- operations -----------------------------------------------------------------

    def _template(self, app: str, vm: str | None = None) -> PodTemplate:
        if vm is not None and self.template_of is not None:
            t = self.template_of(app, vm)
            if t is not None:
                return t
        return self.templates.get(app) or self.default_template

    def _size(self, app: str, alloc: Mapping[str, float], current: Size | None,
              vm: str | None = None) -> Size:
        """The pod size for a market allocation: CPU rounded down to the millicore; memory the
        allocation (never under the template's ``memory_mib``, the VM's floor) when traded, the
        template's size otherwise."""
        t = self._template(app, vm)
        cpu = cores_to_millis(alloc.get("cpu", 0.0))
        if "memory" in alloc:
            mem: int | None = mib_to_bytes(max(alloc["memory"], t.memory_mib))
            if (current is not None and current.memory is not None and mem is not None
                    and mem < current.memory and not t.memory_restart):
                mem = current.memory  # NotRequired memory cannot shrink (docs/kubernetes.md)
        elif t.memory_mib > 0:
            mem = mib_to_bytes(t.memory_mib)
        else:
            mem = None
        return Size(cpu, mem)

    def _ns_name(self, app: str, vm: str | None = None) -> str:
        """The namespace of ``vm``'s pod and claim (not created: :meth:`_ns`)."""
        if self.namespace is not None:
            return self.namespace
        return dns_label(f"merkat-{self._template(app, vm).owner}")

    def _ns(self, app: str, vm: str | None = None) -> str:
        ns = self._ns_name(app, vm)
        if self.namespace is None and ns not in self._namespaces:
            from lightkube.resources.core_v1 import Namespace

            body = Namespace.from_dict({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": ns}})
            try:
                self._call(lambda: self.client.create(body), retry=False)
            except ApiFailure as e:
                if e.code != 409:  # 409: it exists already
                    raise
            self._namespaces.add(ns)
        return ns

    def _create(self, op: str, vm: str, app: str, host: int, alloc: Mapping[str, float],
                prior: float) -> OpReport:
        from lightkube.resources.core_v1 import Pod

        if not 0 <= host < len(self.node_ids) or not self.capacity.get(self.node_ids[host]):
            node = self.node_ids[host] if 0 <= host < len(self.node_ids) else f"#{host}"
            return OpReport(op, vm, False, f"node {node} is gone or not schedulable", node=node)
        node = self.node_ids[host]
        template = self._template(app, vm)
        size = self._size(app, alloc, None, vm)
        if (full := notice_mod.room(self, node, size)) is not None:  # a held pod is there
            return OpReport(op, vm, False, full, prior, node=node)
        t0 = self.clock()
        try:
            ns = self._ns(app, vm)
            manifest = pod_manifest(instance=self.instance, vm=vm, namespace=ns,
                                    template=template, size=size,
                                    node=node if self.bind == "node-name" else None)
            name = manifest["metadata"]["name"]
            said = ""
            if template.state is not None:  # its claim first, then the pod mounting it
                legacy = (None if op == "create"  # a first pod: no claim from before
                          else state_mod.legacy_claim(vm, template.cluster))
                manifest, said = state_mod.prepare(self, ns, manifest, template.state, legacy,
                                                   fresh=op == "create")
            self._call(lambda: self.client.create(Pod.from_dict(manifest)))
            self.pods[vm] = PodRecord(ns, name, app, None, size)
            if self.bind == "binding":
                body = Pod.Binding.from_dict(binding(name, node))
                self._call(lambda: _bind(self.client, body, name, ns))
            self.pods[vm].node = node
        except ApiFailure as e:
            p = self.pods.get(vm)
            if p is not None and p.node is None:  # created but not bound: no half-made VM
                self._delete_quietly(p)
                del self.pods[vm]
            return OpReport(op, vm, False, e.reason, prior + self.clock() - t0, node=node)
        return OpReport(op, vm, True, said, prior + self.clock() - t0, node=node)

    def _remove(self, op: str, vm: str) -> OpReport:
        from lightkube.resources.core_v1 import Pod

        p = self.pods.pop(vm, None)
        app = p.app if p is not None else vm.rpartition("/")[0] or vm
        template = self._template(app, vm) if p is not None or op == "destroy" else None
        st = template.state if template is not None else None
        t0 = self.clock()
        if template is not None and st is not None and op == "destroy":  # pod or no pod
            state_mod.drop_vm_claim(self, vm, template.cluster, p, app)
        if p is None:
            return OpReport(op, vm, True, "no pod (already gone)")
        grace = st.grace if st is not None else 0
        try:
            self._call(lambda: self.client.delete(Pod, p.name, namespace=p.namespace,
                                                  grace_period=grace))
        except ApiFailure as e:
            if e.code != 404:
                self.pods[vm] = p
                return OpReport(op, vm, False, e.reason, self.clock() - t0, node=p.node or "")
        return OpReport(op, vm, True, "", self.clock() - t0, node=p.node or "")

    def _delete_quietly(self, p: PodRecord) -> None:
        from lightkube.resources.core_v1 import Pod

        with contextlib.suppress(ApiFailure):  # the pod GC removes pods of deleted nodes anyway
            self._call(lambda: self.client.delete(Pod, p.name, namespace=p.namespace,
                                                  grace_period=0), retry=False)

    def _resize(self, vm: str, p: PodRecord, want: Size, op: str = "resize") -> OpReport:
        from lightkube.resources.core_v1 import Pod
        from lightkube.types import PatchType

        body = resize_patch(want, None if op == "resize-retry" else p.desired)
        t0 = self.clock()
        try:
            self._call(lambda: self.client.patch(Pod.Resize, p.name, body,
                                                 namespace=p.namespace,
                                                 patch_type=PatchType.STRATEGIC))
        except ApiFailure as e:
            return OpReport(op, vm, False, e.reason, self.clock() - t0, node=p.node or "")
        p.desired = want
        return OpReport(op, vm, True, "", self.clock() - t0, PROPOSED, p.node or "")

    def _call(self, fn: Callable[[], Any], *, retry: bool = True) -> Any:
        """One API call (counted), retried on 409/429/5xx; errors come back as :class:`ApiFailure`
        with the API server's message."""
        import httpx2
        from lightkube import ApiError
        from lightkube.core.exceptions import ConfigError

        if self._unanswered is not None:
            raise ApiFailure(0, f"not sent: {self._unanswered} earlier this period")
        attempts = 1 + (self.retries if retry else 0)
        for k in range(attempts):
            self.api_calls += 1
            try:
                return fn()
            except ApiFailure as e:  # an answer not the API's, a failed exec plugin (kubeauth)
                if e.code in RETRYABLE and k + 1 < attempts:
                    self.sleep(self.backoff_s * 2**k)
                    continue
                if e.code == 0 and self._in_period:
                    self._unanswered = e.reason
                raise
            except ConfigError as e:  # credentials read at each call (a tokenFile gone)
                raise ApiFailure(0, f"kubeconfig credentials: {e}") from None
            except ApiError as e:
                code = int(e.status.code or 0)
                if code in RETRYABLE and k + 1 < attempts:
                    self.sleep(self.backoff_s * 2**k)
                    continue
                raise ApiFailure(code, f"{code} {e.status.reason}: {e.status.message}") from None
            except httpx2.TransportError as e:  # connection refused, TLS, timeouts
                # A timeout is not retried: the server had its 10 s (and a write may have
                # been done); a refused connection is, briefly.
                if k + 1 < attempts and retry and not isinstance(e, httpx2.TimeoutException):
                    self.sleep(self.backoff_s * 2**k)
                    continue
                reason = f"{type(e).__name__}: {e}"
                if self._in_period:
                    self._unanswered = reason
                raise ApiFailure(0, reason) from None
        raise AssertionError("unreachable")
