"""The one period loop (``merkat.runtime.loop.loop_periods``, issue 27): the worlds that run on
it (the driver, Tycoon's market) see the same clock, arrivals, idle jumps and stops."""

from __future__ import annotations

from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.clock import VirtualClock
from merkat.runtime.loop import loop_periods
from merkat.worlds.tycoon.simulator import TycoonConfig, TycoonJob, simulate


class World:
    """A world whose arrivals each keep it busy for ``length`` periods; it records what the
    loop asked of it."""

    def __init__(self, times: list[float], period: float, skip_idle: bool, length: int = 2,
                 stop_at: float | None = None) -> None:
        self.arrivals = ListArrivals([Arrival(t) for t in times])
        self.clock = VirtualClock()
        self.skip_idle = skip_idle
        self.period = period
        self.length = length
        self.stop_at = stop_at
        self.left = 0
        self.log: list[tuple[str, float]] = []

    def busy(self) -> bool:
        return self.left > 0

    def idle(self, t: float) -> bool:
        return False

    def skip(self, t: float, arrival: float) -> float:
        return max(t, -(-arrival // self.period) * self.period)  # the next boundary

    def admit_due(self, t: float) -> None:
        for _ in self.arrivals.due(t):
            self.left += self.length
            self.log.append(("admit", t))

    def period_at(self, t: float) -> bool:
        if t == self.stop_at:
            return False
        self.log.append(("period", t))
        self.left = max(0, self.left - 1)
        return True

    def after(self, t0: float, t1: float) -> None:
        assert self.clock.now() == t0 and t1 > t0


def test_the_loop_jumps_over_idle_time_to_the_next_arrivals_boundary() -> None:
    w = World([0.0, 250.0], period=60.0, skip_idle=True)
    end = loop_periods(w)
    assert w.log == [("admit", 0.0), ("period", 0.0), ("period", 60.0),
                     ("admit", 300.0), ("period", 300.0), ("period", 360.0)]
    assert end == 420.0 and w.clock.now() == 360.0


def test_without_skip_idle_every_period_runs_and_time_never_drifts() -> None:
    w = World([0.0, 0.55], period=0.1, skip_idle=False, length=1)
    loop_periods(w)
    periods = [t for kind, t in w.log if kind == "period"]
    # start + k × period, not a running sum (0.1 added six times is 0.6000000000000001)
    assert periods == [k * 0.1 for k in range(7)]
    assert ("admit", 6 * 0.1) in w.log


def test_a_period_that_says_stop_ends_the_run_at_its_time() -> None:
    w = World([0.0], period=10.0, skip_idle=True, length=5, stop_at=30.0)
    assert loop_periods(w, until=1000.0) == 30.0
    assert [t for kind, t in w.log if kind == "period"] == [0.0, 10.0, 20.0]
    w = World([0.0], period=10.0, skip_idle=True, length=5)
    assert loop_periods(w, until=25.0) == 30.0  # the last period starts before until


def test_tycoon_runs_on_the_loop_one_interval_per_period_cut_at_until() -> None:
    cfg = TycoonConfig(hosts=2, reserve=1e-4, interval_s=0.7, until_s=7.0)
    res = simulate(cfg, [TycoonJob("a", 10.0, 3600.0, subjobs=2, work_s=1e6),
                         TycoonJob("b", 10.0, 3600.0, launch_s=2.0, subjobs=1, work_s=1e6)])
    assert res.intervals == 10 and res.price_times.tolist() == [k * 0.7 for k in range(10)]
    # b arrives at the first interval at or after its launch time (2.1 s): a alone before
    p = res.prices
    assert (p[0] == p[1]).all() and (p[1] == p[2]).all() and (p[2] != p[3]).all()
    assert [j["complete"] for j in res.jobs] == [False, False] and res.audit_ok
