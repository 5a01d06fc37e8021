"""The controllers read an application's least allocation as the plan's column gave it
(:func:`merkat.core.draft.keep_leasts`, :func:`~merkat.core.draft.kept_least`, read by
:func:`merkat.core.batch_slo.row_of`) instead of a ``min`` over its mappings, with the same
outcome as the ``min`` every time (``plan.LEASTS`` off): many-VM vertical-deadline runs,
plain and flaky (failed creates, resumes, migrations and suspends, withheld applications,
admission points), compared both ways row for row (every controller input), plan for plan
and backend state for backend state, every kept least checked ``repr``-equal to the ``min``
when read; and the kept values themselves on NaN, zeros of both signs, equal, subnormal and
negative values, another resource and another list (hypothesis)."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.backends.sim import SimBackend
from merkat.control.formulas import least_alloc_of
from merkat.core import batch_slo, batch_vd, draft
from merkat.core import plan as plan_mod
from merkat.core.backend import ApplyReport, Plan
from test_lazy_records import _flaky
from test_sim_lows import VD_RUNS, _state, same_run, vd_run


def _run(monkeypatch: pytest.MonkeyPatch, leasts: bool, seed: int, hosts: int, flaky: bool,
         lists: bool = True) -> tuple[str, list[str], dict[str, int]]:
    """A vertical-deadline run of many-VM jobs (``MIN_COLUMN_VMS`` 1: every one-column plan
    keeps its leasts; ``lists``: :class:`Plans` checks each run's list first, ``LISTS``);
    its digest, every controller row, plan and backend state in order, and counts (kept
    leasts read, calls whose runs held the last plan's very lists)."""
    monkeypatch.setattr(plan_mod, "LEASTS", leasts)
    monkeypatch.setattr(plan_mod, "LISTS", lists)
    monkeypatch.setattr(plan_mod, "MIN_COLUMN_VMS", 1)
    if flaky:
        monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply, keep=True))
    seen = {"hits": 0, "rows": 0, "lists": 0}
    out_: list[str] = []
    apply, advance, row_of, kept = (SimBackend.apply, SimBackend.advance, batch_slo.row_of,
                                    batch_slo.kept_least)

    def kept_least(allocs: list[dict[str, float]], r: str) -> float | None:
        low = kept(allocs, r)
        if low is not None:  # the kept least is the min, bit for bit, whenever read
            assert repr(low) == repr(least_alloc_of(allocs, r))
            seen["hits"] += 1
        return low

    def row(app: Any, k: Any, obs: Any) -> Any:
        got = row_of(app, k, obs)
        seen["rows"] += 1
        out_.append(repr(None if got is None else (app.spec.id, got[1:])))
        return got

    def applying(self: SimBackend, plan: Plan) -> ApplyReport:
        out_.append(repr(plan))
        report = apply(self, plan)
        out_.append(repr(report) + _state(self))
        return report

    def advancing(self: SimBackend, t0: float, t1: float) -> None:
        advance(self, t0, t1)
        out_.append(_state(self))

    call = plan_mod.Plans.__call__

    def planning(self: plan_mod.Plans, *args: Any) -> Plan:
        last, runs = self._last, args[2]
        if last is not None and len(runs) == len(last[5]) and all(
                map(operator.is_, [nx.allocs for nx, _, _ in runs], last[5])):
            # the very lists the last plan left: the very mappings it gave (LISTS' premise)
            joined = [a for nx, _, _ in runs for a in nx.allocs]
            assert len(joined) == len(last[2]) and all(map(operator.is_, joined, last[2]))
            seen["lists"] += 1
        return call(self, *args)

    monkeypatch.setattr(plan_mod.Plans, "__call__", planning)
    monkeypatch.setattr(batch_slo, "kept_least", kept_least)
    monkeypatch.setattr(batch_slo, "row_of", row)
    monkeypatch.setattr(batch_vd, "row_of", row)
    monkeypatch.setattr(SimBackend, "apply", applying)
    monkeypatch.setattr(SimBackend, "advance", advancing)
    digest = vd_run(monkeypatch, seed, hosts, seen)
    draft.keep_leasts((), "", ())  # (none left for the next test)
    return digest, out_, seen


@VD_RUNS
def test_the_kept_leasts_give_the_reference_run_row_for_row(
        monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int, flaky: bool) -> None:
    ref = _run(monkeypatch, False, seed, hosts, flaky)
    seen = same_run(_run(monkeypatch, True, seed, hosts, flaky), ref, flaky)
    assert seen["rows"] > 100 and seen["hits"] > 50 and ref[2]["hits"] == 0


@VD_RUNS
def test_the_plans_check_by_list_gives_the_reference_run_plan_for_plan(
        monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int, flaky: bool) -> None:
    """:class:`~merkat.core.plan.Plans` checking each run's list by identity first
    (``LISTS``) gives the run it gives checking every mapping (row, plan and backend state
    for state); whenever the runs hold the very lists the last plan left, they hold the
    very mappings it gave (asserted at every call)."""
    seen = same_run(_run(monkeypatch, True, seed, hosts, flaky),
                    _run(monkeypatch, True, seed, hosts, flaky, lists=False), flaky)
    assert seen["lists"] > 10


_VALUES = st.sampled_from([0.25, 0.5, 1.0, 0.0, -0.0, math.nan, 5e-324, -0.5, 1e-300, 3.0,
                           0.30000000000000004])


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(st.lists(_VALUES, min_size=1, max_size=6), max_size=6),
       probe=st.sampled_from(["cpu", "cpu", "memory"]))
def test_a_kept_least_is_the_min_of_its_list_or_none(spans: list[list[float]],
                                                     probe: str) -> None:
    """Each list's kept least (a plan's ``reduceat`` over its span) is ``repr``-equal to
    the ``min`` over its mappings, kept exactly where that holds for every span (no NaN,
    not a zero), for that resource and that very list (an equal copy has none); a new
    plan's leasts replace the last ones."""
    lists = [[{"cpu": v} for v in span] for span in spans]
    values = np.array([v for span in spans for v in span], dtype=float)
    starts = np.cumsum([0] + [len(s) for s in spans])[:-1]
    lows = np.minimum.reduceat(values, starts).tolist() if spans else []
    draft.keep_leasts(lists, "cpu", lows)
    for span, allocs in zip(spans, lists, strict=True):
        low = draft.kept_least(allocs, probe)
        want = min(span)
        keep = probe == "cpu" and not any(v != v for v in span) and want != 0.0
        assert (low is not None) == keep, span
        if low is not None:
            assert repr(low) == repr(least_alloc_of(allocs, "cpu")) == repr(want)
        assert draft.kept_least(list(allocs), probe) is None  # (another list)
    draft.keep_leasts((), "", ())
    assert all(draft.kept_least(allocs, "cpu") is None for allocs in lists)
