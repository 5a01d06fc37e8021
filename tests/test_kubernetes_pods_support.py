"""Simulated applications on emulated pods: the Kubernetes backend end to end without a cluster
(a test helper, imported by test_kubernetes_scenario; holds no tests).

:class:`PodsBackend` is a :class:`~merkat.core.backend.Backend` that hands each plan to a
real :class:`~merkat.backends.kubernetes.backend.KubernetesBackend` talking (through lightkube)
to a :class:`~merkat.backends.kubernetes.emulator.KubeEmulator`, then lets a simulated backend
(:class:`~merkat.backends.sim.SimBackend` or a scenario's) progress the applications at the
allocations **the pods hold** — read back from the emulator (``spec`` and the kubelet's
``status.containerStatuses[].resources``), not from the plan. A resize the kubelet did not
actuate therefore slows the application down, as on a cluster.

Every period's pods are kept in :attr:`PodsBackend.seen` (``{vm: (spec, actuated)}`` as
market units), so tests compare them with the market's allocations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from merkat.backends.kubernetes.backend import ApplyReport, KubernetesBackend
from merkat.backends.kubernetes.emulator import KubeEmulator
from merkat.backends.kubernetes.objects import A_VM, actual_size, desired_size
from merkat.control.types import Metrics
from merkat.core.backend import Plan


@dataclass
class PodsBackend:
    """``kube`` acts on the emulated cluster ``emulator``; ``sim`` runs the applications."""

    kube: KubernetesBackend
    emulator: KubeEmulator
    sim: Any
    reports: list[ApplyReport] = field(default_factory=list)
    seen: list[dict[str, tuple[dict[str, float], dict[str, float]]]] = field(
        default_factory=list)

    def apply(self, plan: Plan) -> ApplyReport:
        report = self.kube.apply_report(plan)
        self.reports.append(report)
        pods: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
        held: dict[str, dict[str, float]] = {}
        for pod in self.emulator.pods.values():
            vm = (pod["metadata"].get("annotations") or {}).get(A_VM)
            want, have = desired_size(pod), actual_size(pod)
            if vm is None or want is None:
                continue
            pods[vm] = (want.as_market(), have.as_market() if have else {})
            if have is not None and vm in plan.allocations:
                held[vm] = {r: v for r, v in have.as_market().items()
                            if r in plan.allocations[vm]}
        self.seen.append(pods)
        # VMs whose pod is not running get nothing (a rejected pod, a node gone).
        allocations = {vm: held.get(vm, dict.fromkeys(a, 0.0))
                       for vm, a in plan.allocations.items()}
        self.sim.apply(replace(plan, allocations=allocations))
        return report

    def metrics(self, app: str) -> Metrics:
        return self.sim.metrics(app)  # type: ignore[no-any-return]

    def finished(self, app: str) -> bool:
        return bool(self.sim.finished(app))

    def idle(self, app: str) -> frozenset[str]:
        return frozenset(self.sim.idle(app))
