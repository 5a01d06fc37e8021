"""Against a real cluster (Kubernetes >= 1.33, in-place resize): runs only when ``KUBECONFIG``
names a cluster that answers; ``MERKAT_K8S_NAMESPACE`` (default ``default``) must allow the
Role in deploy/kubernetes/rbac.yaml. Creates one pause pod, resizes it, deletes it."""

from __future__ import annotations

import os
import time

import pytest

from merkat.backends.kubernetes import PodTemplate
from merkat.backends.kubernetes.connect import KubeConfigError, connect
from merkat.backends.kubernetes.objects import actual_size, desired_size, pod_name
from merkat.core.backend import Plan, VMPlacement

pytestmark = pytest.mark.kubernetes_live


@pytest.fixture
def live():  # type: ignore[no-untyped-def]
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("KUBECONFIG is not set: no real cluster")
    ns = os.environ.get("MERKAT_K8S_NAMESPACE", "default")
    try:
        b = connect(os.environ["KUBECONFIG"], namespace=ns,
                    instance=f"merkat-live-{os.getpid()}")
    except KubeConfigError as e:
        pytest.skip(str(e))
    try:
        b.refresh()
    except Exception as e:  # unreachable: not this test's subject
        pytest.skip(f"the cluster of KUBECONFIG does not answer: {e}")
    if not any(c for c in b.capacity.values()):
        pytest.skip("no schedulable node")
    yield b
    from lightkube.resources.core_v1 import Pod

    for p in list(b.pods.values()):
        b.client.delete(Pod, p.name, namespace=p.namespace, grace_period=0)


def test_a_pod_is_created_bound_resized_in_place_and_deleted(live) -> None:  # type: ignore[no-untyped-def]
    from lightkube.resources.core_v1 import Pod

    b = live
    host = next(k for k, n in enumerate(b.node_ids) if b.capacity[n])
    b.add_app("live", PodTemplate(memory_mib=64))
    r = b.apply_report(Plan(0, 10, create=(VMPlacement("live/vm1", "live", host),),
                            allocations={"live/vm1": {"cpu": 0.1}}))
    assert r.failed == (), r.failed

    def pod() -> dict:  # type: ignore[type-arg]
        return b.client.get(Pod, pod_name("live/vm1"), namespace=b.namespace).to_dict()

    deadline = time.monotonic() + 120
    while pod().get("status", {}).get("phase") != "Running":
        assert time.monotonic() < deadline, "the pod did not start in 2 minutes"
        time.sleep(1)
    assert pod()["spec"]["nodeName"] == b.node_ids[host]
    r = b.apply_report(Plan(10, 10, allocations={"live/vm1": {"cpu": 0.2}}))
    assert r.failed == () and r.counts() == {"resize": 1}
    assert desired_size(pod()).cpu == 200  # type: ignore[union-attr]
    while (actual_size(pod()) or desired_size(pod())).cpu != 200:  # type: ignore[union-attr]
        assert time.monotonic() < deadline + 60, "the kubelet did not actuate the resize"
        time.sleep(1)
    r = b.apply_report(Plan(20, 10, destroy=("live/vm1",)))
    assert r.failed == () and r.counts() == {"destroy": 1}
