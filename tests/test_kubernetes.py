"""The Kubernetes backend's contract against the HTTP-level API emulator: the exact paths, verbs
and bodies lightkube sends for create, bind, resize and delete; retries on 409; 422 and
Infeasible resizes reported; a node that disappears; pods re-adopted after a restart; calls per
period that grow with the changes, not with the cluster."""

from __future__ import annotations

import httpx2
import pytest

from merkat.backends.kubernetes import KubernetesBackend, PodTemplate
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.objects import (
    Size,
    pod_name,
)
from merkat.core.backend import Plan, VMPlacement

A1_POD = pod_name("a/vm1", "vms")
A2_POD = pod_name("a/vm2", "vms")
APP2_POD = pod_name("app/vm2", "vms")
B1_POD = pod_name("b/vm1", "vms")
KEEP1_POD = pod_name("keep/vm1", "vms")
SOLVER1_POD = pod_name("solver/vm1", "workers")

pytestmark = pytest.mark.kubernetes

NS = "merkat"


def cluster(nodes: int = 2, cpu: str = "4", memory: str = "8Gi", **kw: object) -> KubeEmulator:
    emu = KubeEmulator(**kw)  # type: ignore[arg-type]
    emu.namespaces.add(NS)
    for k in range(nodes):
        emu.add_node(f"node-{k}", cpu, memory)
    return emu


def backend(emu: KubeEmulator, **kw: object) -> KubernetesBackend:
    b = KubernetesBackend(emulated_client(emu, NS), namespace=NS, sleep=lambda s: None,
                          **kw)  # type: ignore[arg-type]
    b.refresh()
    return b


def plan(t: float = 0.0, **kw: object) -> Plan:
    return Plan(time=t, period=60.0, **kw)  # type: ignore[arg-type]


def calls(emu: KubeEmulator, start: int = 0) -> list[tuple[str, str]]:
    return [(c.verb, c.path) for c in emu.calls[start:]]


LIST = [("GET", "/api/v1/nodes"), ("GET", f"/api/v1/namespaces/{NS}/pods")]
POD = f"/api/v1/namespaces/{NS}/pods"


def test_create_posts_the_pod_then_binds_it_to_the_markets_node() -> None:
    emu = cluster()
    b = backend(emu)
    b.add_app("solver", PodTemplate(image="python:3.12", command=("python", "-m", "solver"),
                                    memory_mib=512, cluster="workers"))
    n0 = len(emu.calls)
    report = b.apply_report(plan(create=(VMPlacement("solver/vm1", "solver", 1),),
                                 allocations={"solver/vm1": {"cpu": 1.5}}))
    assert report.failed == () and report.counts() == {"create": 1}
    assert report.api_calls == 4
    assert calls(emu, n0) == [*LIST, ("POST", POD), ("POST", f"{POD}/{SOLVER1_POD}/binding")]
    create, bind = emu.calls[n0 + 2], emu.calls[n0 + 3]
    assert emu.calls[n0 + 1].query == {"labelSelector": "merkat.io/instance=merkat"}
    assert create.body["metadata"] == {
        "name": SOLVER1_POD, "namespace": NS,
        "labels": {"merkat.io/instance": "merkat", "merkat.io/platform": "solver",
                   "merkat.io/cluster": "workers", "merkat.io/index": "1"},
        "annotations": {"merkat.io/vm": "solver/vm1"},
    }
    spec = create.body["spec"]
    assert spec["schedulerName"] == "merkat" and "nodeName" not in spec
    assert spec["restartPolicy"] == "Never"
    (c,) = spec["containers"]
    assert c["name"] == "vm" and c["image"] == "python:3.12"
    assert c["command"] == ["python", "-m", "solver"]
    assert c["resources"] == {"requests": {"cpu": "1500m", "memory": "512Mi"},
                              "limits": {"cpu": "1500m", "memory": "512Mi"}}
    assert c["resizePolicy"] == [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                 {"resourceName": "memory", "restartPolicy": "NotRequired"}]
    assert bind.body == {"apiVersion": "v1", "kind": "Binding",
                         "metadata": {"name": SOLVER1_POD},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}
    pod = emu.pod(NS, SOLVER1_POD)
    assert pod["spec"]["nodeName"] == "node-1" and pod["status"]["phase"] == "Running"


def test_node_name_mode_creates_bound_pods_in_one_call() -> None:
    emu = cluster()
    b = backend(emu, bind="node-name")
    n0 = len(emu.calls)
    b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),), allocations={"a/vm1": {"cpu": 1}}))
    assert calls(emu, n0) == [*LIST, ("POST", POD)]
    assert emu.calls[-1].body["spec"]["nodeName"] == "node-0"


def test_resize_patches_the_resize_subresource_with_cpu_as_request_and_limit() -> None:
    emu = cluster()
    b = backend(emu)
    b.add_app("a", PodTemplate(memory_mib=256))
    b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),), allocations={"a/vm1": {"cpu": 1}}))
    n0 = len(emu.calls)
    report = b.apply_report(plan(60, allocations={"a/vm1": {"cpu": 2.25}}))
    assert calls(emu, n0) == [*LIST, ("PATCH", f"{POD}/{A1_POD}/resize")]
    patch = emu.calls[-1]
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert patch.body == {"spec": {"containers": [{"name": "vm", "resources": {
        "requests": {"cpu": "2250m"}, "limits": {"cpu": "2250m"}}}]}}
    (op,) = report.ops
    assert (op.op, op.ok, op.state) == ("resize", True, "Proposed")
    pod = emu.pod(NS, A1_POD)
    want = {"requests": {"cpu": "2250m", "memory": "256Mi"},
            "limits": {"cpu": "2250m", "memory": "256Mi"}}
    assert pod["spec"]["containers"][0]["resources"] == want
    assert pod["status"]["containerStatuses"][0]["resources"] == want  # actuated by the kubelet
    # The same allocation next period (to the millicore) costs no call beyond the two lists.
    n1 = len(emu.calls)
    report = b.apply_report(plan(120, allocations={"a/vm1": {"cpu": 2.2501}}))
    assert calls(emu, n1) == LIST and report.ops == ()


def test_memory_limit_follows_the_market_where_the_resize_policy_allows() -> None:
    emu = cluster()
    b = backend(emu)
    b.add_app("keep", PodTemplate())
    b.add_app("restart", PodTemplate(memory_restart=True))
    alloc = {"cpu": 1.0, "memory": 1024.0}
    b.apply_report(plan(create=(VMPlacement("keep/vm1", "keep", 0),
                                VMPlacement("restart/vm1", "restart", 0)),
                        allocations={"keep/vm1": alloc, "restart/vm1": alloc}))
    n0 = len(emu.calls)
    grow = {"cpu": 1.0, "memory": 1536.0}
    b.apply_report(plan(60, allocations={"keep/vm1": grow, "restart/vm1": grow}))
    bodies = [c.body["spec"]["containers"][0]["resources"]["limits"] for c in emu.calls[n0 + 2:]]
    assert bodies == [{"memory": "1536Mi"}, {"memory": "1536Mi"}]
    # A decrease: NotRequired memory cannot shrink in place (the API server refuses it), so the
    # limit stays; RestartContainer memory shrinks.
    n1 = len(emu.calls)
    shrink = {"cpu": 0.5, "memory": 512.0}
    report = b.apply_report(plan(120, allocations={"keep/vm1": shrink, "restart/vm1": shrink}))
    assert report.failed == ()
    bodies = [c.body["spec"]["containers"][0]["resources"]["limits"] for c in emu.calls[n1 + 2:]]
    assert bodies == [{"cpu": "500m"}, {"cpu": "500m", "memory": "512Mi"}]
    assert emu.pod(NS, KEEP1_POD)["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "500m", "memory": "1536Mi"}


def test_the_emulator_refuses_a_memory_decrease_under_notrequired_with_422() -> None:
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Pod
    from lightkube.types import PatchType

    emu = cluster()
    b = backend(emu)
    b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),),
                        allocations={"a/vm1": {"cpu": 1.0, "memory": 1024.0}}))
    body = {"spec": {"containers": [{"name": "vm", "resources": {
        "requests": {"memory": "512Mi"}, "limits": {"memory": "512Mi"}}}]}}
    with pytest.raises(ApiError) as e:
        b.client.patch(Pod.Resize, A1_POD, body, namespace=NS,
                       patch_type=PatchType.STRATEGIC)
    assert e.value.status.code == 422 and "RestartContainer" in e.value.status.message


def test_delete_on_destroy_and_suspend_and_resume_recreates() -> None:
    emu = cluster()
    b = backend(emu)
    create = tuple(VMPlacement(f"a/vm{k}", "a", 0) for k in (1, 2))
    b.apply_report(plan(create=create, allocations={p.vm: {"cpu": 1} for p in create}))
    n0 = len(emu.calls)
    report = b.apply_report(plan(60, destroy=("a/vm1",), suspend=("a/vm2",)))
    assert calls(emu, n0) == [*LIST, ("DELETE", f"{POD}/{A1_POD}"), ("DELETE", f"{POD}/{A2_POD}")]
    assert emu.calls[-1].query == {"gracePeriodSeconds": "0"}
    assert report.counts() == {"destroy": 1, "suspend": 1} and not emu.pods
    report = b.apply_report(plan(120, resume=(VMPlacement("a/vm2", "a", 1),),
                                 allocations={"a/vm2": {"cpu": 0.5}}))
    assert report.counts() == {"resume": 1}
    pod = emu.pod(NS, A2_POD)
    assert pod["spec"]["nodeName"] == "node-1"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "500m"}


def test_migration_deletes_and_recreates_retrying_409_while_the_old_pod_terminates() -> None:
    emu = cluster(linger=2)  # the deleted pod stays "terminating" for two more requests
    clock = iter(range(100))
    b = backend(emu, clock=lambda: float(next(clock)))
    b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),), allocations={"a/vm1": {"cpu": 2}}))
    n0 = len(emu.calls)
    report = b.apply_report(plan(60, migrate=(("a/vm1", 0, 1),),
                                 allocations={"a/vm1": {"cpu": 3}}))
    assert calls(emu, n0) == [*LIST, ("DELETE", f"{POD}/{A1_POD}"), ("POST", POD),
                              ("POST", POD), ("POST", POD), ("POST", f"{POD}/{A1_POD}/binding")]
    (op,) = report.ops
    assert (op.op, op.ok, op.node) == ("migrate", True, "node-1")
    assert op.seconds == 2.0  # delete (1 tick) + create and bind (1 tick) on the fake clock
    pod = emu.pod(NS, A1_POD)
    assert pod["spec"]["nodeName"] == "node-1"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "3"


def test_409_conflict_on_resize_is_retried_and_422_is_reported_not_retried() -> None:
    emu = cluster()
    b = backend(emu)
    b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),), allocations={"a/vm1": {"cpu": 1}}))
    emu.fail("PATCH", r"/resize$", 409, times=2)
    n0 = len(emu.calls)
    report = b.apply_report(plan(60, allocations={"a/vm1": {"cpu": 2}}))
    assert report.failed == () and report.api_calls == 2 + 3
    assert [v for v, _ in calls(emu, n0)].count("PATCH") == 3
    emu.fail("PATCH", r"/resize$", 422, reason="Invalid")
    n1 = len(emu.calls)
    report = b.apply_report(plan(120, allocations={"a/vm1": {"cpu": 3}}))
    (op,) = report.failed
    assert op.op == "resize" and op.reason.startswith("422 Invalid")
    assert [v for v, _ in calls(emu, n1)].count("PATCH") == 1
    # Not applied: the next period tries again (the spec still says 2 cores).
    report = b.apply_report(plan(180, allocations={"a/vm1": {"cpu": 3}}))
    assert report.failed == () and report.counts() == {"resize": 1}


def test_infeasible_and_deferred_resizes_are_reported_the_next_period() -> None:
    emu = cluster(nodes=1)
    b = backend(emu)
    create = (VMPlacement("a/vm1", "a", 0), VMPlacement("b/vm1", "b", 0))
    b.apply_report(plan(create=create, allocations={"a/vm1": {"cpu": 2}, "b/vm1": {"cpu": 2}}))
    # More than the node has: accepted by the API server, Infeasible for the kubelet.
    report = b.apply_report(plan(60, allocations={"a/vm1": {"cpu": 6}, "b/vm1": {"cpu": 2}}))
    assert [(o.op, o.ok, o.state) for o in report.ops] == [("resize", True, "Proposed")]
    report = b.apply_report(plan(120, allocations={"a/vm1": {"cpu": 6}, "b/vm1": {"cpu": 2}}))
    (op,) = report.ops
    assert (op.op, op.ok, op.state) == ("resize-status", False, "Infeasible")
    assert emu.pod(NS, A1_POD)["status"]["containerStatuses"][0]["resources"]["limits"] == {
        "cpu": "2"}
    # Fits the node but not next to b: Deferred, then actuated once b shrinks.
    b.apply_report(plan(180, allocations={"a/vm1": {"cpu": 3}, "b/vm1": {"cpu": 2}}))
    report = b.apply_report(plan(240, allocations={"a/vm1": {"cpu": 3}, "b/vm1": {"cpu": 1}}))
    assert [(o.op, o.state) for o in report.ops] == [("resize-status", "Deferred"),
                                                     ("resize", "Proposed")]
    report = b.apply_report(plan(300, allocations={"a/vm1": {"cpu": 3}, "b/vm1": {"cpu": 1}}))
    assert report.ops == ()
    assert emu.used("node-0") == Size(4000, 0)


def test_shrinks_go_before_grows_so_no_resize_is_deferred() -> None:
    emu = cluster(nodes=1)
    b = backend(emu)
    create = (VMPlacement("a/vm1", "a", 0), VMPlacement("b/vm1", "b", 0))
    b.apply_report(plan(create=create, allocations={"a/vm1": {"cpu": 2}, "b/vm1": {"cpu": 2}}))
    n0 = len(emu.calls)
    b.apply_report(plan(60, allocations={"a/vm1": {"cpu": 3}, "b/vm1": {"cpu": 1}}))
    assert calls(emu, n0)[2:] == [("PATCH", f"{POD}/{B1_POD}/resize"),
                                  ("PATCH", f"{POD}/{A1_POD}/resize")]
    assert b.apply_report(plan(120, allocations={"a/vm1": {"cpu": 3}, "b/vm1": {"cpu": 1}})
                          ).ops == ()


def test_a_node_that_disappears_loses_its_vms_and_keeps_its_index() -> None:
    emu = cluster(nodes=3)
    b = backend(emu)
    create = (VMPlacement("a/vm1", "a", 1), VMPlacement("a/vm2", "a", 2))
    b.apply_report(plan(create=create, allocations={p.vm: {"cpu": 1} for p in create}))
    emu.remove_node("node-1")
    n0 = len(emu.calls)
    report = b.apply_report(plan(60, allocations={"a/vm2": {"cpu": 1}}))
    (lost,) = report.ops
    assert (lost.op, lost.vm, lost.ok) == ("lost", "a/vm1", False)
    assert lost.reason == "node node-1 is gone"
    assert calls(emu, n0) == [*LIST, ("DELETE", f"{POD}/{A1_POD}")]
    hosts = b.hosts()
    assert hosts.ids == ("node-0", "node-1", "node-2")
    assert hosts.capacity.tolist() == [[4.0, 8192.0], [0.0, 0.0], [4.0, 8192.0]]
    report = b.apply_report(plan(120, create=(VMPlacement("a/vm3", "a", 1),),
                                 allocations={"a/vm3": {"cpu": 1}, "a/vm2": {"cpu": 1}}))
    (op,) = report.failed
    assert op.op == "create" and "gone" in op.reason
    emu.add_node("node-3", "8", "16Gi")  # a new node comes in after the others
    b.refresh()
    assert b.hosts().ids[-1] == "node-3" and b.hosts().capacity[3].tolist() == [8.0, 16384.0]


def test_a_pod_the_kubelet_rejects_is_reported_failed() -> None:
    emu = cluster(nodes=1, cpu="2")
    b = backend(emu)
    report = b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),),
                                 allocations={"a/vm1": {"cpu": 3}}))
    assert report.failed == ()  # the API accepted it; the kubelet decides
    report = b.apply_report(plan(60))
    (op,) = report.ops
    assert (op.op, op.vm, op.ok, op.reason) == ("failed", "a/vm1", False, "OutOfcpu")
    assert b.apply_report(plan(120)).ops == ()  # reported once


def test_a_restarted_server_re_adopts_its_pods_by_label() -> None:
    emu = cluster()
    b = backend(emu)
    create = tuple(VMPlacement(f"app/vm{k}", "app", k % 2) for k in range(1, 4))
    b.apply_report(plan(create=create, allocations={p.vm: {"cpu": 1} for p in create}))
    other = KubernetesBackend(emulated_client(emu, NS), namespace=NS, instance="someone-else")
    assert other.adopt() == {}
    again = KubernetesBackend(emulated_client(emu, NS), namespace=NS)
    assert again.adopt() == {"app/vm1": "node-1", "app/vm2": "node-0", "app/vm3": "node-1"}
    n0 = len(emu.calls)
    report = again.apply_report(plan(60, allocations={
        "app/vm1": {"cpu": 1}, "app/vm2": {"cpu": 1.5}, "app/vm3": {"cpu": 1}}))
    assert calls(emu, n0) == [*LIST, ("PATCH", f"{POD}/{APP2_POD}/resize")]
    assert report.failed == ()


def test_api_calls_per_period_do_not_grow_with_the_cluster() -> None:
    per_period = []
    for n in (10, 100):
        emu = cluster(nodes=n // 10)
        b = backend(emu)
        create = tuple(VMPlacement(f"app{k}/vm1", f"app{k}", k % (n // 10)) for k in range(n))
        allocs = {p.vm: {"cpu": 0.25} for p in create}
        b.apply_report(plan(create=create, allocations=allocs))
        allocs["app3/vm1"] = {"cpu": 0.3}
        per_period.append(b.apply_report(plan(60, allocations=allocs)).api_calls)
    assert per_period == [3, 3]


def test_one_namespace_per_user_is_created_when_first_needed() -> None:
    emu = cluster()
    b = KubernetesBackend(emulated_client(emu, NS), namespace=None)
    b.add_app("a", PodTemplate(owner="alice"))
    b.add_app("b", PodTemplate(owner="alice"))
    b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0), VMPlacement("b/vm1", "b", 0)),
                        allocations={"a/vm1": {"cpu": 1}, "b/vm1": {"cpu": 1}}))
    assert [c for c in calls(emu) if c[1] == "/api/v1/namespaces"] == [
        ("POST", "/api/v1/namespaces")]
    assert {ns for ns, _ in emu.pods} == {"merkat-alice"}
    assert ("GET", "/api/v1/pods") in calls(emu)  # one list over every namespace
    again = KubernetesBackend(emulated_client(emu, NS), namespace=None)
    assert set(again.adopt()) == {"a/vm1", "b/vm1"}


def test_an_unreachable_api_server_is_reported_not_raised() -> None:
    from lightkube import Client, KubeConfig

    from merkat.backends.kubernetes.emulator import kubeconfig

    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    client = Client(KubeConfig.from_dict(kubeconfig()), transport=httpx2.MockTransport(refuse),
                    trust_env=False)
    b = KubernetesBackend(client, namespace=NS, retries=2, sleep=lambda s: None)
    report = b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),)))
    (op,) = report.ops
    assert op.op == "refresh" and not op.ok and "connection refused" in op.reason
    assert report.api_calls == 3


def test_finished_when_every_pod_of_the_application_exited() -> None:
    emu = cluster()
    b = backend(emu)
    create = (VMPlacement("a/vm1", "a", 0), VMPlacement("a/vm2", "a", 1))
    b.apply_report(plan(create=create, allocations={p.vm: {"cpu": 1} for p in create}))
    emu.finish(NS, A1_POD)
    b.refresh()
    assert not b.finished("a")
    emu.finish(NS, A2_POD)
    b.refresh()
    assert b.finished("a")


def test_a_failed_binding_leaves_no_unbound_pod() -> None:
    emu = cluster()
    b = backend(emu)
    emu.fail("POST", r"/binding$", 403, reason="Forbidden")
    report = b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0),),
                                 allocations={"a/vm1": {"cpu": 1}}))
    (op,) = report.failed
    assert op.op == "create" and op.reason.startswith("403 Forbidden")
    assert emu.pods == {} and "a/vm1" not in b.pods
    assert [v for v, _ in calls(emu)[-3:]] == ["POST", "POST", "DELETE"]


def test_a_create_for_a_pod_that_exists_after_a_restart_costs_no_create() -> None:
    emu = cluster()
    b = backend(emu)
    b.apply_report(plan(create=(VMPlacement("a/vm1", "a", 0), VMPlacement("a/vm2", "a", 0)),
                        allocations={"a/vm1": {"cpu": 1}, "a/vm2": {"cpu": 1}}))
    again = backend(emu)
    again.adopt()
    n0 = len(emu.calls)
    report = again.apply_report(plan(60, create=(VMPlacement("a/vm1", "a", 0),
                                                 VMPlacement("a/vm2", "a", 1)),
                                     allocations={"a/vm1": {"cpu": 2}, "a/vm2": {"cpu": 1}}))
    assert report.failed == ()
    assert calls(emu, n0) == [*LIST, ("DELETE", f"{POD}/{A2_POD}"), ("POST", POD),
                              ("POST", f"{POD}/{A2_POD}/binding"),
                              ("PATCH", f"{POD}/{A1_POD}/resize")]  # a grow: last
    assert emu.pod(NS, A2_POD)["spec"]["nodeName"] == "node-1"


def test_resize_state_reads_1_33_conditions_and_the_legacy_field() -> None:
    from merkat.backends.kubernetes.objects import resize_state, resources_block

    def pod(status: dict, spec_cpu: int = 2000, held_cpu: int = 1000) -> dict:  # type: ignore[type-arg]
        return {"spec": {"containers": [{"name": "vm", "resources": resources_block(
                    Size(spec_cpu))}]},
                "status": {"containerStatuses": [{"name": "vm", "resources": resources_block(
                    Size(held_cpu))}], **status}}

    cond = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible",
             "message": "Node didn't have enough capacity"}]
    assert resize_state(pod({"conditions": cond})) == ("Infeasible",
                                                       "Node didn't have enough capacity")
    cond = [{"type": "PodResizeInProgress", "status": "True"}]
    assert resize_state(pod({"conditions": cond}))[0] == "InProgress"
    assert resize_state(pod({"resize": "Deferred"}))[0] == "Deferred"  # <= 1.32
    assert resize_state(pod({}))[0] == "Proposed"  # spec ahead, the kubelet has not acted
    assert resize_state(pod({}, 1000, 1000))[0] == "Done"
