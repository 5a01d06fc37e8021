"""The Kubernetes backend's names, quantities and access: CPU and memory quantities round-trip,
names are DNS labels, a kubeconfig is read (bad ones reported in one line), and the shipped
RBAC grants every call the backend makes (and no more)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.backends.kubernetes import KubernetesBackend, PodTemplate
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.objects import (
    cpu_millis,
    dns_label,
    fmt_cpu,
    fmt_memory,
    memory_bytes,
    pod_name,
)
from merkat.core.backend import VMPlacement
from test_kubernetes import NS, backend, cluster, plan  # noqa: F401

pytestmark = pytest.mark.kubernetes


@settings(deadline=None)  # a loaded CI machine must not fail a pure function
@given(st.integers(min_value=1, max_value=10**7))
def test_cpu_quantities_round_trip(millis: int) -> None:
    assert cpu_millis(fmt_cpu(millis)) == millis


@settings(deadline=None)
@given(st.integers(min_value=1, max_value=2**45))
def test_memory_quantities_round_trip(nbytes: int) -> None:
    assert memory_bytes(fmt_memory(nbytes)) == nbytes


def test_quantities_and_names() -> None:
    assert cpu_millis("3800m") == 3800 and cpu_millis("2") == 2000 and cpu_millis("0.25") == 250
    assert memory_bytes("16318584Ki") == 16318584 * 1024 and memory_bytes("1G") == 10**9
    name = pod_name("solver/vm12")
    assert name.startswith("solver-vms-12-") and name == pod_name("solver/vm12", "vms")
    odd = pod_name("My_App.v2/vm3")
    assert odd != pod_name("my-app-v2/vm3") and len(odd) <= 63
    assert dns_label("x" * 80) != dns_label("x" * 81) and len(dns_label("x" * 80)) == 63


def test_connect_reads_a_kubeconfig_and_reports_bad_ones_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from merkat.backends.kubernetes.connect import KubeConfigError, connect
    from merkat.backends.kubernetes.emulator import kubeconfig

    with pytest.raises(KubeConfigError, match="not found"):
        connect(str(tmp_path / "missing"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [")
    with pytest.raises(KubeConfigError, match=r"bad\.yaml"):
        connect(str(bad))
    good = tmp_path / "config"
    good.write_text(yaml.safe_dump(kubeconfig(server="https://127.0.0.1:1")))
    with pytest.raises(KubeConfigError, match="Context 'other' not found"):
        connect(str(good), context="other")
    b = connect(str(good), namespace="team", retries=0)
    assert b.namespace == "team"
    report = b.apply_report(plan())  # nothing listens there: reported, not raised
    (op,) = report.ops
    assert op.op == "refresh" and not op.ok and "ConnectError" in op.reason


def _rbac_verb(verb: str, path: str) -> tuple[str, str, bool]:
    """``(resource, RBAC verb, cluster-wide)`` of one API request."""
    parts = path.strip("/").split("/")[2:]  # after api/v1
    cluster_wide = parts[0] != "namespaces" or len(parts) == 1
    if parts[0] == "namespaces" and len(parts) > 2:
        parts = parts[2:]
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    named = len(parts) > 1
    rbac = {"GET": "get" if named else "list", "POST": "create", "DELETE": "delete",
            "PATCH": "patch"}[verb]
    return resource, rbac, cluster_wide


def test_the_shipped_rbac_grants_every_call_the_backend_makes() -> None:
    from pathlib import Path

    import yaml

    deploy = Path(__file__).parent.parent / "deploy" / "kubernetes"

    def grants(*files: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        ns_rules, cluster_rules = set(), set()
        for f in files:
            for doc in yaml.safe_load_all((deploy / f).read_text()):
                if doc["kind"] in ("Role", "ClusterRole"):
                    into = cluster_rules if doc["kind"] == "ClusterRole" else ns_rules
                    for rule in doc["rules"]:
                        into |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
        return ns_rules, cluster_rules

    def exercise(namespace: str | None) -> KubeEmulator:
        emu = cluster(nodes=3)
        b = KubernetesBackend(emulated_client(emu, NS), namespace=namespace,
                              sleep=lambda s: None)
        b.add_app("a", PodTemplate(owner="alice"))
        b.refresh()
        create = (VMPlacement("a/vm1", "a", 0), VMPlacement("a/vm2", "a", 1))
        b.apply_report(plan(create=create, allocations={p.vm: {"cpu": 1} for p in create}))
        b.apply_report(plan(60, migrate=(("a/vm1", 0, 2),), allocations={
            "a/vm1": {"cpu": 1}, "a/vm2": {"cpu": 2}}))
        p = b.pods["a/vm2"]  # the monitors: a command in the pod, the pod's log
        assert b.exec("a/vm2", ["true"]).ok
        assert list(b.client.log(p.name, namespace=p.namespace, container="vm")) == []
        emu.remove_node("node-1")
        b.apply_report(plan(120, suspend=("a/vm1",)))
        return emu

    ns_rules, cluster_rules = grants("rbac.yaml")
    emu = exercise(NS)
    needed = {_rbac_verb(c.verb, c.path) for c in emu.calls}
    # An exec's WebSocket upgrade is a GET, authorized as get (and, from Kubernetes 1.35, as
    # create too: the AuthorizePodWebsocketUpgradeCreatePermission gate): both are needed.
    needed |= {(r, "create", w) for r, v, w in needed if r == "pods/exec"}
    assert {(r, v) for r, v, _ in needed} >= {("pods", "create"), ("pods/binding", "create"),
                                              ("pods/resize", "patch"), ("pods", "delete"),
                                              ("nodes", "list"), ("pods", "list"),
                                              ("pods/exec", "get"), ("pods/exec", "create"),
                                              ("pods/log", "get")}
    for resource, verb, wide in needed:
        assert (resource, verb) in (cluster_rules if wide else ns_rules), (resource, verb)
    _, cluster_rules = grants("rbac.yaml", "rbac-per-user.yaml")
    emu = exercise(None)
    needed = {_rbac_verb(c.verb, c.path) for c in emu.calls}
    assert ("pods/exec", "get", False) in needed
    for resource, verb, _ in needed | {("pods/exec", "create", False)}:
        assert (resource, verb) in cluster_rules, (resource, verb)
