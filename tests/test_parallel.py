"""A market run cut where the cluster is empty and its pieces run on several processes gives
the outcome of one process, field by field (merkat.worlds.merkat.parallel)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.control.base import Controller
from merkat.control.types import Demand, Observation
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat import parallel as segments
from merkat.worlds.merkat.parallel import choose_cuts, cut_candidates, simulate_parallel
from merkat.worlds.merkat.trace import MarketConfig, MarketOutcome, simulate_market

POLICIES = ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial")


def bursts(n_bursts: int = 4, per_burst: int = 24, seed: int = 0) -> Workload:
    """Bursts of contending jobs a day apart: the cluster empties between bursts."""
    rng = np.random.default_rng(seed)
    submit = np.concatenate(
        [86400.0 * b + np.sort(rng.uniform(0, 3 * 3600, per_burst)) for b in range(n_bursts)]
    )
    n = len(submit)
    return Workload.from_arrays(
        submit=submit,
        run=rng.uniform(600, 4 * 3600, n),
        procs=rng.integers(1, 7, n),
        memory=rng.uniform(100, 900, n),
        deadline_factor=rng.uniform(1.2, 6, n),
    )


def same(a: MarketOutcome, b: MarketOutcome) -> None:
    """Every field but the wall time, bit for bit."""
    for f in ("start", "end", "finished", "met", "value", "work_done"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f
    assert a.policies == b.policies and a.reasons == b.reasons
    assert a.records == b.records
    assert a.counts == b.counts
    assert (a.suspended_apps, a.audit_ok) == (b.suspended_apps, b.audit_ok)
    assert a.max_cores_allocated == b.max_cores_allocated


CLUSTER = Cluster(6, 2, 2048.0)  # memory traded: migrations, suspensions, resumptions


PER_BURST = 12  # 4 bursts of 12: ~60 suspensions and ~1,000 migrations in one process (24
# a burst gave 20x the suspensions at 3x the cost: docs/testing.md)


@pytest.fixture(scope="module")
def mixed() -> tuple[Workload, tuple[str, ...], MarketOutcome]:
    w = bursts(per_burst=PER_BURST)
    names = tuple(POLICIES[k % 4] for k in range(len(w)))
    return w, names, simulate_market(w, CLUSTER, policies=names, seed=5)


@pytest.mark.parametrize(
    "cuts",
    [
        [12],  # exactly where the second burst starts: the cluster is empty there
        [15],  # inside a burst: piece 0 runs on to the next common idle point
        [12, 24, 36],  # four pieces, one per burst
        [5, 30],  # both inside bursts
        [45],  # inside the last burst: no later idle point, piece 0 does everything
    ],
)
def test_a_cut_run_gives_the_outcome_of_one_process(
    mixed: tuple[Workload, tuple[str, ...], MarketOutcome], cuts: list[int]
) -> None:
    w, names, one = mixed
    assert one.counts.get("suspend", 0) > 0 and one.counts.get("migration", 0) > 0
    par = simulate_parallel(w, CLUSTER, MarketConfig(), names, 5, None, len(cuts) + 1, cuts)
    same(one, par)


def test_workers_on_a_trace_sized_run_cut_automatically(monkeypatch: pytest.MonkeyPatch) -> None:
    w = bursts(n_bursts=3, per_burst=PER_BURST, seed=3)
    monkeypatch.setattr(segments, "MIN_JOBS_PER_PIECE", 10)
    steps: list[int] = []
    one = simulate_market(w, CLUSTER, seed=1)
    par = simulate_parallel(w, CLUSTER, seed=1, workers=3, progress=steps.append)
    same(one, par)
    assert [(p["first_job"], p["last_job"]) for p in par.pieces] == [(0, 11), (12, 23), (24, 35)]
    assert sum(steps) == len(w)  # the progress of every piece, each job once


def test_cut_candidates_are_where_an_unbounded_cluster_would_be_empty() -> None:
    submit = np.array([0.0, 100.0, 5000.0, 5100.0, 20000.0])
    run = np.array([1000.0, 3000.0, 200.0, 9000.0, 10.0])
    # busy until 1000, 3100 | 5200, 14100 | ...; two periods (600 s) to spare
    assert cut_candidates(submit, run, 300.0).tolist() == [2, 4]
    assert cut_candidates(submit, run, 1000.0).tolist() == [4]  # 3100 + 2000 > 5000


def test_cuts_balance_the_estimated_work_at_candidates() -> None:
    w = bursts(n_bursts=4, per_burst=10, seed=1)
    cuts = choose_cuts(w, 2, 300.0)
    assert len(cuts) == 1 and cuts[0] in cut_candidates(w.submit, w.run, 300.0)
    work = w.run / 300.0 + 1.0
    before = work[: cuts[0]].sum()
    assert before <= work.sum() / 2  # the last candidate before half the work
    assert choose_cuts(w, 1, 300.0) == []
    assert choose_cuts(w, 4, 300.0) == sorted(set(choose_cuts(w, 4, 300.0)))


def test_bad_cuts_and_workers_are_refused(
    mixed: tuple[Workload, tuple[str, ...], MarketOutcome],
) -> None:
    w, names, _ = mixed
    for cuts in ([0], [len(w)], [30, 20], [20, 20]):
        with pytest.raises(ValueError, match="cuts must be increasing"):
            simulate_parallel(w, CLUSTER, MarketConfig(), names, 0, None, 2, cuts)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        simulate_parallel(w, CLUSTER, policies=names, workers=0)


def test_a_failing_piece_is_reported_not_waited_for(
    mixed: tuple[Workload, tuple[str, ...], MarketOutcome], monkeypatch: pytest.MonkeyPatch
) -> None:
    w, names, _ = mixed
    real = segments.run_segment

    def broken(*args: Any, **kwargs: Any) -> Any:
        if args[4] > 0:  # start: a piece on its own process (forked: it sees this patch)
            raise ArithmeticError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(segments, "run_segment", broken)
    with pytest.raises(RuntimeError, match=r"piece 1 of the market run failed(.|\n)*injected"):
        simulate_parallel(w, CLUSTER, MarketConfig(), names, 0, None, 2, [15])


class _Probe(Controller):
    """Starts at once, keeps its bids, and notes how many past prices it was shown (derived
    from Controller, the class a compiled build lets interpreted code subclass)."""

    seen: ClassVar[list[int]] = []

    def decide(self, obs: Observation) -> Demand:
        type(self).seen.append(len(obs.price_history))
        return super().decide(obs)

    def reconfigure(self, obs: Observation) -> Demand:
        return self.keep(obs)


class _Historian(_Probe):
    reads_price_history = True
    seen: ClassVar[list[int]] = []


class _Plain(_Probe):
    seen: ClassVar[list[int]] = []


def test_only_controllers_that_declare_it_see_past_prices() -> None:
    hosts = Hosts(("h0",), np.array([[4.0, 4096.0]]))
    backend = SimBackend(trade_memory=False)
    platform = Platform(hosts, period=60.0, reserve={"cpu": 0.01})
    driver = Driver(platform, backend, Economy(MemoryLedger()))
    for k, cls in enumerate((_Historian, _Plain)):
        cls.seen = []
        spec = AppSpec(id=f"a{k}", policy="deadline-strict", size=1, vm_size={"cpu": 1.0},
                       submit_time=0.0, budget=100.0, deadline=1e9, trade=("cpu",))
        driver.submit(spec, RigidApp(vms=1, work_total=1e6, cpu=1.0), cls())
    for k in range(20):
        driver.step(60.0 * k)
    # the periods before the last one (that one is ``prices``), at most history_size - 1
    assert _Historian.seen == [min(max(k - 1, 0), platform.history_size - 1) for k in range(20)]
    assert _Plain.seen == [0] * 20
    assert not Controller.reads_price_history


def test_a_policy_that_reads_past_prices_is_not_cut(
    mixed: tuple[Workload, tuple[str, ...], MarketOutcome], monkeypatch: pytest.MonkeyPatch
) -> None:
    w, names, _ = mixed
    monkeypatch.setattr(segments, "POLICIES", {**dict(segments.POLICIES.items()), "deadline-strict": _Historian})
    assert segments.reads_history(names)
    with pytest.raises(ValueError, match="reads past prices"):
        simulate_parallel(w, CLUSTER, MarketConfig(), names, 0, None, 2, [24])
