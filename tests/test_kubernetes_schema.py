"""Every request the Kubernetes backend sends, and every answer of the emulator it parses, checked
against the Kubernetes API schema of a pinned version (kubernetes-validate's strict JSON Schema,
backends/kubernetes/schema.py): a field the real API server would reject fails."""

from __future__ import annotations

import pytest

from merkat.backends.kubernetes import KubernetesBackend, PodTemplate
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.objects import Size, binding, pod_manifest, resize_patch
from merkat.backends.kubernetes.schema import VERSION, check, check_request, check_response
from merkat.backends.kubernetes.state import StateVolume
from merkat.core.backend import Plan, VMPlacement

pytestmark = pytest.mark.kubernetes

NS = "merkat"
POD = "io.k8s.api.core.v1.Pod"


def cluster(**kw: object) -> KubeEmulator:
    emu = KubeEmulator(schema=True, **kw)  # type: ignore[arg-type]
    emu.namespaces.add(NS)
    for k in range(3):
        emu.add_node(f"node-{k}", "4", "8Gi")
    return emu


def plan(t: float = 0.0, **kw: object) -> Plan:
    return Plan(time=t, period=60.0, **kw)  # type: ignore[arg-type]


def route(verb: str, path: str) -> str:
    parts = path.split("/")
    if len(parts) > 5 and parts[5] == "persistentvolumeclaims":
        return f"{verb} persistentvolumeclaims" + ("" if len(parts) == 6 else "/name")
    if len(parts) > 6 and parts[5] == "pods":  # /api/v1/namespaces/NS/pods/NAME[/sub]
        return f"{verb} pods/{parts[7]}" if len(parts) > 7 else f"{verb} pod"
    if path.endswith("/pods"):
        return f"{verb} pods" + (" (all namespaces)" if path == "/api/v1/pods" else "")
    return f"{verb} {parts[-1]}"


def exercise(emu: KubeEmulator, namespace: str | None, **kw: object) -> KubernetesBackend:
    """Every kind of call: list nodes and pods, create (+ a namespace), bind, resize CPU and
    memory (both resize policies), a 409 retried, migrate, suspend, destroy, exec, log; and
    with ``state:`` a claim created and deleted, the notice set and withdrawn (a merge patch
    of the pod), a checkpoint (exec)."""
    b = KubernetesBackend(emulated_client(emu, NS), namespace=namespace, sleep=lambda s: None,
                          **kw)  # type: ignore[arg-type]
    b.add_app("a", PodTemplate(owner="alice", image="python:3.12", command=("sleep", "9"),
                               env={"X": "1"}, memory_mib=256))
    b.add_app("m", PodTemplate(owner="bob", memory_restart=True))
    b.add_app("s", PodTemplate(owner="carol", state=StateVolume(
        checkpoint="true", restore="true", grace=5, storage_class="standard")))
    b.refresh()
    create = (VMPlacement("a/vm1", "a", 0), VMPlacement("a/vm2", "a", 1),
              VMPlacement("m/vm1", "m", 2))
    alloc = {"a/vm1": {"cpu": 1}, "a/vm2": {"cpu": 1}, "m/vm1": {"cpu": 1, "memory": 512}}
    assert b.apply_report(plan(create=create, allocations=alloc)).failed == ()
    emu.fail("PATCH", "resize$", 409)
    alloc = {"a/vm1": {"cpu": 1.5}, "a/vm2": {"cpu": 2}, "m/vm1": {"cpu": 0.5, "memory": 256}}
    assert b.apply_report(plan(60, migrate=(("a/vm1", 0, 2),), allocations=alloc)).failed == ()
    assert b.exec("a/vm2", ["echo", "hi"]).ok
    p = b.pods["a/vm2"]
    assert list(b.client.log(p.name, namespace=p.namespace, container="vm", tail_lines=10)) == []
    assert b.apply_report(plan(120, suspend=("a/vm1",), destroy=("m/vm1",),
                               create=(VMPlacement("s/vm1", "s", 0),),
                               allocations={"a/vm2": {"cpu": 2}, "s/vm1": {"cpu": 1}})
                          ).failed == ()
    one = {"a/vm2": {"cpu": 2}}
    steps = [plan(180, suspend=("s/vm1",), allocations=one),  # the notice
             plan(200, resume=(VMPlacement("s/vm1", "s", 0),),  # withdrawn (null)
                  allocations={**one, "s/vm1": {"cpu": 1}}),
             plan(240, migrate=(("s/vm1", 0, 1),), allocations={**one, "s/vm1": {"cpu": 1}}),
             plan(300, allocations={**one, "s/vm1": {"cpu": 1}}),  # checkpoint, delete, create
             plan(360, destroy=("s/vm1",), allocations=one)]  # the pod and its claim deleted
    for step in steps:
        assert b.apply_report(step).failed == ()
    return b


def test_every_request_the_backend_sends_is_valid_against_the_pinned_api_schema() -> None:
    seen: set[str] = set()
    for namespace, kw in ((NS, {}), (None, {}), (NS, {"bind": "node-name"})):
        emu = cluster()
        exercise(emu, namespace, **kw)
        assert emu.schema_errors == []
        for c in emu.calls:  # checked again here, from the recorded request
            query = {k: [v] for k, v in c.query.items()}
            assert check_request(c.verb, c.path, query, c.body) == [], (c.verb, c.path)
        seen |= {route(c.verb, c.path) for c in emu.calls}
    assert seen >= {"GET nodes", "GET pods", "GET pods (all namespaces)", "POST pods",
                    "POST pods/binding", "PATCH pods/resize", "DELETE pod", "GET pods/exec",
                    "GET pods/log", "POST namespaces", "PATCH pod",
                    "POST persistentvolumeclaims", "DELETE persistentvolumeclaims/name"}
    patches = [c.body for c in emu.calls if route(c.verb, c.path) == "PATCH pod"]
    assert [p["metadata"]["annotations"]["merkat.io/preempt-at"] is None for p in patches] == [
        False, True, False]  # set, withdrawn, set
    assert VERSION.startswith("1.35")


def test_the_bodies_merkat_builds_are_valid_pods_bindings_and_patches() -> None:
    for restart in (False, True):
        for size in (Size(1500, None), Size(250, 512 * 2**20)):
            t = PodTemplate(command=("a", "b"), env={"K": "v"}, memory_restart=restart)
            for node in (None, "node-0"):
                body = pod_manifest(instance="merkat", vm="x/vm1", namespace=NS, template=t,
                                    size=size, node=node)
                assert check(POD, body) == []
            assert check(POD, resize_patch(size)) == []
            assert check(POD, resize_patch(size, Size(1000, 2**30))) == []
    assert check("io.k8s.api.core.v1.Binding", binding("p", "node-0")) == []


def test_a_field_the_real_api_would_reject_is_caught() -> None:
    body = pod_manifest(instance="merkat", vm="x/vm1", namespace=NS, template=PodTemplate(),
                        size=Size(1000, None))
    body["spec"]["containers"][0]["resizePolicy"][0] = {"resourceName": "cpu",
                                                         "policy": "NotRequired"}
    body["spec"]["terminationGracePeriodSeconds"] = "0"
    errors = check(POD, body)
    assert any("spec.containers.0.resizePolicy.0" in e and "'policy' was unexpected" in e
               for e in errors), errors
    assert any("restartPolicy' is a required property" in e for e in errors), errors
    assert any(e.startswith("spec.terminationGracePeriodSeconds: '0' is not of type")
               for e in errors), errors
    assert check_request("GET", f"/api/v1/namespaces/{NS}/pods/p/exec",
                         {"command": ["true"], "stdout": ["yes"], "tty": ["false"],
                          "cmd": ["x"]}, None) == [
        "?stdout: 'yes' is not a boolean", "?cmd: not a parameter of this call"]
    assert check_request("DELETE", f"/api/v1/namespaces/{NS}/pods/p",
                         {"gracePeriodSeconds": ["soon"]}, None) == [
        "?gracePeriodSeconds: 'soon' is not an integer"]
    assert check_request("PUT", f"/api/v1/namespaces/{NS}/pods/p", {}, {}) == [
        f"PUT /api/v1/namespaces/{NS}/pods/p: not a call the schema table knows"]


def test_the_emulator_answers_422_to_an_unknown_field_as_strict_validation_does() -> None:
    import httpx2

    emu = cluster()
    body = pod_manifest(instance="merkat", vm="x/vm1", namespace=NS, template=PodTemplate(),
                        size=Size(1000, None))
    body["spec"]["containers"][0]["resource"] = body["spec"]["containers"][0].pop("resources")
    with httpx2.Client(transport=emu.transport(), base_url="https://k") as http:
        r = http.post(f"/api/v1/namespaces/{NS}/pods", json=body,
                      headers={"authorization": "Bearer merkat-emulator-token"})
    assert r.status_code == 422 and r.json()["reason"] == "Invalid"
    assert "'resource' was unexpected" in r.json()["message"]
    assert emu.pods == {} and len(emu.schema_errors) == 1


def test_every_answer_the_backend_parses_is_valid_and_a_bad_one_is_caught() -> None:
    emu = cluster()
    b = exercise(emu, NS)
    b.refresh()
    assert emu.schema_errors == []
    for pod in emu.pods.values():  # what GET pods returned, with resize conditions and all
        assert check_response(pod) == []
    assert check_response(emu._list_pods(NS, {})) == []
    next(iter(emu.pods.values()))["status"]["resizeStatus"] = "Deferred"  # not an API field
    report = b.apply_report(plan(180, allocations={"a/vm2": {"cpu": 2}}))
    assert any("resizeStatus" in e for e in emu.schema_errors), emu.schema_errors
    assert report.failed  # the period that read it reports the emulator's 500
