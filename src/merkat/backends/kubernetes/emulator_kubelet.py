"""The emulator's kubelets (:class:`~merkat.backends.kubernetes.emulator.KubeEmulator` mixes this
in): pod admission and in-place resize as the kubelet of Kubernetes 1.33+ does them.

- A bound pod is admitted when its requests fit the node's allocatable next to the other pods'
  *allocated* resources, else it fails (``OutOfcpu``/``OutOfmemory``).
- A resize (the spec differs from what the container holds) is **actuated** when it fits,
  **Deferred** (condition ``PodResizePending``, reason ``Deferred``) when it would fit the node
  but not now — retried whenever something on the node shrinks or leaves, or the resize is sent
  again — and **Infeasible** (reason ``Infeasible``) beyond the node's allocatable.
- With ``resize_delay`` > 0 a resize that fits is first **in progress** (condition
  ``PodResizeInProgress``) for that many further API requests, holding the old size, then
  actuated (a real kubelet takes a moment to set the cgroups, longer when it must restart).
- A resize that changes a resource whose ``resizePolicy`` is ``RestartContainer`` restarts the
  container when it is actuated: ``restartCount`` + 1, a new ``startedAt``, ``lastState``
  terminated (reason ``Resized``... the kubelet's wording varies; the count is what matters).
"""

from __future__ import annotations

from typing import Any

from merkat.backends.kubernetes.objects import (
    CONTAINER,
    DEFERRED,
    INFEASIBLE,
    Json,
    Size,
    cpu_millis,
    desired_size,
    memory_bytes,
    resources_block,
    size_of,
)

_PENDING = ("PodResizePending", "PodResizeInProgress")


class Kubelet:
    """The kubelet half of the emulator (state lives in the emulator's fields)."""

    nodes: dict[str, Json]
    pods: dict[tuple[str, str], Json]
    _on_node: dict[str, dict[tuple[str, str], None]]
    resize_delay: int
    _in_progress: dict[tuple[str, str], int]

    def used(self, node: str) -> Size:
        """What the kubelet of ``node`` has allocated to its running pods."""
        cpu = mem = 0
        for key in self._on_node.get(node, {}):
            pod = self.pods[key]
            if pod["status"].get("phase") in ("Running", "Pending"):
                s = allocated(pod)
                if s is not None:
                    cpu += s.cpu
                    mem += s.memory or 0
        return Size(cpu, mem)

    def _admit(self, pod: Json) -> None:
        node = pod["spec"]["nodeName"]
        want = desired_size(pod) or Size(0, 0)
        if node not in self.nodes:
            pod["status"] = {"phase": "Pending", "reason": "NodeNotFound"}
            return
        free = self._free(node)
        short = ("cpu" if want.cpu > free.cpu else
                 "memory" if (want.memory or 0) > (free.memory or 0) else None)
        if short:
            pod["status"] = {"phase": "Failed", "reason": f"OutOf{short}",
                             "message": f"Pod was rejected: Node didn't have enough resource: "
                                        f"{short}"}
            return
        why = self._start(pod)
        if why is not None:
            pod["status"] = {"phase": "Failed", "reason": "InitContainerFailed", "message": why}
            return
        image = (_spec_container(pod) or {}).get("image", "")
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                         "containerStatuses": [{
                             "name": CONTAINER, "ready": True, "restartCount": 0,
                             "image": image, "imageID": "", "started": True,
                             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                             "resources": resources_block(want)}]}

    def _start(self, pod: Json) -> str | None:
        """Start the pod's init containers; None when they succeeded (the emulator runs them)."""
        return None

    def _free(self, node: str, exclude: Json | None = None) -> Size:
        alloc = self.nodes[node]["status"]["allocatable"]
        used = self.used(node)
        mine = allocated(exclude) if exclude is not None else None
        return Size(cpu_millis(alloc["cpu"]) - used.cpu + (mine.cpu if mine else 0),
                    memory_bytes(alloc["memory"]) - (used.memory or 0)
                    + ((mine.memory or 0) if mine else 0))

    def _tick_in_progress(self) -> None:
        """One API request went by: resizes in progress come closer to their actuation."""
        if not self._in_progress:
            return
        for key in list(self._in_progress):
            self._in_progress[key] -= 1
        self._kubelet(None)

    def _kubelet(self, node: str | None) -> None:
        """Actuate the pending resizes of ``node`` (all nodes: ``None``) that fit, oldest first,
        and retry the deferred ones after each actuation (as the kubelet does)."""
        while self._kubelet_pass(node):
            pass

    def _kubelet_pass(self, node: str | None) -> bool:
        actuated = False
        keys = list(self.pods) if node is None else list(self._on_node.get(node, {}))
        for key in keys:
            pod = self.pods[key]
            where = pod["spec"].get("nodeName")
            if not where or (node is not None and where != node) or where not in self.nodes:
                continue
            if pod["status"].get("phase") != "Running":
                continue
            want, have = desired_size(pod), allocated(pod)
            if want is None or want == have:
                self._in_progress.pop(key, None)
                continue
            alloc = self.nodes[where]["status"]["allocatable"]
            free = self._free(where, exclude=pod)
            conds = [c for c in pod["status"].get("conditions", []) if c["type"] not in _PENDING]
            if want.cpu > cpu_millis(alloc["cpu"]) or (want.memory or 0) > memory_bytes(
                    alloc["memory"]):
                conds.append({"type": "PodResizePending", "status": "True",
                              "reason": INFEASIBLE, "message": "Node didn't have enough "
                              f"capacity: cpu, requested: {want.cpu}, capacity: "
                              f"{cpu_millis(alloc['cpu'])}"})
            elif want.cpu > free.cpu or (want.memory or 0) > (free.memory or 0):
                conds.append({"type": "PodResizePending", "status": "True",
                              "reason": DEFERRED, "message": "Node didn't have enough resource"})
            elif self.resize_delay > 0 and self._in_progress.setdefault(
                    key, self.resize_delay) > 0:
                conds.append({"type": "PodResizeInProgress", "status": "True"})
            else:
                self._in_progress.pop(key, None)
                self._actuate(pod, want, have)
                actuated = True
            pod["status"]["conditions"] = conds
        return actuated

    def _actuate(self, pod: Json, want: Size, have: Size | None) -> None:
        status = pod["status"]["containerStatuses"][0]
        status["resources"] = resources_block(want)
        policy = {p["resourceName"]: p["restartPolicy"]
                  for p in (_spec_container(pod) or {}).get("resizePolicy") or ()}
        changed = {"cpu"} if have is None or want.cpu != have.cpu else set()
        if have is None or want.memory != have.memory:
            changed.add("memory")
        if any(policy.get(r) == "RestartContainer" for r in changed):
            started = status.get("state", {}).get("running", {}).get("startedAt", "")
            status["restartCount"] = int(status.get("restartCount") or 0) + 1
            status["lastState"] = {"terminated": {"exitCode": 0, "reason": "Completed",
                                                  "startedAt": started,
                                                  "finishedAt": "2026-01-01T00:00:01Z"}}
            status["state"] = {"running": {"startedAt": "2026-01-01T00:00:01Z"}}


def allocated(pod: Any) -> Size | None:
    """What the kubelet holds for the pod's container (``status...resources``)."""
    for c in (pod.get("status") or {}).get("containerStatuses") or ():
        return size_of(c.get("resources"))
    return None


def _spec_container(pod: Json) -> Json | None:
    cs = (pod.get("spec") or {}).get("containers") or []
    return cs[0] if cs else None
