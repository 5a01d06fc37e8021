"""``merkat bench kubernetes``: the period loop driving the Kubernetes backend on the emulator.

For each cluster size (``nodes`` nodes of ``cores`` cores, ``pods_per_node`` best-effort
applications of one VM per node on average, each wanting ``vm_cores``), the real period loop
(controllers, market, bank in memory) runs with the Kubernetes backend talking through
lightkube to the HTTP-level emulator, and three periods are measured:

- ``first``: every pod created and bound (2 calls per pod);
- ``steady``: nothing changed (the two reads: nodes and pods);
- ``arrival``: one more application arrives (its create and bind, and the resizes of the
  neighbours whose share the market changed on its node).

Per period: ``decide_s`` (the period loop without the backend: observe, decide, clear, plan,
charge), ``apply_s`` (the backend's apply, wall clock, the emulator included),
``emulator_s`` (of which the emulator answering), ``api_calls`` and ``calls`` by verb and
subresource. Nothing random: the same arguments give the same calls.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from merkat.backends.kubernetes.backend import ApplyReport, KubernetesBackend
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.control.types import Metrics
from merkat.core.backend import Plan

NS = "merkat"


@dataclass
class _Timed:
    """The backend, its apply timed; every application runs forever (no metrics)."""

    kube: KubernetesBackend
    apply_s: float = 0.0
    report: ApplyReport | None = None

    def apply(self, plan: Plan) -> ApplyReport:
        t0 = time.perf_counter()
        report = self.report = self.kube.apply_report(plan)
        self.apply_s = time.perf_counter() - t0
        return report

    def metrics(self, app: str) -> Metrics:
        return Metrics()

    def finished(self, app: str) -> bool:
        return False

    def idle(self, app: str) -> frozenset[str]:
        return frozenset()


def _calls(emu: KubeEmulator, start: int) -> dict[str, int]:
    out: Counter[str] = Counter()
    for c in emu.calls[start:]:
        parts = c.path.strip("/").split("/")
        what = parts[-1] if parts[-1] in ("binding", "resize") else (
            "pods" if "pods" in parts else parts[-1])
        out[f"{c.verb} {what}"] += 1
    return dict(sorted(out.items()))


def bench_size(nodes: int, pods_per_node: int, *, cores: float = 16.0,
               vm_cores: float = 2.0) -> dict[str, Any]:
    """One cluster size: the three measured periods (see the module docstring)."""
    from merkat.bank.memory import MemoryLedger
    from merkat.core.period import AppSpec, Platform
    from merkat.runtime.driver import Driver
    from merkat.runtime.economy import Economy

    emu = KubeEmulator(schema=False)  # timings without the tests' schema checks
    emu.namespaces.add(NS)
    for k in range(nodes):
        emu.add_node(f"node-{k:05d}", f"{cores:g}", "64Gi")
    kube = KubernetesBackend(emulated_client(emu, NS), namespace=NS, sleep=lambda s: None)
    kube.refresh()
    timed = _Timed(kube)
    platform = Platform(kube.hosts(), period=60.0, reserve={"cpu": 0.01})
    driver = Driver(platform, timed, Economy(MemoryLedger(journal=False)),
                    admit=lambda b, a: None)

    def submit(i: int) -> None:
        driver.submit(AppSpec(id=f"app{i:06d}", policy="best-effort", size=1,
                                vm_size={"cpu": vm_cores}, submit_time=0.0, budget=100.0,
                                renewal=100.0, trade=("cpu",)))

    pods = nodes * pods_per_node
    for i in range(pods):
        submit(i)
    out: dict[str, Any] = {"nodes": nodes, "pods": pods}
    for k, name in enumerate(("first", "steady", "arrival")):
        if name == "arrival":
            submit(pods)
        n0, busy0 = len(emu.calls), emu.busy_s
        t0 = time.perf_counter()
        driver.step(60.0 * k)
        wall = time.perf_counter() - t0
        report = timed.report
        assert report is not None
        out[name] = {
            "decide_s": round(wall - timed.apply_s, 4),
            "apply_s": round(timed.apply_s, 4),
            "emulator_s": round(emu.busy_s - busy0, 4),
            "api_calls": report.api_calls,
            "calls": _calls(emu, n0),
            "ops": report.counts(),
        }
    running = sum(1 for p in emu.pods.values() if p["status"].get("phase") == "Running")
    out["running_pods"] = running
    return out


def bench(nodes: int, pods_per_node: int, grow: Sequence[int], *, cores: float = 16.0,
          vm_cores: float = 2.0) -> dict[str, Any]:
    """The headline size, then the API calls per period as the cluster grows."""
    main = bench_size(nodes, pods_per_node, cores=cores, vm_cores=vm_cores)
    growth = []
    for n in grow:
        r = main if n == nodes else bench_size(n, pods_per_node, cores=cores,
                                               vm_cores=vm_cores)
        growth.append({"nodes": r["nodes"], "pods": r["pods"],
                       "first_calls": r["first"]["api_calls"],
                       "steady_calls": r["steady"]["api_calls"],
                       "arrival_calls": r["arrival"]["api_calls"],
                       "steady_apply_s": r["steady"]["apply_s"],
                       "steady_decide_s": r["steady"]["decide_s"]})
    return {"period": main, "growth": growth}
