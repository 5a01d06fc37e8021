"""The Kubernetes backend: merkat VMs as pods, placed by the market, resized in place
(docs/kubernetes.md). :mod:`.objects` holds the manifests and quantities (pure),
:mod:`.backend` the backend, :mod:`.emulator` an HTTP-level emulator of the API for tests and
benchmarks, :mod:`.bench` the benchmark. lightkube is imported only when a backend is built.
"""

from merkat.backends.kubernetes.backend import ApplyReport, KubernetesBackend, OpReport
from merkat.backends.kubernetes.objects import PodTemplate

__all__ = ["ApplyReport", "KubernetesBackend", "OpReport", "PodTemplate"]
