"""How much a run was worth to its user: SLO paper Table 1, Merkat's satisfaction, Themis' value.

Times are measured from the application's submission: ``t_exec`` is submission to finish
(``math.inf`` when it never finished), ``t_deadline`` submission to deadline, ``t_ideal`` the
run time on a dedicated infrastructure. ``budget`` is B, the application's budget (the SLO
paper: per period and per task).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from merkat.control.slo import SLOKind


def deadline_strict(budget: float, t_exec: float, t_deadline: float) -> float:
    """B if t_exec <= t_deadline, else 0 (Table 1, row 1)."""
    return budget if t_exec <= t_deadline else 0.0


def deadline_partial(budget: float, t_exec: float, t_deadline: float, work_done: float,
                     work_total: float) -> float:
    """B if on time, else B·work_done/work_total (Table 1, row 2; work done by the stop)."""
    if t_exec <= t_deadline:
        return budget
    if work_total <= 0:
        return 0.0
    return budget * min(1.0, max(0.0, work_done / work_total))


def performance_strict(budget: float, t_exec: float, t_deadline: float,
                       t_ideal: float) -> float:
    """max(0, B·(t_deadline - t_exec)/(t_deadline - t_ideal)) (Table 1, row 3).

    Also at most B (t_exec cannot beat t_ideal). When t_deadline == t_ideal the ratio is
    undefined: B if t_exec <= t_ideal, else 0.
    """
    span = t_deadline - t_ideal
    if span <= 0:
        return budget if t_exec <= t_ideal else 0.0
    if math.isinf(t_exec):
        return 0.0
    return min(budget, max(0.0, budget * (t_deadline - t_exec) / span))


def performance_partial(budget: float, t_exec: float, t_deadline: float, t_ideal: float,
                        work_done: float, work_total: float) -> float:
    """The mean of deadline-partial and performance-strict (the SLO paper omits the row;
    docs/architecture.md decides)."""
    return (deadline_partial(budget, t_exec, t_deadline, work_done, work_total)
            + performance_strict(budget, t_exec, t_deadline, t_ideal)) / 2.0


def utility(kind: SLOKind | str, budget: float, t_exec: float, t_deadline: float,
            t_ideal: float, work_done: float, work_total: float) -> float:
    """The Table 1 utility of ``kind`` (an :class:`SLOKind` or its name)."""
    k = SLOKind(kind)
    funcs: dict[SLOKind, Callable[[], float]] = {
        SLOKind.DEADLINE_STRICT: lambda: deadline_strict(budget, t_exec, t_deadline),
        SLOKind.DEADLINE_PARTIAL: lambda: deadline_partial(budget, t_exec, t_deadline,
                                                           work_done, work_total),
        SLOKind.PERFORMANCE_STRICT: lambda: performance_strict(budget, t_exec, t_deadline,
                                                               t_ideal),
        SLOKind.PERFORMANCE_PARTIAL: lambda: performance_partial(budget, t_exec, t_deadline,
                                                                 t_ideal, work_done,
                                                                 work_total),
    }
    return funcs[k]()


def merkat_satisfaction(budget: float, on_time: bool) -> float:
    """+B when the deadline is met, -B otherwise (Merkat §5.4.3)."""
    return budget if on_time else -budget


def themis_value(budget: float, on_time: bool) -> float:
    """B when the deadline is met, 0 otherwise (Themis §IV-C)."""
    return budget if on_time else 0.0


def efficiency(market_value: float, baseline_value: float) -> float:
    """Total value of the market run / total value of the baseline run (Themis §IV-C).

    A zero baseline gives 1.0 when the market's value is zero too, infinity when it is
    positive (and -infinity when negative, possible with Merkat's satisfaction).
    """
    if baseline_value == 0:
        if market_value == 0:
            return 1.0
        return math.copysign(math.inf, market_value)
    return market_value / baseline_value

