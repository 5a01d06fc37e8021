"""The Kubernetes backend as the live service drives it (the service's ``LiveBackend``).

:class:`KubernetesLive` wraps a :class:`~merkat.backends.kubernetes.backend.KubernetesBackend`
with what the applications manager asks of a live backend, the same surface as the local
backend's: ``register(app, launcher)`` (how each VM starts: ``launcher(app, vm, index)`` gives
the command, environment, virtual cluster and memory floor — run by ``/bin/sh -c`` in the
configured ``image``), ``set_metrics``, ``poll`` (pods that exited since the last call),
``describe``, ``node_list``, ``log_path`` (the pod's log fetched through the API into a file,
for ``merkat platform logs``), ``report`` (the last period's operations, each with
``op``, ``vm``, ``error``; ``apply`` returns them as an ``ApplyReport``), ``reap_orphans`` and ``close``.

Restarts (docs/kubernetes.md, "Restart"): the backend finds the previous server's pods by
label at start (:attr:`adopted`: ``merkat.io/instance``, each pod's VM in its annotation
``merkat.io/vm``). The service's recovery then calls :meth:`KubernetesLive.adopt` for each VM
the store kept, with the local backend's contract: a pod still Running (or Pending, bound) on a
Ready node is taken back as it is (same pod, same uid: op ``adopt``), resized only when its
spec differs from the stored allocation; a pod gone, ended, unbound or on a node gone or not
Ready is deleted and created again on the stored node (op ``restart``); a suspended VM
(``alloc`` None) has no pod (suspend deletes it) and stays so (op ``adopt-frozen``).
``reap_orphans`` then deletes the pods no stored VM claimed. ``close`` (a graceful stop)
deletes this server's pods, as the local backend destroys its VMs.

Monitors run in the pods (:func:`merkat.service.monitors.read_in_vm` asks for these): a command
monitor through :meth:`KubernetesLive.exec_in` (``pods/{name}/exec``), a log monitor through
:meth:`KubernetesLive.log_text` (``pods/{name}/log``) or, when it names a file, ``tail`` of that
file run by ``exec_in``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from merkat.backends.kubernetes.backend import KubernetesBackend, OpReport
from merkat.backends.kubernetes.notice import rfc3339
from merkat.backends.kubernetes.objects import ApiFailure, PodTemplate
from merkat.backends.kubernetes.podexec import ExecResult
from merkat.backends.kubernetes.refusals import shortfall
from merkat.backends.kubernetes.state import StateVolume, checkpoint_all
from merkat.control.types import Metrics
from merkat.core.backend import ApplyReport, Plan

DEFAULT_IMAGE = "python:3.12-slim"


@dataclass(frozen=True)
class KubeNode:
    """A node as the API shows it (``cpus``: no cpuset on Kubernetes)."""

    name: str
    cores: float
    memory: float
    cpus: str = "-"
    schedulable: bool = True


class KubernetesLive:
    """Pods for the live service (module doc). ``logs``: where pod logs are copied."""

    def __init__(self, kube: KubernetesBackend, *, logs: Path, image: str = DEFAULT_IMAGE,
                 owner_of: dict[str, str] | None = None) -> None:
        self.kube = kube
        self.logs = Path(logs)
        self.image = image
        self.owner_of = owner_of if owner_of is not None else {}
        self.launchers: dict[str, Any] = {}
        self.monitored: dict[str, str] = {}
        self.report: list[OpReport] = []
        self.enforced = True
        self.warning: str | None = None
        self.foreign: list[str] = []  # (the instance label keeps other servers' pods apart)
        self._exited: set[str] = set()
        self._claimed: set[str] = set()  # VMs a restart took back (adopt): not orphans
        self._kept: set[str] = set()  # ... of which the pod was kept as it was
        kube.template_of = self._template
        try:
            adopted = kube.adopt()
        except ApiFailure as e:
            self.warning = f"Kubernetes API not reachable: {e.reason}"
            adopted = {}
        self.adopted = adopted
        if not kube.node_ids and self.warning is None:
            self.warning = "no schedulable Kubernetes node"

    # --- what the applications manager tells us -------------------------------------------

    def register(self, app: str, launcher: Any) -> None:
        self.launchers[app] = launcher
        self.monitored.setdefault(app, f"{app}/vm1")

    def unregister(self, app: str) -> None:
        """Forget ``app``'s launcher, monitored VM and owner (an admission that failed)."""
        self.launchers.pop(app, None)
        self.monitored.pop(app, None)
        self.owner_of.pop(app, None)

    def set_metrics(self, app: str, metrics: Metrics) -> None:
        self.kube.push_metrics(app, metrics)

    def _template(self, app: str, vm: str) -> PodTemplate | None:
        launcher = self.launchers.get(app)
        if launcher is None:
            return None
        tail = vm.rpartition("/vm")[2]
        index = int(tail) - 1 if tail.isdigit() else 0
        launch = launcher(app, vm, index)
        env = {"MERKAT_PLATFORM": app, "MERKAT_VM": vm, "MERKAT_INDEX": str(launch.index),
               "MERKAT_CLUSTER": launch.cluster, **dict(launch.env)}
        return PodTemplate(image=self.image, command=("/bin/sh", "-c", launch.command),
                           env=env, memory_mib=float(launch.memory_floor),
                           owner=self.owner_of.get(app, "users"), cluster=launch.cluster,
                           state=StateVolume.of(getattr(launch, "state", None)),
                           memory_restart=bool(getattr(launch, "memory_restart", False)))

    # --- the Backend seam -------------------------------------------------------------

    def apply(self, plan: Plan) -> ApplyReport:
        report = self.kube.apply_report(plan)
        # A resize the kubelet has not applied is the service's resize-refused event
        # (merkat.service.applied, through unapplied()), not a failure every period.
        self.report = [r for r in report.ops if r.op != "resize-status"]
        self._kept -= {r.vm for r in self.report if r.op not in ("resize", "resize-status", "resize-retry", "restart")}
        return replace(report, ops=tuple(self.report))

    def metrics(self, app: str) -> Metrics:
        m = self.kube.metrics(app)
        if self.finished(app):  # the monitored pod ended: the work is done (as the local one)
            total = m.work_total if m.work_total is not None else max(m.work_done, 1.0)
            return Metrics(work_done=total, work_total=total)
        return m

    def finished(self, app: str) -> bool:
        """The monitored VM's pod exited with 0 (else: every pod of ``app`` did)."""
        vm = self.monitored.get(app)
        p = self.kube.pods.get(vm) if vm else None
        if p is not None:
            return p.phase == "Succeeded"
        return self.kube.finished(app)

    def hosts(self) -> Any:
        """The nodes as last read (stable indices; the manager refreshes the market's)."""
        return self.kube.hosts()

    def idle(self, app: str) -> frozenset[str]:
        return self.kube.idle(app)

    # --- health, description -----------------------------------------------------------

    def poll(self) -> list[OpReport]:
        """Pods whose container exited since the last call (0: ``exit``; else an error)."""
        out: list[OpReport] = []
        for vm, p in self.kube.pods.items():
            if vm in self._exited or p.phase not in ("Succeeded", "Failed"):
                continue
            self._exited.add(vm)
            out.append(OpReport.of("exit", vm, None if p.phase == "Succeeded" else
                              "the pod failed (kubectl describe pod for the reason)"))
        return out

    def describe(self, vm: str) -> dict[str, Any] | None:
        h = self.kube.held.get(vm)  # under notice (notice.py): its pod still runs until then
        p = self.kube.pods.get(vm) or (h.pod if h is not None else None)
        if p is None:
            return None
        size = p.desired.as_market() if p.desired else {}
        held = p.actual.as_market() if p.actual else {}
        return {"node": p.node, "process": p.phase.lower(), "pod": f"{p.namespace}/{p.name}",
                "resize": p.state if p.state != "reported" else "Failed",
                "resize_message": p.message or None, "cgroup": None,
                "adopted": vm in self._kept,
                "limits": {"cpu": size.get("cpu"), "memory": size.get("memory")},
                "requested": {"cpu": size.get("cpu"), "memory": size.get("memory")},
                "applied": {"cpu": held.get("cpu"), "memory": held.get("memory")},
                "preempt_at": rfc3339(h.at) if h is not None else None}

    def suspension(self, template: Mapping[str, Any]) -> dict[str, Any]:
        """What a suspension or a migration does to a platform of ``template`` (the API's
        ``suspension`` of ``platform show``): without a ``state:`` section the pod is deleted
        and its memory and files are lost."""
        clusters = [c for c in template.get("clusters") or () if isinstance(c, Mapping)]
        kept = [c.get("name") for c in clusters if c.get("state")]
        if clusters and len(kept) == len(clusters):
            return {"keeps_state": True,
                    "note": "a suspension or a migration runs the clusters' checkpoint, keeps "
                            "each VM's volume and runs restore in its new pod; memory not "
                            "checkpointed is lost"}
        return {"keeps_state": False,
                "note": "destructive: a suspension or a migration deletes the pod; the "
                        "application restarts from its command, its memory and local files "
                        "lost" + (f" (only {', '.join(map(str, kept))} keep a state: volume)"
                                  if kept else " (no state: section)")}

    def unapplied(self) -> dict[str, dict[str, Any]]:
        """The running VMs whose pod holds less than its spec asked, as read by the last
        period (:mod:`merkat.service.applied`): state, kubelet message, ``short``
        ``{resource: (requested, applied)}``, and ``current`` (no other resize sent since)."""
        out: dict[str, dict[str, Any]] = {}
        for vm, p in self.kube.pods.items():
            short = shortfall(p.read, p.actual) if p.phase == "Running" else {}
            if short:
                out[vm] = {"state": p.state, "message": p.message, "short": short,
                           "current": p.desired == p.read}
        for vm, (want, had) in self.kube.held_short.items():  # moved under notice (notice.py)
            short = shortfall(want, had)
            if short and vm not in out:
                out[vm] = {"state": "Moving", "message": "its pod stayed on its old node, at "
                           "its old size, during its notice", "short": short, "current": False}
        return out

    @property
    def label(self) -> str:
        """The backend in a few words, for the banner and ``merkat nodes``."""
        n = sum(1 for name in self.kube.node_ids if self.kube.capacity.get(name))
        return f"kubernetes, {n} node{'s' if n != 1 else ''}"

    def node_list(self) -> list[KubeNode]:
        out = []
        for name in self.kube.node_ids:
            cap = self.kube.capacity.get(name)
            out.append(KubeNode(name, cap[0] if cap else 0.0, cap[1] if cap else 0.0,
                                schedulable=cap is not None))
        return out

    def exec_in(self, vm: str, command: str, timeout: float = 5.0) -> ExecResult:
        """``/bin/sh -c command`` in ``vm``'s pod (``pods/{name}/exec``), its stdin at
        end-of-file (:mod:`.podexec`); failures and timeouts as data."""
        return self.kube.exec(vm, ("/bin/sh", "-c", f"exec </dev/null; {command}"), timeout)

    def log_text(self, vm: str, tail_lines: int = 1000) -> tuple[str, str | None]:
        """The last ``tail_lines`` lines of ``vm``'s pod log (``GET pods/{name}/log``), and
        the error (None) — ``("", reason)`` when there is no pod or the API refused."""
        p = self.kube.pods.get(vm)
        if p is None:
            return "", f"no pod for {vm}"
        try:
            lines = self.kube._call(lambda: list(self.kube.client.log(
                p.name, namespace=p.namespace, container="vm", tail_lines=tail_lines)),
                retry=False)
        except ApiFailure as e:
            return "", e.reason
        return "".join(lines), None

    def log_path(self, vm: str, tail_lines: int = 1000) -> str | None:
        """The pod's log (its last ``tail_lines`` lines) copied to ``logs/<app>/<vm>.log``."""
        p = self.kube.pods.get(vm)
        if p is None:
            return None
        path = self.logs / p.app / f"{vm.rpartition('/')[2]}.log"
        text, error = self.log_text(vm, tail_lines)
        if error is not None:
            return str(path) if path.exists() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        return str(path)

    def adopt(self, vm: str, app: str, host: int, index: int,
              alloc: Mapping[str, float] | None = None) -> OpReport:
        """Take ``vm`` back after the server restarted (the local backend's contract; the
        module doc): its pod, found by label at start, still Running (or Pending and bound) on
        a Ready node → op ``adopt``, the same pod on its node (``node``), resized only if its
        spec differs from ``alloc``; ``alloc`` None (a suspended VM) → op ``adopt-frozen``
        when it has no pod, ``adopt`` when it has one (the caller suspends it: the pod is
        deleted); otherwise → op ``restart``: the pod deleted if any and created again on
        ``host``'s node (an error when that node is gone: the next period places the VM).
        ``index`` is the VM's index in its platform. Errors are data."""
        if vm in self._claimed:
            return OpReport.of("adopt", vm, "already known")
        launcher = self.launchers.get(app)
        if launcher is None:
            return OpReport.of("adopt", vm, f"no launcher registered for application {app!r}")
        try:
            launcher(app, vm, index)  # the manager learns the monitored VM, as at a start
        except Exception as exc:  # a bad template reaches us as data
            return OpReport.of("adopt", vm, f"cannot prepare VM: {exc}")
        self._claimed.add(vm)
        kube = self.kube
        p = kube.pods.get(vm)
        if alloc is None:  # suspended: a suspended VM holds no pod (suspend deletes it)
            if p is not None:  # left under notice by the previous server: saved, then gone
                checkpoint_all(kube, [vm])
            r = kube._remove("suspend", vm)
            return OpReport.of("adopt-frozen", vm, None if r.ok else r.reason)
        if p is not None and p.node is not None and kube.capacity.get(p.node) is not None \
                and p.phase in ("Running", "Pending"):
            error = None
            if alloc:
                want = kube._size(app, alloc, p.desired, vm)
                if want != p.desired:
                    r = kube._resize(vm, p, want)
                    error = None if r.ok else r.reason
            self._kept.add(vm)
            return OpReport.of("adopt", vm, error, node=p.node)
        if p is not None:
            r = kube._remove("restart", vm)
            if not r.ok:
                return r
        return (kube._create("restart", vm, app, host, alloc or {}, 0.0))

    def reap_orphans(self) -> list[str]:
        """Delete the pods a previous server left (found by label at start) that no stored VM
        claimed (:meth:`adopt`); their VM ids."""
        return self._delete_all(keep=self._claimed)

    def close(self) -> None:
        """Delete this server's pods (a graceful stop), then close the client."""
        for vm, h in self.kube.held.items():  # pods under notice go too
            self.kube.pods[vm] = h.pod
        self.kube.held.clear()
        self._delete_all()
        with contextlib.suppress(Exception):
            self.kube.client.close()

    def _delete_all(self, keep: set[str] | frozenset[str] = frozenset()) -> list[str]:
        from lightkube.resources.core_v1 import Pod

        gone = []
        for vm, p in list(self.kube.pods.items()):
            if vm in keep:
                continue
            try:
                self.kube._call(lambda p=p: self.kube.client.delete(  # type: ignore[misc]
                    Pod, p.name, namespace=p.namespace, grace_period=0))
            except ApiFailure as e:
                if e.code == 0:  # no answer: the next would wait as long (a graceful stop)
                    break
                if e.code != 404:
                    continue
            del self.kube.pods[vm]
            gone.append(vm)
        return gone


def from_config(config: Any) -> KubernetesLive:
    """The live service's factory (``backend.name: kubernetes``): ``config.backend``'s
    kubeconfig, context, namespace, image and instance; logs under ``data_dir/logs``. Unusable
    credentials raise :class:`~merkat.backends.kubernetes.connect.KubeConfigError` (a
    ``ValueError``); an API server that does not answer is the backend's ``warning``."""
    from merkat.backends.kubernetes.connect import connect

    b = config.backend
    kube = connect(str(b.kubeconfig) if b.kubeconfig else None,
                   namespace=None if b.namespace_per_user else b.namespace,
                   context=b.context, instance=b.instance)
    kube.checkpoint_limit_s = b.checkpoint_limit_s
    kube.resize_retry_periods = b.resize_retry_periods
    kube.notice_limit_s = b.notice_limit_s
    kube.resize_move_periods = b.resize_move_periods
    return KubernetesLive(kube, logs=Path(config.data_dir) / "logs", image=b.image)
