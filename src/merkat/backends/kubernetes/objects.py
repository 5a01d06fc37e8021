"""Kubernetes objects as merkat writes and reads them: names, labels, quantities, pod manifests,
resize patches and the resize state of a pod. Pure functions on plain JSON dicts (no I/O), shared
by the backend (:mod:`.backend`) and the API emulator (:mod:`.emulator`).

A merkat VM ``"<platform>/vm<n>"`` is one pod with one container named ``vm``:

- named ``<platform>-<cluster>-<n>-<hash>`` (:func:`pod_name`: the readable part cut to fit,
  the hash of the VM's identity, so that no two VMs' names meet whatever their platforms are
  called);

- labels ``merkat.io/instance`` (which merkat server owns it), ``merkat.io/platform`` (the
  application), ``merkat.io/cluster`` (its virtual cluster) and ``merkat.io/index`` (``n``);
  the annotation ``merkat.io/vm`` holds the VM id verbatim, so a restarted server re-adopts its
  pods by label and knows which VM each one is;
- ``schedulerName: merkat`` (no scheduler of that name runs, so the default scheduler leaves the
  pod alone) and then a Binding to the node the market chose (or ``nodeName`` directly);
- CPU as request = limit (the node's accounting matches the market), memory as request = limit
  (traded: the allocation; not traded: the template's size); both ``resizePolicy`` entries are
  ``NotRequired`` by default (resized without a restart).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

Json = dict[str, Any]


class ApiFailure(Exception):
    """An API call that failed for good (after the backend's retries): ``code`` the HTTP status
    (0: the server was not reached), ``reason`` the API server's message. Raised by the
    backend's calls, caught by whatever made the call (the backend, the state volumes, the
    CLI)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason

GROUP = "merkat.io"
L_INSTANCE, L_PLATFORM = f"{GROUP}/instance", f"{GROUP}/platform"
L_CLUSTER, L_INDEX = f"{GROUP}/cluster", f"{GROUP}/index"
A_VM = f"{GROUP}/vm"
CONTAINER = "vm"
SCHEDULER = "merkat"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

# Resize states (KEP-1287). ``Proposed``/``InProgress``/``Deferred``/``Infeasible`` are the
# values of the legacy ``status.resize`` field (≤ 1.32); 1.33+ reports the same through the
# ``PodResizePending`` (reason Deferred or Infeasible) and ``PodResizeInProgress`` conditions.
# ``Done``: what the kubelet allocated equals the spec.
PROPOSED, IN_PROGRESS, DEFERRED, INFEASIBLE, DONE = (
    "Proposed", "InProgress", "Deferred", "Infeasible", "Done")

_SUFFIX: dict[str, int | Decimal] = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "m": Decimal("0.001")}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


class QuantityError(ValueError):
    """A Kubernetes quantity merkat cannot read (``"12x"``)."""


def parse_quantity(q: str | int | float) -> Decimal:
    """A Kubernetes quantity (``"1500m"``, ``"2"``, ``"512Mi"``, ``"1e3"``) as a number."""
    if isinstance(q, int | float):
        return Decimal(str(q))
    m = _QUANTITY.match(q.strip())
    if not m:
        raise QuantityError(f"not a Kubernetes quantity: {q!r}")
    try:
        return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2) or ""])
    except InvalidOperation:
        raise QuantityError(f"not a Kubernetes quantity: {q!r}") from None


@functools.lru_cache(maxsize=8192)  # a cluster's pods repeat a few quantities
def cpu_millis(q: str | int | float) -> int:
    """CPU quantity → millicores (rounded up, as the API server does)."""
    return int((parse_quantity(q) * 1000).to_integral_value(rounding="ROUND_CEILING"))


@functools.lru_cache(maxsize=8192)
def memory_bytes(q: str | int | float) -> int:
    return int(parse_quantity(q).to_integral_value(rounding="ROUND_CEILING"))


def fmt_cpu(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def fmt_memory(nbytes: int) -> str:
    for suffix, unit in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def cores_to_millis(cores: float) -> int:
    """A market allocation in cores → millicores, rounded down (so the allocations of a node,
    which the market keeps within its capacity, still fit once rounded: rounding to the nearest
    made 1.8885 + 2.1115 cores 4001m on a 4-core node, and the grow Deferred), at least 1m (a
    zero CPU limit would mean "no limit")."""
    return max(1, math.floor(cores * 1000 + 1e-6))


def mib_to_bytes(mib: float) -> int:
    """A market allocation in MiB → bytes, rounded down to whole KiB, at least 1 MiB."""
    return max(2**20, int(mib * 1024) * 1024)


@dataclass(frozen=True)
class Size:
    """What one container holds: CPU in millicores, memory in bytes (``None``: unset)."""

    cpu: int
    memory: int | None = None

    def as_market(self) -> dict[str, float]:
        out = {"cpu": self.cpu / 1000}
        if self.memory is not None:
            out["memory"] = self.memory / 2**20
        return out


def size_of(resources: Mapping[str, Any] | None) -> Size | None:
    """The (limit, else request) CPU and memory of a container's ``resources`` block."""
    if not resources:
        return None
    lim, req = resources.get("limits") or {}, resources.get("requests") or {}
    cpu = lim.get("cpu", req.get("cpu"))
    if cpu is None:
        return None
    mem = lim.get("memory", req.get("memory"))
    return Size(cpu_millis(cpu), None if mem is None else memory_bytes(mem))


def resources_block(size: Size) -> Json:
    res = {"cpu": fmt_cpu(size.cpu)}
    if size.memory is not None:
        res["memory"] = fmt_memory(size.memory)
    return {"requests": dict(res), "limits": dict(res)}


# --- names ----------------------------------------------------------------------------

_DNS = re.compile(r"[^a-z0-9-]+")


def dns_label(text: str, limit: int = 63) -> str:
    """``text`` as a DNS-1123 label (lower case, ``[a-z0-9-]``, ≤ ``limit`` characters); a short
    hash of the original is appended whenever characters had to change, so that two different
    names never map to the same label."""
    low = _DNS.sub("-", text.lower()).strip("-") or "x"
    if low == text and len(low) <= limit:
        return low
    digest = hashlib.sha1(text.encode()).hexdigest()[:6]
    return f"{low[: limit - 7].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    """``text`` as a label value (≤ 63 chars of ``[A-Za-z0-9._-]``, alphanumeric at both ends)."""
    v = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    if v == text and len(v) <= 63:
        return v
    digest = hashlib.sha1(text.encode()).hexdigest()[:6]
    return f"{v[:56].strip('-._')}-{digest}".strip("-")


def split_vm_id(vm: str) -> tuple[str, int]:
    """``"app/vm3"`` → ``("app", 3)``; any other id → ``(id, 0)``."""
    app, _, tail = vm.rpartition("/")
    if app and tail.startswith("vm") and tail[2:].isdigit():
        return app, int(tail[2:])
    return vm, 0


# A pod's name is at most 57 characters, so that its claim's, ``<pod>-state``, is a DNS label
# (63) too; the last 14 are ``-`` and the identity's hash.
NAME_LIMIT, HASH_CHARS = 57, 13


def identity_hash(instance: str, vm: str) -> str:
    """A short, stable hash of a VM's exact identity: the merkat server (``instance``) and the
    VM id (``"<platform>/vm<n>"``, its platform's name verbatim): 13 characters of base32
    (``[a-z2-7]``, 65 bits of SHA-256). The same identity gives the same hash in every process,
    so a restarted server computes the names it gave."""
    digest = hashlib.sha256(json.dumps([instance, vm]).encode()).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:HASH_CHARS]


def pod_name(vm: str, cluster: str = "vms", instance: str = "merkat") -> str:
    """The pod of ``vm`` (of virtual ``cluster``, on the merkat server ``instance``): a readable
    prefix ``<platform>-<cluster>-<index>`` (lower case, ``[a-z0-9-]``, cut to fit) and the
    hash of the VM's identity (:func:`identity_hash`), ≤ :data:`NAME_LIMIT` characters. Two
    VMs never share a pod name, whatever their names: platform ``a-b`` with cluster ``c`` and
    platform ``a`` with cluster ``b-c`` both read ``a-b-c-1`` but hash apart
    (docs/kubernetes.md, "Pod names")."""
    app, index = split_vm_id(vm)
    readable = _DNS.sub("-", f"{app}-{cluster}-{index}".lower()).strip("-")
    readable = readable[: NAME_LIMIT - HASH_CHARS - 1].rstrip("-") or "vm"
    return f"{readable}-{identity_hash(instance, vm)}"


def legacy_pod_name(vm: str, cluster: str = "vms") -> str:
    """The name a VM's pod had before names carried the identity's hash (``a-b-c-1``): two
    platforms could share it. Only read, to find a VM's claim made under it (state.py)."""
    app, index = split_vm_id(vm)
    return dns_label(f"{app}-{cluster}-{index}")


# --- templates and manifests ----------------------------------------------------------


@dataclass
class PodRecord:
    """A merkat pod as the backend last read and changed it (one per VM)."""

    namespace: str
    name: str
    app: str
    node: str | None
    desired: Size | None
    phase: str = "Pending"
    state: str = DONE
    message: str = ""
    actual: Size | None = None  # what the kubelet applied (status), as last read
    read: Size | None = None  # the spec as last read (``desired`` moves with this period's patches)
    deferred: int = 0  # consecutive periods its resize was read Deferred (refusals.py)
    restarts: int = 0  # the container's restartCount as last read
    restarted: bool = False  # it grew at the last read (a RestartContainer resize)


@dataclass(frozen=True)
class PodTemplate:
    """How the VMs of one application run: the container ``image`` and ``command`` (the
    virtual cluster's command; empty: the image's own), ``env``, ``memory_mib`` the memory the
    VM holds when memory is not traded and its floor when it is (MiB; 0: no memory
    request/limit when not traded), the merkat ``owner`` (the namespace in per-user mode) and
    the virtual ``cluster`` name (a label)."""

    image: str = PAUSE_IMAGE
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    memory_mib: float = 0.0
    owner: str = "users"
    cluster: str = "vms"
    memory_restart: bool = False  # memory resizePolicy RestartContainer (allows decreases)
    state: Any = None  # a state.StateVolume: a claim per VM, checkpoint/restore (state.py)


def pod_labels(instance: str, vm: str, cluster: str) -> dict[str, str]:
    app, index = split_vm_id(vm)
    return {L_INSTANCE: label_value(instance), L_PLATFORM: label_value(app),
            L_CLUSTER: label_value(cluster), L_INDEX: str(index)}


def pod_manifest(*, instance: str, vm: str, namespace: str, template: PodTemplate, size: Size,
                 node: str | None = None) -> Json:
    """The Pod merkat creates for ``vm``: unscheduled (bound afterwards) unless ``node``."""
    container: Json = {
        "name": CONTAINER,
        "image": template.image,
        "resources": resources_block(size),
        "resizePolicy": [
            {"resourceName": "cpu", "restartPolicy": "NotRequired"},
            {"resourceName": "memory",
             "restartPolicy": "RestartContainer" if template.memory_restart else "NotRequired"},
        ],
    }
    if template.command:
        container["command"] = list(template.command)
    if template.env:
        container["env"] = [{"name": k, "value": v} for k, v in sorted(template.env.items())]
    spec: Json = {"containers": [container], "restartPolicy": "Never",
                  "schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 0}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(vm, template.cluster, instance),
            "namespace": namespace,
            "labels": pod_labels(instance, vm, template.cluster),
            "annotations": {A_VM: vm},
        },
        "spec": spec,
    }


def binding(name: str, node: str) -> Json:
    """The body of ``POST .../pods/{name}/binding``."""
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def resize_patch(size: Size, current: Size | None = None) -> Json:
    """The strategic-merge body of ``PATCH .../pods/{name}/resize`` (containers merge by name;
    requests and limits merge by resource): the resources that differ from ``current``."""
    res: dict[str, str] = {}
    if current is None or size.cpu != current.cpu:
        res["cpu"] = fmt_cpu(size.cpu)
    if size.memory is not None and (current is None or size.memory != current.memory):
        res["memory"] = fmt_memory(size.memory)
    block = {"requests": dict(res), "limits": dict(res)}
    return {"spec": {"containers": [{"name": CONTAINER, "resources": block}]}}


# --- reading pods and nodes -------------------------------------------------------------


def container(pod: Mapping[str, Any], path: str = "spec") -> Mapping[str, Any] | None:
    key = "containers" if path == "spec" else "containerStatuses"
    for c in (pod.get(path) or {}).get(key) or ():
        if c.get("name") == CONTAINER:
            return c  # type: ignore[no-any-return]
    return None


def desired_size(pod: Mapping[str, Any]) -> Size | None:
    """The size in the pod's spec (what merkat asked for)."""
    c = container(pod)
    return size_of(c.get("resources")) if c else None


def actual_size(pod: Mapping[str, Any]) -> Size | None:
    """What the kubelet has actuated (``status.containerStatuses[].resources``); ``None`` when
    not reported (a pod not yet running, or a cluster without in-place resize)."""
    c = container(pod, "status")
    return size_of(c.get("resources")) if c else None


def resize_state(pod: Mapping[str, Any]) -> tuple[str, str]:
    """``(state, message)`` of the pod's last resize: Infeasible/Deferred (``PodResizePending``
    condition or legacy ``status.resize``), InProgress, Proposed (spec ahead of the allocation,
    the kubelet has not acted yet) or Done."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or ():
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "PodResizePending":
            return str(cond.get("reason") or DEFERRED), str(cond.get("message") or "")
        if cond.get("type") == "PodResizeInProgress":
            return IN_PROGRESS, str(cond.get("message") or "")
    legacy = status.get("resize")
    if legacy in (PROPOSED, IN_PROGRESS, DEFERRED, INFEASIBLE):
        return str(legacy), ""
    want, have = desired_size(pod), actual_size(pod)
    if have is not None and want is not None and want != have:
        return PROPOSED, ""
    return DONE, ""


def node_capacity(node: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(cores, MiB)`` a node offers to merkat (``status.allocatable``), or ``None`` when the
    node takes no new pods (cordoned, NotReady, or tainted NoSchedule/NoExecute)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable"):
        return None
    if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or ()):
        return None
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            return None
    alloc = status.get("allocatable") or {}
    try:
        return cpu_millis(alloc.get("cpu", 0)) / 1000, memory_bytes(alloc.get("memory", 0)) / 2**20
    except QuantityError:
        return None
