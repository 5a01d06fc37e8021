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

from merkat.backends.kubernetes.objects import A_VM, CONTAINER, ApiFailure, Json, dns_label

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


def with_state(manifest: Json, state: StateVolume) -> Json:
    """``manifest`` (a pod) with the VM's claim mounted at ``state.path``, ``MERKAT_STATE``,
    the grace period, and ``restore`` as an init container."""
    spec = manifest["spec"]
    claim = claim_name(manifest["metadata"]["name"])
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


def prepare(backend: Any, namespace: str, manifest: Json, state: StateVolume) -> Json:
    """Create the VM's claim unless it exists (one ``POST persistentvolumeclaims`` the first
    time; 409 AlreadyExists: a resumed or migrated VM's, checked to be this VM's with one ``GET``)
    and return the pod mounting it. A claim of the same name that is another VM's (two
    platforms' names can map to one pod name: ``a-b``'s cluster ``c`` and ``a``'s cluster
    ``b-c`` are both ``a-b-c-1``) is refused, :class:`ApiFailure` 409: never mounted."""
    from lightkube.resources.core_v1 import PersistentVolumeClaim

    name = claim_name(manifest["metadata"]["name"])
    meta = manifest["metadata"]
    vm = (meta.get("annotations") or {}).get(A_VM)
    known = backend.claims.get((namespace, name), "")
    if known and known != vm:
        raise ApiFailure(409, f"claim {namespace}/{name} is {known}'s, not {vm}'s (another "
                              "VM's volume is never mounted)")
    if not known:
        body = claim_manifest(name, namespace, meta.get("labels") or {}, state, vm)
        try:
            backend._call(lambda: backend.client.create(PersistentVolumeClaim.from_dict(body)),
                          retry=False)
        except ApiFailure as e:  # 409: it exists (the VM's earlier pod made it, or not)
            if e.code != 409:
                raise
            found = backend._call(lambda: backend.client.get(
                PersistentVolumeClaim, name, namespace=namespace), retry=False).to_dict()
            if not owns(found, vm, meta.get("labels") or {}):
                raise ApiFailure(409, f"claim {namespace}/{name} exists and is not {vm}'s "
                                      "(another VM's volume is never mounted)") from None
        backend.claims[(namespace, name)] = vm or name
    return with_state(manifest, state)


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


def drop_claim(backend: Any, namespace: str, pod: str) -> None:
    """Delete a destroyed VM's claim (its state is not needed any more); errors ignored (the
    claim carries the instance's labels: an administrator finds a leftover by label)."""
    from lightkube.resources.core_v1 import PersistentVolumeClaim


    name = claim_name(pod)
    backend.claims.pop((namespace, name), None)
    with contextlib.suppress(ApiFailure):
        backend._call(lambda: backend.client.delete(PersistentVolumeClaim, name,
                                                    namespace=namespace), retry=False)
