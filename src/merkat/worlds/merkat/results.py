"""The per-job results of a market run (:class:`JobTable`): each job's start, end, value,
work done, payment and outcome, summarised from its application's record and its simulated
model when the application ends (:mod:`merkat.worlds.merkat.trace`), so that the run need
not keep either."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from merkat.backends.sim import RigidApp
from merkat.control.utility import utility
from merkat.core.model import App
from merkat.defaults import MICRO
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.moldable import MoldableApp


class JobTable:
    """The per-job results of a run's jobs from ``first`` on (one row per job of the
    workload, filled when its application ends): what :class:`~merkat.worlds.merkat.trace.MarketOutcome` reports of each
    job, computed from its application's record and model exactly as at the end of the run
    (the record and the model do not change once the application has ended)."""

    def __init__(self, workload: Workload, names: tuple[str, ...], first: int) -> None:
        self.w, self.names, self.first = workload, names, first
        m = len(workload) - first
        self.start = np.full(m, np.nan)
        self.end = np.full(m, np.nan)
        self.finished = np.zeros(m, dtype=np.bool_)
        self.met = np.zeros(m, dtype=np.bool_)
        self.value = np.zeros(m)
        self.work = np.zeros(m)
        self.suspended = np.zeros(m, dtype=np.bool_)
        self.paid = np.zeros(m)
        self.reasons: list[str] = [""] * m
        self.outcomes: list[str] = [""] * m

    def put(self, k: int, app: App, model: Any) -> None:
        """Job ``k``'s row from its application ``app`` and its backend ``model``."""
        assert isinstance(model, (RigidApp, MoldableApp))
        w, x = self.w, k - self.first
        start = app.start_time if app.start_time is not None else math.nan
        done = model.finish_time is not None
        end = model.finish_time if done else (app.end_time if app.end_time is not None
                                              else math.nan)
        self.start[x] = start
        self.finished[x] = done
        self.end[x] = end
        met = self.met[x] = done and model.finish_time <= w.deadline[k] + 1e-9
        self.work[x] = model.work_done / model.work_total if model.work_total > 0 else 1.0
        self.value[x] = _value(self.names[k], w, k, self.start[x], self.end[x], done, self.work[x])
        self.suspended[x] = app.suspensions > 0
        self.paid[x] = app.spent / MICRO
        self.reasons[x] = app.reason
        self.outcomes[x] = _outcome(app, done, bool(met))

    def rows(self, lo: int, hi: int) -> dict[str, Any]:
        """Jobs ``lo`` to ``hi`` (:meth:`merkat.worlds.merkat.trace.Segment.jobs`)."""
        a, b = lo - self.first, hi - self.first
        return {
            "start": self.start[a:b].copy(), "end": self.end[a:b].copy(),
            "finished": self.finished[a:b].copy(), "met": self.met[a:b].copy(),
            "value": self.value[a:b].copy(), "work_done": self.work[a:b].copy(),
            "reasons": tuple(self.reasons[a:b]), "suspended": self.suspended[a:b].copy(),
            "paid": self.paid[a:b].copy(), "outcomes": tuple(self.outcomes[a:b]),
        }


def _outcome(app: App, done: bool, met: bool) -> str:
    """How a job ended: finished (on time), late (finished after its deadline),
    stopped-deadline (its controller gave up), stopped-budget, never-started."""
    if done:
        return "finished" if met else "late"
    if app.outcome == "stopped-budget":
        return "stopped-budget"
    if app.start_time is None:
        return "never-started"
    return "stopped-deadline"


def _value(
    policy: str, w: Workload, k: int, start: float, end: float, done: bool, work_fraction: float
) -> float:
    """The job's utility (SLO paper Table 1; Themis value for deadline-strict)."""
    budget = float(w.budget[k])
    submit = float(w.submit[k])
    if math.isnan(end):
        end = math.inf
    kind = (
        policy
        if policy
        in ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial")
        else "deadline-strict"
    )
    return utility(
        kind,
        budget=budget,
        t_exec=(end - submit) if done else math.inf,
        t_deadline=float(w.deadline[k]) - submit,
        t_ideal=float(w.run[k]),
        work_done=work_fraction,
        work_total=1.0,
    )
