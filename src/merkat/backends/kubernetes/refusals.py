"""Resizes the cluster may refuse (KEP-1287, Kubernetes >= 1.33): what the backend reads of them
and the rule it follows. Pure functions on the pod as the API returns it.

- A resize is **pending** (condition ``PodResizePending``, reason ``Deferred``: fits the node
  but not now; ``Infeasible``: more than the node's allocatable) or **in progress**
  (``PodResizeInProgress``); meanwhile the container holds what the kubelet last applied
  (``status.containerStatuses[].resources``). :func:`shortfall` is what the pod's spec asks
  beyond that, per resource: the service bills the VM at the applied size
  (:mod:`merkat.service.applied`) and its controller sees the applied share.
- **Retry rule** (:data:`RETRY_PERIODS`): the kubelet retries a Deferred resize by itself when
  something on the node shrinks or leaves; a resize still Deferred after that many consecutive
  periods is sent again (one ``PATCH pods/{name}/resize`` with the whole size), which makes the
  kubelet evaluate it at once, and is reported as the operation ``resize-retry``. An Infeasible
  resize is not retried: the node cannot hold it; the market's next allocation (the node's
  allocatable is read every period) replaces it.
- **resizePolicy RestartContainer** (a template's memory with ``memory_restart``): memory
  decreases are sent, and the kubelet restarts the container to apply them; the restart
  (``restartCount`` grew: pods run with ``restartPolicy: Never``, so nothing else restarts
  them) is reported as the operation ``restart``: the process lost its memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from merkat.backends.kubernetes.objects import Size, container

RETRY_PERIODS = 3  # a resize Deferred for this many periods in a row is sent again


def restart_count(pod: Mapping[str, Any]) -> int:
    """The container's ``restartCount`` (0 when not reported)."""
    c = container(pod, "status")
    return int((c or {}).get("restartCount") or 0)


def shortfall(requested: Size | None, applied: Size | None) -> dict[str, tuple[float, float]]:
    """``{resource: (requested, applied)}`` in market units (cores, MiB) for each resource the
    kubelet has applied less of than the spec requests; ``{}`` when it holds the spec (or when
    nothing was applied yet: a pod not running is not billed less here)."""
    if requested is None or applied is None:
        return {}
    out: dict[str, tuple[float, float]] = {}
    if applied.cpu < requested.cpu:
        out["cpu"] = (requested.cpu / 1000, applied.cpu / 1000)
    if requested.memory is not None and applied.memory is not None \
            and applied.memory < requested.memory:
        out["memory"] = (requested.memory / 2**20, applied.memory / 2**20)
    return out


def retry_due(deferred_periods: int, every: int = RETRY_PERIODS) -> bool:
    """Whether a resize Deferred for ``deferred_periods`` consecutive periods is sent again
    (every ``every`` periods: the server's ``backend.resize_retry_periods``)."""
    return deferred_periods > 0 and deferred_periods % every == 0
