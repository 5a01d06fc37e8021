"""The schedulers a trace run can use, in one registry by name: the batch baselines and the
market (``merkat sim run --scheduler NAME``, the experiments' runs, ``merkat bench sim``).

Contract of an entry (:class:`TraceScheduler`): ``name``; ``summary`` (one line, for help and
errors); ``market`` (whether it takes the market's options: ``--policy``, ``--policy-param``,
``--market``, ``--period``, ``--economy``...; the batch schedulers take none); and
``run(workload, cluster, opts, progress) -> TraceOutcome``: the jobs' start and end times, the
extra ``jobs.csv`` columns it computes itself (a market run's ``met``, ``value``, ``outcome``,
``paid``) and its summary. ``SCHEDULERS.register(entry)`` adds one (a
:class:`merkat.registry.Registry`). This module imports nothing heavy: an entry imports its
engine when it runs, so the CLI can list the names at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from merkat.registry import Registry

if TYPE_CHECKING:
    from merkat.workload.cluster import Cluster
    from merkat.workload.jobs import Workload
    from merkat.worlds.batch.engine import Schedule
    from merkat.worlds.merkat.options import RunOptions

OUTCOMES = ("finished", "late", "stopped-deadline", "stopped-budget", "never-started")
"""How a market run's job ends (``jobs.csv``'s ``outcome``; ``summary.json``'s ``outcomes``
counts them): finished by its deadline, finished late, stopped at its deadline by its
controller, stopped out of budget, never started."""

@dataclass(frozen=True)
class TraceOutcome:
    """What a scheduler made of a trace's jobs (see the module docstring)."""

    schedule: Schedule
    summary: dict[str, Any]
    columns: dict[str, Any] = field(default_factory=dict)


class TraceScheduler(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def market(self) -> bool: ...

    def run(self, workload: Workload, cluster: Cluster, opts: RunOptions,
            progress: Callable[[int], None] | None) -> TraceOutcome: ...


SCHEDULERS: Registry[TraceScheduler] = Registry("scheduler")
"""Every scheduler of a trace run, by name (registration order: the batch baselines, then the
market)."""


@dataclass(frozen=True)
class Batch:
    """A batch baseline of :mod:`merkat.worlds.batch` (the fast single-pool loop when it
    applies: :func:`merkat.worlds.batch.baselines.schedule`)."""

    name: str
    summary: str
    market: bool = False

    def run(self, workload: Workload, cluster: Cluster, opts: RunOptions,
            progress: Callable[[int], None] | None) -> TraceOutcome:
        from merkat.sim.metrics import summarize
        from merkat.worlds.batch.baselines import schedule

        sched = schedule(workload, cluster, self.name, progress, seed=opts.seed)
        summary = summarize(workload, sched, cluster)
        if self.name == "maui":
            from merkat.worlds.batch.maui import ESTIMATES

            given = workload.estimated
            summary["estimates"] = {
                "requested": 0 if given is None else int(given.sum()),
                "modelled": len(workload) - (0 if given is None else int(given.sum())),
                "model": f"Tsafrir-like popular values >= run (seed stream {ESTIMATES!r})"}
        return TraceOutcome(sched, summary)


@dataclass(frozen=True)
class Market:
    """The market (:mod:`merkat.worlds.merkat.trace`): controllers, the mechanism, the bank."""

    name: str = "market"
    summary: str = "the market: controllers bid for cores every period"
    market: bool = True

    def run(self, workload: Workload, cluster: Cluster, opts: RunOptions,
            progress: Callable[[int], None] | None) -> TraceOutcome:
        from dataclasses import replace

        from merkat.market.types import balancer_params
        from merkat.worlds.batch.engine import Schedule
        from merkat.worlds.merkat.parallel import simulate_parallel
        from merkat.worlds.merkat.trace import summarize_market

        cfg = replace(opts.market_config, budget_base=opts.slo.budget_base,
                      budget_renewal=opts.slo.budget_renewal,
                      balance=balancer_params(opts.balancer))
        out = simulate_parallel(workload, cluster, cfg, seed=opts.seed, progress=progress,
                                workers=opts.workers)
        summary = summarize_market(workload, out, cluster)
        summary["policy"] = cfg.policy
        summary["market"] = cfg.market
        summary["balancer"] = opts.balancer
        if cfg.moldable:
            from merkat.worlds.merkat.moldable import MOLD_MAX

            summary["moldable"] = {"speedup": "amdahl", "serial_fraction": cfg.serial_fraction,
                                   "max_vms": f"{MOLD_MAX} x procs"}
        counts = Counter(out.outcomes)
        summary["outcomes"] = {o: counts.get(o, 0) for o in OUTCOMES}
        if cfg.policy_params:
            summary["policy_params"] = dict(cfg.policy_params)
        summary["period_s"] = cfg.period
        summary["admission_s"] = cfg.admission
        summary["workers"] = opts.workers
        summary["pieces"] = list(out.pieces)  # how --workers cut the run (timing: varies)
        return TraceOutcome(Schedule(start=out.start, end=out.end), summary,
                            {"met": out.met, "value": out.value, "outcome": out.outcomes,
                             "paid": out.paid})


for _name, _summary in (("fcfs", "first come, first served"),
                        ("edf", "earliest deadline first (non-preemptive)"),
                        ("easy", "EASY backfilling"),
                        ("conservative", "conservative backfilling"),
                        ("maui", "Maui-like: FCFS by queue time, EASY backfilling on users' "
                                 "inexact wall-time estimates")):
    SCHEDULERS.register(Batch(_name, _summary))
SCHEDULERS.register(Market())


def is_market(name: str) -> bool:
    """Whether the scheduler ``name`` is a market (takes the market's options)."""
    return name in SCHEDULERS and SCHEDULERS.get(name).market
