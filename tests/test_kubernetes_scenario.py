"""End to end on the emulated cluster: Merkat Fig. 6's deadline solver and four best-effort
solvers sharing one 4-core node, run by the real period loop, market and bank with the
Kubernetes backend — every allocation is a pod resize, and the applications progress at the
CPU the pods hold (read back from the emulated kubelet)."""

from __future__ import annotations

import pytest

from merkat.backends.kubernetes import KubernetesBackend, PodTemplate
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.objects import cores_to_millis
from merkat.experiments.merkat import MERKAT6, merkat6_scenario
from test_kubernetes_pods_support import PodsBackend

pytestmark = pytest.mark.kubernetes

MIN = 60.0


def test_deadline_solver_and_best_effort_solvers_share_a_node_of_the_cluster() -> None:
    deadline = 150.0
    reference, ref_slo = merkat6_scenario(deadline)  # the same run on the simulated backend
    ref = reference.run(deadline * MIN + MERKAT6["period_s"])

    sc, slo = merkat6_scenario(deadline)
    emu = KubeEmulator()
    emu.namespaces.add("merkat")
    emu.add_node("h0", "4", "64Gi")
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    for app in ["slo", "be1", "be2", "be3", "be4"]:
        kube.add_app(app, PodTemplate(image="zephyr:latest", command=("zephyr", app),
                                      memory_mib=900))
    pods = PodsBackend(kube, emu, sc.backend)
    sc.world = pods
    res = sc.run(deadline * MIN + MERKAT6["period_s"])

    # The deadline solver met its deadline while the best-effort solvers shared its node.
    finish = res.apps["slo"]["finish_s"]
    assert finish is not None and finish <= deadline * MIN + MERKAT6["on_time_tolerance_s"]
    assert slo.finish_time == finish
    assert res.audit_ok
    shared = [k for k, _ in enumerate(res.time_s)
              if res.series["slo"]["status"][k] == "running"
              and sum(res.series[b]["status"][k] == "running" for b in ("be1", "be2", "be3",
                                                                        "be4")) == 4]
    assert len(shared) > 50
    # The best-effort solvers paid less than the deadline solver.
    assert all(res.apps[b]["spent"] < res.apps["slo"]["spent"] for b in ("be1", "be2", "be3"))
    # Every period, each running VM's pod spec holds the market's allocation (to the
    # millicore), as request and limit, and the kubelet actuated it.
    assert len(pods.seen) == len(res.time_s)
    checked = 0
    for k, seen in enumerate(pods.seen):
        for app in ("slo", "be1", "be2", "be3", "be4"):
            alloc = res.series[app]["alloc_cpu"][k]
            if res.series[app]["status"][k] != "running" or not alloc:
                continue
            spec, held = seen[f"{app}/vm1"]
            assert round(spec["cpu"] * 1000) == cores_to_millis(alloc)
            assert held == spec and spec["memory"] == 900.0
            checked += 1
    assert checked > 300
    ops = {}
    for r in pods.reports:
        for name, n in r.counts().items():
            ops[name] = ops.get(name, 0) + n
    assert ops.get("create", 0) == 5 and "resize" in ops
    assert not any(n.endswith("-failed") for n in ops), ops
    # Calls per period: the two reads plus one per change.
    assert all(r.api_calls == 2 + sum(1 + (o.op in ("create", "resume")) for o in r.ops)
               for r in pods.reports)
    # The same outcome as on the simulated backend, up to the millicore rounding.
    assert finish == pytest.approx(ref.apps["slo"]["finish_s"], rel=0.01)
    assert ref_slo.finish_time is not None


def test_the_vms_of_a_node_that_disappears_are_recreated_where_the_market_moves_them() -> None:
    from merkat.bank.memory import MemoryLedger
    from merkat.core.period import AppSpec, Platform
    from merkat.runtime.driver import Driver
    from merkat.runtime.economy import Economy

    emu = KubeEmulator()
    emu.namespaces.add("merkat")
    for k in range(3):
        emu.add_node(f"node-{k}", "4", "8Gi")
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    kube.refresh()
    platform = Platform(kube.hosts(), period=60.0, reserve={"cpu": 0.01})
    driver = Driver(platform, kube, Economy(MemoryLedger()), admit=lambda b, a: None)
    for i in range(6):
        driver.submit(AppSpec(id=f"a{i}", policy="best-effort", size=1, vm_size={"cpu": 2.0},
                                submit_time=0.0, budget=100.0, renewal=100.0, trade=("cpu",)))
    counts = []
    for t in range(5):
        if t == 2:
            emu.remove_node("node-1")
        platform.hosts = kube.hosts()  # the nodes as last read (the service does this)
        driver.step(60.0 * t)
        assert kube.last_report is not None
        counts.append(kube.last_report.counts())
    assert counts[0] == {"create": 6} and counts[1] == {}
    # Period 2 finds node-1 gone: its two VMs are lost (and their allocations cannot apply).
    assert counts[2] == {"lost-failed": 2, "resize-failed": 2}
    # Period 3: node-1 offers nothing; the market moved the VMs, recreated on the others.
    assert counts[3]["migrate"] == 2 and counts[4] == {}
    nodes = sorted(p["spec"]["nodeName"] for p in emu.pods.values())
    assert nodes == ["node-0"] * 3 + ["node-2"] * 3
    assert all(p["status"]["phase"] == "Running" for p in emu.pods.values())
    assert {vm.host for a in platform.apps.values() for vm in a.vms} == {0, 2}
