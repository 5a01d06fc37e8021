"""The Kubernetes backend under the live service's interface (launchers, poll, describe, nodes,
logs through the API), on the emulator."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from merkat.backends.kubernetes import KubernetesBackend
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.kubernetes.objects import pod_name
from merkat.control.types import Metrics
from merkat.core.backend import Plan, VMPlacement

A1_POD = pod_name("a/vm1", "default")
SOLVER2_POD = pod_name("solver/vm2", "workers")

pytestmark = pytest.mark.kubernetes


@dataclass(frozen=True)
class Launch:  # what the service's launchers return
    command: str
    cluster: str = "default"
    index: int = 0
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    memory_floor: float = 0.0


def setup(tmp_path: Path) -> tuple[KubeEmulator, KubernetesLive]:
    emu = KubeEmulator()
    emu.namespaces.add("merkat")
    emu.add_node("node-a", "4", "8Gi")
    emu.add_node("node-b", "2", "4Gi", unschedulable=True)
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    return emu, KubernetesLive(kube, logs=tmp_path / "logs", image="python:3.12-slim")


def test_launchers_become_pod_commands_env_and_memory(tmp_path: Path) -> None:
    emu, live = setup(tmp_path)
    assert live.warning is None and live.enforced
    assert [(n.name, n.cores, n.memory, n.schedulable) for n in live.node_list()] == [
        ("node-a", 4.0, 8192.0, True), ("node-b", 0.0, 0.0, False)]
    live.register("solver", lambda app, vm, i: Launch(
        f"python -m solver --rank {i}", "workers", i, {"SOLVER_ITERS": "100"}, None, 256.0))
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("solver/vm2", "solver", 0),),
                    allocations={"solver/vm2": {"cpu": 1.5}}))
    assert [(r.op, r.vm, r.error) for r in live.report] == [("create", "solver/vm2", None)]
    pod = emu.pod("merkat", SOLVER2_POD)
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "python:3.12-slim"
    assert c["command"] == ["/bin/sh", "-c", "python -m solver --rank 1"]
    assert {e["name"]: e["value"] for e in c["env"]} == {
        "MERKAT_CLUSTER": "workers", "MERKAT_INDEX": "1", "MERKAT_PLATFORM": "solver",
        "MERKAT_VM": "solver/vm2", "SOLVER_ITERS": "100"}
    assert c["resources"]["limits"] == {"cpu": "1500m", "memory": "256Mi"}
    d = live.describe("solver/vm2")
    assert d is not None and d["process"] == "pending"  # until the next read of the pods
    live.kube.refresh()
    d = live.describe("solver/vm2")
    assert d is not None and d["node"] == "node-a" and d["process"] == "running"
    assert d["limits"] == {"cpu": 1.5, "memory": 256.0} and d["pod"] == f"merkat/{SOLVER2_POD}"
    live.set_metrics("solver", Metrics(work_done=3.0, work_total=10.0))
    assert live.metrics("solver").work_done == 3.0


def test_logs_are_read_through_the_api_and_exits_are_polled(tmp_path: Path) -> None:
    emu, live = setup(tmp_path)
    live.register("a", lambda app, vm, i: Launch("echo hi"))
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("a/vm1", "a", 0),),
                    allocations={"a/vm1": {"cpu": 1.0}}))
    emu.logs[("merkat", A1_POD)] = "iteration 1 took 30.0 s\niteration 2 took 29.5 s\n"
    path = live.log_path("a/vm1")
    assert path is not None
    assert Path(path).read_text().splitlines()[-1] == "iteration 2 took 29.5 s"
    assert live.monitored["a"] == "a/vm1"
    assert live.poll() == []
    emu.finish("merkat", A1_POD, code=1)
    live.apply(Plan(40.0, 40.0, allocations={"a/vm1": {"cpu": 1.0}}))
    (r,) = live.poll()
    assert (r.op, r.vm) == ("exit", "a/vm1") and r.error is not None
    assert live.poll() == []  # once


def test_a_restarted_server_finds_the_pods_left_and_reaps_them(tmp_path: Path) -> None:
    emu, live = setup(tmp_path)
    create = (VMPlacement("a/vm1", "a", 0), VMPlacement("b/vm1", "b", 0))
    live.apply(Plan(0.0, 40.0, create=create, allocations={p.vm: {"cpu": 1.0} for p in create}))
    # The server is killed (no close): a new one finds its pods by label...
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat")
    again = KubernetesLive(kube, logs=tmp_path / "logs")
    assert again.adopted == {"a/vm1": "node-a", "b/vm1": "node-a"}
    # ...and, when no stored VM claims them (no adopt: their platforms ended), deletes them.
    assert sorted(again.reap_orphans()) == ["a/vm1", "b/vm1"] and emu.pods == {}
    # A graceful stop deletes the server's pods.
    again.apply(Plan(40.0, 40.0, create=create[:1], allocations={"a/vm1": {"cpu": 1.0}}))
    assert len(emu.pods) == 1
    again.close()
    assert emu.pods == {}


def test_the_service_config_builds_it_with_one_namespace_or_one_per_user(tmp_path: Path) -> None:
    import threading

    import yaml

    from merkat.backends.kubernetes.emulator import kubeconfig
    from merkat.backends.kubernetes.emulator_http import serve
    from merkat.service.backends import make_backend
    from merkat.service.config import load_config

    emu = KubeEmulator(record=False)
    emu.namespaces.add("team")
    emu.add_node("node-a", "4", "8Gi")
    server = serve(emu.handle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig("default", server.url)))
    try:
        for per_user, namespace in ((False, "team"), (True, "merkat-alice")):
            cfg = load_config(None, data_dir=tmp_path, backend={
                "name": "kubernetes", "kubeconfig": str(config), "namespace": "team",
                "namespace_per_user": per_user, "image": "busybox:1.36",
                "checkpoint_limit_s": 4, "resize_retry_periods": 5})
            live = make_backend(cfg)
            assert isinstance(live, KubernetesLive) and live.warning is None
            assert (live.kube.checkpoint_limit_s, live.kube.resize_retry_periods) == (4.0, 5)
            live.owner_of["app"] = "alice"  # what the manager records at admission
            live.register("app", lambda app, vm, i: Launch("sleep 1000"))
            live.apply(Plan(0.0, 40.0, create=(VMPlacement("app/vm1", "app", 0),),
                            allocations={"app/vm1": {"cpu": 1.0}}))
            assert live.report[0].error is None, live.report
            with server.lock:
                (pod,) = emu.pods.values()
            assert pod["metadata"]["namespace"] == namespace
            assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"
            live.close()
            assert emu.pods == {}
    finally:
        server.shutdown()
        server.server_close()


def test_unregister_forgets_the_launcher_the_monitored_vm_and_the_owner(tmp_path: Path) -> None:
    _, live = setup(tmp_path)
    live.register("a", lambda app, vm, i: Launch("echo hi"))
    live.register("b", lambda app, vm, i: Launch("echo hi"))
    live.owner_of.update(a="alice", b="bob")
    live.unregister("a")  # an admission that failed half-way (service/tenancy.py)
    assert (set(live.launchers), set(live.monitored), live.owner_of) == ({"b"}, {"b"},
                                                                         {"b": "bob"})
