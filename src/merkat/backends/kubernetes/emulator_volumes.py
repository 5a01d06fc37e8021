"""The emulator's containers and volumes on this machine (:mod:`.emulator`).

An emulated container is a working directory of its own, ``<exec_dir>/<namespace>/<pod>``:
``pods/exec`` and init containers run there, in a subprocess, with the pod's environment. Its
filesystem is lost with the pod (the directory is removed when the pod is deleted), as a real
container's is. A PersistentVolumeClaim is a directory that outlives pods,
``<exec_dir>/.claims/<namespace>/<claim>``; a container that mounts it at ``mountPath`` sees it
as ``<its directory>/<mountPath>`` (a symbolic link), and an environment variable whose value is
the ``mountPath`` (``MERKAT_STATE``) is given that local path: commands that use
``$MERKAT_STATE`` run unchanged on a real cluster and here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any

import httpx2

from merkat.backends.kubernetes.emulator_status import ApiError, ok

Json = dict[str, Any]


def claim_dir(exec_dir: str, namespace: str, claim: str) -> str:
    return os.path.join(exec_dir, ".claims", namespace, claim)


def container_env(pod: Json, container: Json, cwd: str, exec_dir: str) -> dict[str, str]:
    """The environment of ``container`` of ``pod`` running in ``cwd``, its claims linked in."""
    ns = pod["metadata"].get("namespace", "default")
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in pod["spec"].get("volumes") or () if v.get("persistentVolumeClaim")}
    downward = {v["name"] for v in pod["spec"].get("volumes") or () if v.get("downwardAPI")}
    local: dict[str, str] = {}
    for m in container.get("volumeMounts") or ():
        if m["name"] in downward:  # the pod's annotations, kept current (project_annotations)
            local[m["mountPath"]] = os.path.join(cwd, m["mountPath"].strip("/"))
            project_annotations(pod, cwd)
        claim = claims.get(m["name"])
        if claim is None:
            continue
        target = claim_dir(exec_dir, ns, claim)
        os.makedirs(target, exist_ok=True)
        link = os.path.join(cwd, m["mountPath"].strip("/"))
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not os.path.islink(link):
            os.symlink(target, link)
        local[m["mountPath"]] = link
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": cwd,
           "HOSTNAME": pod["metadata"]["name"]}
    for e in container.get("env") or ():
        value = str(e.get("value", ""))
        env[e["name"]] = local.get(value, value)
    return env


def project_annotations(pod: Json, cwd: str) -> None:
    """Write the pod's downward API files (``metadata.annotations`` items: ``key="value"``
    lines, as the kubelet does) under ``cwd`` + the volume's mount path."""
    volumes = {v["name"]: v["downwardAPI"] for v in pod["spec"].get("volumes") or ()
               if v.get("downwardAPI")}
    for c in pod["spec"].get("containers") or ():
        for m in c.get("volumeMounts") or ():
            for item in (volumes.get(m["name"]) or {}).get("items") or ():
                if (item.get("fieldRef") or {}).get("fieldPath") != "metadata.annotations":
                    continue
                path = os.path.join(cwd, m["mountPath"].strip("/"), item["path"])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                notes = pod["metadata"].get("annotations") or {}
                with open(path, "w") as f:
                    f.writelines(f"{k}={json.dumps(v)}\n" for k, v in sorted(notes.items()))


def run_init(pod: Json, exec_dir: str, limit_s: float) -> str | None:
    """Run ``pod``'s init containers in order, for real; None when all exited 0, else why."""
    cwd = pod_dir(exec_dir, pod)
    for c in pod["spec"].get("initContainers") or ():
        env = container_env(pod, c, cwd, exec_dir)
        try:
            r = subprocess.run(list(c.get("command") or ()) + list(c.get("args") or ()),
                               cwd=cwd, env=env, capture_output=True, timeout=limit_s,
                               check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"init container {c['name']}: {e}"
        if r.returncode != 0:
            return f"init container {c['name']} exited {r.returncode}"
    return None


def pod_dir(exec_dir: str, pod: Json) -> str:
    path = os.path.join(exec_dir, pod["metadata"].get("namespace", "default"),
                        pod["metadata"]["name"])
    os.makedirs(path, exist_ok=True)
    return path


def wipe(exec_dir: str | None, namespace: str, name: str) -> None:
    """The container's filesystem goes with its pod (claims stay)."""
    if exec_dir:
        shutil.rmtree(os.path.join(exec_dir, namespace, name), ignore_errors=True)


class Volumes:
    """The emulator's claims and its containers' start (mixed into the emulator)."""

    exec_dir: str | None
    exec_limit_s: float
    namespaces: set[str]
    claims: dict[tuple[str, str], Json]

    def _next_rv(self) -> str:
        raise NotImplementedError

    def _dir(self) -> str:
        if self.exec_dir is None:
            self.exec_dir = tempfile.mkdtemp(prefix="merkat-emulator-")
        return self.exec_dir

    def _start(self, pod: Json) -> str | None:
        """The kubelet starts the pod: its claims must exist (else it stays Pending, as the
        scheduler would keep it), then its init containers run here, for real."""
        ns = pod["metadata"].get("namespace", "default")
        for v in pod["spec"].get("volumes") or ():
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is not None and (ns, claim) not in self.claims:
                return f'persistentvolumeclaim "{claim}" not found'
        return run_init(pod, self._dir(), self.exec_limit_s)

    def _claims(self, verb: str, ns: str, name: str | None, body: Any) -> httpx2.Response:
        """``persistentvolumeclaims``: create (bound at once), get, delete (its data too)."""
        if verb == "POST" and name is None:
            if ns not in self.namespaces:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')
            claim = body["metadata"]["name"]
            if (ns, claim) in self.claims:
                raise ApiError(409, "AlreadyExists",
                                f'persistentvolumeclaims "{claim}" already exists')
            obj: Json = json.loads(json.dumps(body))
            obj["metadata"].update(namespace=ns, uid=f"uid-{self._next_rv()}")
            obj["status"] = {"phase": "Bound"}
            self.claims[(ns, claim)] = obj
            return ok(obj, 201)
        if name is None or (ns, name) not in self.claims:
            raise ApiError(404, "NotFound", f'persistentvolumeclaims "{name}" not found')
        if verb == "GET":
            return ok(self.claims[(ns, name)])
        if verb == "DELETE":
            shutil.rmtree(claim_dir(self._dir(), ns, name), ignore_errors=True)
            return ok(self.claims.pop((ns, name)))
        raise ApiError(405, "MethodNotAllowed", f"{verb} is not allowed")

    def _annotate(self, pod: Json, body: Json) -> Json:
        if set(body) - {"metadata"} or set(body.get("metadata") or {}) - {"annotations"}:
            raise ApiError(422, "Invalid", "the emulator patches metadata.annotations only")
        notes = pod["metadata"].setdefault("annotations", {})
        for k, v in (body["metadata"].get("annotations") or {}).items():
            if v is None:
                notes.pop(k, None)
            else:
                notes[k] = v
        if self.exec_dir is not None and pod["spec"].get("nodeName"):
            project_annotations(pod, pod_dir(self.exec_dir, pod))
        return pod
