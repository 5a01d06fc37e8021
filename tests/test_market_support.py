"""Helpers for the market-side cache tests (no test here): a short random run of
applications arriving between periods on six 2-core hosts, admission every 10 s."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.core.model import AppSpec
from merkat.core.period import Platform
from merkat.market import Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy

PERIOD = 60.0


def random_run(seed: int, *, apps: int, over: int, periods: int, work: float,
               best_effort: Callable[[int, np.random.Generator], bool]) -> Platform:
    """Run ``apps`` applications (1-3 one-core VMs each, arriving uniformly over the first
    ``over`` periods; best-effort where ``best_effort(k, rng)``, else deadline-strict, which
    rebids every period) for ``periods`` periods of 60 s; returns the platform."""
    rng = np.random.default_rng(seed)
    items = []
    for k, t in enumerate(sorted(rng.uniform(0.0, over * PERIOD, apps))):
        size = int(rng.integers(1, 4))
        policy = "best-effort" if best_effort(k, rng) else "deadline-strict"
        spec = AppSpec(f"a{k}", policy, size, {"cpu": 1.0}, float(t),
                       float(rng.uniform(2.0, 60.0)), deadline=float(t + rng.uniform(60, 900)),
                       trade=("cpu",), owner="alice")
        items.append(Arrival(spec.submit_time, spec,
                             RigidApp(vms=size, work_total=float(rng.uniform(30, work)))))
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(6)), np.array([[2.0, 4096.0]] * 6)),
                        period=PERIOD, reserve={"cpu": 0.01})
    driver = Driver(platform, SimBackend(trade_memory=False, boot_s=0.0),
                    Economy(MemoryLedger()), ListArrivals(items), admission=10.0)
    driver.run(until=periods * PERIOD)
    return platform
