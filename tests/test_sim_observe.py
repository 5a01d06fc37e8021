"""The simulated backend's reports in one call (``SimBackend.observe``, used by the driver
through ``merkat.runtime.observe.observe``) equal the reference, three calls of the backend
seam per application (``observe_each``), at every period and admission point of a run with
rigid applications, a task farm (idle workers), an iterative application (its own metrics),
suspensions for lack of money and ends; a rigid application's report is reused while it is
the same. A rigid application's metrics record is ``new_metrics``'s, field for field."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import merkat.runtime.driver as driver_module
from merkat.backends.sim import RigidApp, SimBackend, TaskFarm
from merkat.backends.sim_models import _rigid_metrics
from merkat.bank.memory import MemoryLedger
from merkat.control.types import new_metrics
from merkat.core.model import App, Observed
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.runtime.observe import Observes, observe, observe_each
from merkat.worlds.merkat.scenarios import IterativeApp


def _arrivals(seed: int) -> list[Arrival]:
    rng = np.random.default_rng(seed)
    items = []
    for k in range(12):
        size = int(rng.integers(1, 3))
        model: Any
        if k == 3:
            model = TaskFarm([30.0, 200.0, 400.0])
        elif k == 5:
            model = IterativeApp(vms=size, work_total=300.0, iteration=30.0)
        else:
            model = RigidApp(vms=size, work_total=float(rng.uniform(50, 600)))
        budget = 0.3 if k in (1, 7) else float(rng.uniform(5, 50))  # (1, 7: out of money)
        spec = AppSpec(id=f"a{k}", policy="best-effort", size=size, vm_size={"cpu": 1.0},
                       submit_time=float(rng.uniform(0, 400)), budget=budget,
                       trade=("cpu",), owner="o")
        items.append(Arrival(spec.submit_time, spec, model))
    items.sort(key=lambda a: a.time)
    return items


@pytest.mark.parametrize("seed", range(3))
def test_one_call_reports_what_three_calls_per_application_report(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = SimBackend(boot_s=20.0)
    assert isinstance(backend, Observes)
    seen: list[dict[str, Observed]] = []

    def checked(b: Any, apps: list[App]) -> dict[str, Observed]:
        got = observe(b, apps)
        assert got == observe_each(b, apps) and list(got) == [a.spec.id for a in apps]
        seen.append(got)
        return got

    monkeypatch.setattr(driver_module, "observe", checked)
    platform = Platform(Hosts(("h0", "h1"), np.array([[1.0, 4096.0]] * 2)),
                        period=60.0, reserve={"cpu": 0.01})
    Driver(platform, backend, Economy(MemoryLedger()), ListArrivals(_arrivals(seed)),
           admission=10.0).run(until=3000.0)
    reports = [o for period in seen for o in period.values()]
    assert any(o.finished for o in reports)
    assert any(o.idle for o in reports)  # the task farm's idle workers
    reused = sum(a is q.get(k) for p, q in itertools.pairwise(seen) for k, a in p.items())
    assert reused > 0  # waiting and suspended applications' reports were kept
    broke = platform.apps["a1"], platform.apps["a7"]
    assert all(a.suspensions == 1 and a.outcome == "stopped-budget" for a in broke)
    plain = _Plain(backend)  # a backend without the one call is asked three times
    every = list(platform.apps.values())
    assert not isinstance(plain, Observes) and plain.calls == 0
    assert observe(plain, every) == observe(backend, every) and plain.calls >= 2 * len(every)


class _Plain:
    """The backend seam without ``observe``, counting its calls."""

    def __init__(self, backend: SimBackend) -> None:
        self.backend, self.calls = backend, 0

    def apply(self, plan: Any) -> Any:
        return self.backend.apply(plan)

    def metrics(self, app: str) -> Any:
        self.calls += 1
        return self.backend.metrics(app)

    def idle(self, app: str) -> frozenset[str]:
        self.calls += 1
        return self.backend.idle(app)

    def finished(self, app: str) -> bool:
        self.calls += 1
        return self.backend.finished(app)


def test_a_rigid_applications_metrics_are_new_metrics_record() -> None:
    for done, total, rate in ((0.0, 10.0, None), (3.5, 10.0, 0.25), (10.0, 10.0, 0.0)):
        ours, ref = _rigid_metrics(done, total, rate), new_metrics(
            work_done=done, work_total=total, progress_rate=rate, ideal_rate=1.0)
        assert ours == ref and list(vars(ours).items()) == list(vars(ref).items())
