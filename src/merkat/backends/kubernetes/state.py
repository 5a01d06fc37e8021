"""State that survives suspension and migration (a cluster's ``state:`` section; Merkat §4.3's
checkpoint/restore plugins; docs/kubernetes.md, "State across suspension and migration").

- Each VM of a cluster with ``state:`` has a **PersistentVolumeClaim** of its own
  (``<pod>-state``, the template's ``size`` and ``storage_class``), created by merkat before the
  VM's first pod and kept while the VM exists (deleted with it when it is destroyed), mounted
  at ``path`` in the container; ``MERKAT_STATE`` holds that path.
- Before a pod is deleted for a **suspension** or a **migration**, merkat runs ``checkpoint``
  in it (``pods/exec``, ``/bin/sh -c``, at most ``timeout`` s), then deletes it with the
  template's grace period (``grace``: SIGTERM, then SIGKILL that many seconds later). A
  checkpoint that fails or times out is reported (operation ``checkpoint``, a ``vm-error``
  event) and the pod is deleted all the same: a suspended VM must free its node.
- Every pod of the VM runs ``restore`` first, as an **init container** (same image, same
  environment and mount) before its command — at the first start too, so ``restore`` must
  accept an empty volume. A restore that fails fails the pod (``Init:Error``), reported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from merkat.backends.kubernetes.objects import (
    A_VM,
    CONTAINER,
    L_INSTANCE,
    ApiFailure,
    Json,
    dns_label,
    legacy_pod_name,
    pod_labels,
    pod_name,
)

VOLUME = "merkat-state"
ENV = "MERKAT_STATE"
NOTICE_VOLUME, NOTICE_DIR, NOTICE_ENV = "merkat-notice", "/etc/merkat", "MERKAT_NOTICE"


@dataclass(frozen=True)
class StateVolume:
    """A cluster's ``state:`` as the backend uses it (sizes as Kubernetes quantities)."""

    path: str = "/merkat/state"
    size: str = "1Gi"
    storage_class: str | None = None
    checkpoint: str | None = None
    restore: str | None = None
    timeout: float = 10.0
    grace: int = 30
    notice_s: float | None = None  # s of notice before a suspension/migration (None: a period)

    @classmethod
    def of(cls, spec: Any) -> StateVolume | None:
        """From the template's ``state:`` mapping (None: no section)."""
        if not spec:
            return None
        return cls(**{k: v for k, v in dict(spec).items() if k in cls.__dataclass_fields__})


def claim_name(pod: str) -> str:
    return dns_label(f"{pod}-state")


def claim_manifest(name: str, namespace: str, labels: dict[str, str], state: StateVolume,
                   vm: str | None = None) -> Json:
    """The PersistentVolumeClaim of one VM (ReadWriteOnce: one pod at a time): its pod's
    labels, and the VM's id in the annotation ``merkat.io/vm`` (whose claim it is)."""
    spec: Json = {"accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": state.size}}}
    if state.storage_class:
        spec["storageClassName"] = state.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                         **({"annotations": {A_VM: vm}} if vm is not None else {})},
            "spec": spec}


def with_state(manifest: Json, state: StateVolume, claim: str | None = None) -> Json:
    """``manifest`` (a pod) with the VM's claim (``claim``, by default ``<pod>-state``)
    mounted at ``state.path``, ``MERKAT_STATE``, the grace period, and ``restore`` as an init
    container."""
    spec = manifest["spec"]
    claim = claim or claim_name(manifest["metadata"]["name"])
    spec["volumes"] = [{"name": VOLUME, "persistentVolumeClaim": {"claimName": claim}},
                       {"name": NOTICE_VOLUME, "downwardAPI": {"items": [{
                           "path": "annotations",
                           "fieldRef": {"fieldPath": "metadata.annotations"}}]}}]
    spec["terminationGracePeriodSeconds"] = state.grace
    mount = [{"name": VOLUME, "mountPath": state.path}]
    (c,) = [c for c in spec["containers"] if c["name"] == CONTAINER]
    env = [e for e in c.get("env") or () if e["name"] not in (ENV, NOTICE_ENV)] + [
        {"name": ENV, "value": state.path}, {"name": NOTICE_ENV, "value": NOTICE_DIR}]
    c["env"] = env
    c["volumeMounts"] = [*mount, {"name": NOTICE_VOLUME, "mountPath": NOTICE_DIR,
                                  "readOnly": True}]
    if state.restore:
        init: Json = {"name": "restore", "image": c["image"], "env": env,
                      "command": ["/bin/sh", "-c", state.restore], "volumeMounts": mount}
        if c.get("resources"):  # within the pod's size (init containers count too)
            init["resources"] = c["resources"]
        spec["initContainers"] = [init]
    return manifest


def prepare(backend: Any, namespace: str, manifest: Json, state: StateVolume,
            legacy: str | None = None, fresh: bool = False) -> tuple[Json, str]:
    """Find or create the VM's claim; return the pod mounting it and what was done that the
    operation's report should say (``""``: nothing out of the ordinary).

    The VM's claim is ``<pod>-state`` (its pod's name carries the hash of the VM's identity:
    no other VM's has that name) or, for a VM whose claim was made before names carried that
    hash, ``legacy`` (the claim's old name, ``a-b-c-1-state``; ``None``: the VM's first pod,
    which has no claim from before). Known to this server: no call. Otherwise ``legacy`` is
    read first (one ``GET``) and mounted when it is this VM's (:func:`owns`: annotation
    ``merkat.io/vm``, or labels); else ``<pod>-state`` is created (one ``POST``; 409
    AlreadyExists: the VM's own from an earlier period, checked with one ``GET``). A claim
    that is another VM's is never mounted: :class:`ApiFailure` 409.

    ``fresh``: the VM's first pod (``create``: a new VM, not a resumption, a restart or a
    migration). A claim of its name that exists is then not its own, whatever it says: it is
    the leftover of an ended VM that had the same identity (a deleted platform whose name was
    submitted again, the claim of a destroy that did not reach it). It is never mounted: when
    it is this instance's and names this VM (:func:`leftover`) it is deleted and a fresh one is
    made (when the API server still has it, terminating: :class:`ApiFailure` 409, the create
    fails this period and is made again the next); another's is left alone (409, as above).
    A claim this server made in this VM's life (known: a create that failed after it) is the
    VM's and is mounted."""
    meta = manifest["metadata"]
    vm = (meta.get("annotations") or {}).get(A_VM)
    labels = meta.get("labels") or {}
    note = ""
    name = claim_of(backend, namespace, vm)
    if name is None and legacy is not None and vm is not None:
        name = _legacy_claim(backend, namespace, vm, labels, legacy)
    if name is None:
        name = claim_name(meta["name"])
        known = backend.claims.get((namespace, name), "")
        if known and known != vm:
            raise ApiFailure(409, f"claim {namespace}/{name} is {known}'s, not {vm}'s (another "
                                  "VM's volume is never mounted)")
        body = claim_manifest(name, namespace, labels, state, vm)
        try:
            _create_claim(backend, body)
        except ApiFailure as e:  # 409: it exists (the VM's earlier pod made it, or not)
            if e.code != 409:
                raise
            found = _get(backend, namespace, name)
            if found is not None and fresh and leftover(found, vm, labels):
                note = _replace(backend, namespace, name, body, vm)
            elif found is None or not owns(found, vm, labels):
                raise ApiFailure(409, f"claim {namespace}/{name} exists and is not {vm}'s "
                                      "(another VM's volume is never mounted)") from None
        backend.claims[(namespace, name)] = vm or name
    return with_state(manifest, state, name), note


def _create_claim(backend: Any, body: Json) -> None:
    from lightkube.resources.core_v1 import PersistentVolumeClaim

    backend._call(lambda: backend.client.create(PersistentVolumeClaim.from_dict(body)),
                  retry=False)


def leftover(claim: Json, vm: str | None, labels: dict[str, str]) -> bool:
    """Whether ``claim`` (as read), met by ``vm``'s first pod, is the leftover of an ended VM
    of the same identity: it is ``vm``'s (:func:`owns`) and this server instance's (label
    ``merkat.io/instance``). Only such a claim is deleted for a new VM."""
    mine = (claim.get("metadata") or {}).get("labels") or {}
    return owns(claim, vm, labels) and mine.get(L_INSTANCE) == labels.get(L_INSTANCE)


def _replace(backend: Any, namespace: str, name: str, body: Json, vm: str | None) -> str:
    """Delete the leftover claim ``namespace/name`` of an ended VM of ``vm``'s identity and
    make ``vm``'s fresh one (``body``); what the report says. A claim still terminating (a
    real API server removes it when its finalizer has run): :class:`ApiFailure` 409."""
    from lightkube.resources.core_v1 import PersistentVolumeClaim

    left = f"claim {namespace}/{name} was left by an ended VM {vm} (a platform of that name before)"
    said = f"{left}: deleted, never mounted"
    try:
        backend._call(lambda: backend.client.delete(PersistentVolumeClaim, name,
                                                    namespace=namespace), retry=False)
    except ApiFailure as e:
        if e.code != 404:
            raise ApiFailure(e.code, f"{left}: not mounted, its deletion failed: "
                                     f"{e.reason}") from None
    try:
        _create_claim(backend, body)
    except ApiFailure as e:
        if e.code == 409:  # still there, terminating: the next period's create makes it
            raise ApiFailure(409, f"{said}; the new claim is made once it is gone (next "
                                  "period)") from None
        raise
    return f"{said}; a fresh claim made"


def claim_of(backend: Any, namespace: str, vm: str | None) -> str | None:
    """The name of ``vm``'s claim in ``namespace`` as this server knows it (None: unknown)."""
    if vm is None:
        return None
    for (ns, name), owner in backend.claims.items():
        if ns == namespace and owner == vm:
            return str(name)
    return None


def legacy_claim(vm: str, cluster: str) -> str:
    """The claim ``vm`` had before pod names carried its identity's hash (``a-b-c-1-state``)."""
    return claim_name(legacy_pod_name(vm, cluster))


def _get(backend: Any, namespace: str, name: str) -> Json | None:
    """The claim ``namespace/name`` as read (one ``GET``), None when there is none (404)."""
    from lightkube.resources.core_v1 import PersistentVolumeClaim

    try:
        found = backend._call(lambda: backend.client.get(
            PersistentVolumeClaim, name, namespace=namespace), retry=False)
    except ApiFailure as e:
        if e.code == 404:
            return None
        raise
    return found.to_dict()  # type: ignore[no-any-return]


def _legacy_claim(backend: Any, namespace: str, vm: str, labels: dict[str, str],
                  legacy: str) -> str | None:
    """``legacy`` when that claim exists and is ``vm``'s (then known to this server), else
    None. Another VM's claim of that name (the names two platforms shared) is left alone."""
    if (namespace, legacy) in backend.claims:  # known: this VM's would have been found
        return None
    found = _get(backend, namespace, legacy)
    if found is None or not owns(found, vm, labels):
        return None
    backend.claims[(namespace, legacy)] = vm
    return legacy


def owns(claim: Json, vm: str | None, labels: dict[str, str]) -> bool:
    """Whether ``claim`` (as read) is ``vm``'s: its annotation ``merkat.io/vm`` names it, or,
    on a claim made before that annotation, its labels (instance, platform, cluster, index)
    are the pod's."""
    meta = claim.get("metadata") or {}
    noted = (meta.get("annotations") or {}).get(A_VM)
    if noted is not None:
        return bool(noted == vm)
    return bool(labels) and (meta.get("labels") or {}) == labels


def checkpoint_all(backend: Any, vms: Sequence[str]) -> None:
    """Run the checkpoints of the VMs ``vms`` (suspended or moved this period) that have one,
    **concurrently** (8 at a time), each for at most its ``timeout`` and the backend's
    ``checkpoint_limit_s``: one user's slow checkpoint delays the period by that much at most,
    not by the sum of everyone's."""
    jobs = []
    for vm in vms:
        p = backend.pods.get(vm)
        st = backend._template(p.app, vm).state if p is not None else None
        if st is not None:
            jobs.append((vm, st))
    if not jobs:
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(jobs))) as pool:
        for _ in pool.map(lambda j: checkpoint(backend, j[0], j[1]), jobs):
            pass


def checkpoint(backend: Any, vm: str, state: StateVolume) -> None:
    """Run ``state.checkpoint`` in ``vm``'s pod (at most ``state.timeout`` s and the backend's
    limit); a failure is reported with the next period's operations (``checkpoint``), never
    raised."""
    from merkat.core.backend import OpReport

    if not state.checkpoint:
        return
    r = backend.exec(vm, ("/bin/sh", "-c", f"exec </dev/null; {state.checkpoint}"),
                     min(state.timeout, backend.checkpoint_limit_s))
    if not r.ok:
        backend._pending.append(OpReport("checkpoint", vm, False,
                                         f"checkpoint failed: {r.problem()}"))


def drop_vm_claim(backend: Any, vm: str, cluster: str, pod: Any, app: str) -> None:
    """Delete destroyed VM ``vm``'s claim (:func:`drop_claim`), whether it has a pod
    (``pod``, its :class:`~.objects.PodRecord`) or not: a suspended VM has none, and its
    claim left behind would be met by the next VM of its identity (a platform of the same
    name, another user's maybe), whose first create deletes it (:func:`prepare`). Without a
    pod, the claim's namespace and name are computed as its create did (the namespace is not
    created)."""
    ns = pod.namespace if pod is not None else backend._ns_name(app, vm)
    name = pod.name if pod is not None else pod_name(vm, cluster, backend.instance)
    drop_claim(backend, ns, name, vm, legacy_claim(vm, cluster),
               pod_labels(backend.instance, vm, cluster))


def drop_claim(backend: Any, namespace: str, pod: str, vm: str | None = None,
               legacy: str | None = None, labels: dict[str, str] | None = None) -> None:
    """Delete a destroyed VM's claim (its state is not needed any more): the one this server
    knows as ``vm``'s, else ``<pod>-state`` and, when it is ``vm``'s (one ``GET``;
    :func:`owns` with the pod's ``labels``), its ``legacy`` name. Errors ignored (the claim carries the instance's labels: an
    administrator finds a leftover by label)."""
    from lightkube.resources.core_v1 import PersistentVolumeClaim

    names = [n] if (n := claim_of(backend, namespace, vm)) is not None else [claim_name(pod)]
    if n is None and legacy is not None and legacy not in names and vm is not None:
        with contextlib.suppress(ApiFailure):
            found = _get(backend, namespace, legacy)
            if found is not None and owns(found, vm, labels or {}):
                names.append(legacy)
    for name in names:
        backend.claims.pop((namespace, name), None)
        with contextlib.suppress(ApiFailure):
            backend._call(lambda n=name: backend.client.delete(
                PersistentVolumeClaim, n, namespace=namespace), retry=False)
