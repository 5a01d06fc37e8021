"""The simulated backend's quiet rigid applications join the kept-pace pass in the advance
that finds them quiet (:func:`merkat.backends.sim_pace.join_quiet`, ``sim_pace.FOLD``)
instead of one ``_advance_rigid`` call each: every model's progress, every kept pace and
every VM after every apply and advance is the reference's (``FOLD`` off), in many-VM
vertical-deadline runs (plain and flaky: suspends, resumes, migrations, boots, failed
operations, admission points) and in trace runs (numpy pass and loop); one advance from
random states (hypothesis: ready, migrating, quiet or not, kept least or not, memory traded
or not, NaN, zeros of both signs, negative, subnormal and above-full allocations, finishing
in the interval) gives the same bits both ways."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.backends import sim, sim_pace
from merkat.backends.sim import _VM, RigidApp, SimBackend
from merkat.core import plan
from merkat.core.backend import ApplyReport, Plan
from test_lazy_records import _flaky
from test_sim_lows import VD_RUNS, same_run, vd_run
from test_sim_pace import Checked
from test_sim_pace import _run as trace_run


def _state(b: SimBackend) -> str:
    """Every model's progress, the kept paces, the unfinished live applications, the quiet
    times and the VMs (a finished application the reference advanced on its own stays in
    its live set until the next advance: not state that changes anything)."""
    return repr(([(a, m.work_done, m.finish_time, m.last_rate) for a, m in b.apps.items()],
                 sorted(b._pace.items()),
                 sorted(a for a in b._live if b.apps[a].finish_time is None),
                 sorted(b._quiet.items()),
                 sorted((v, vm.host, vm.alloc, vm.ready_at, vm.migrating_until)
                        for v, vm in b.vms.items())))


def _counting(seen: dict[str, int]) -> Any:
    """``join_quiet`` counting the applications it moved into the pass."""
    join = sim_pace.join_quiet

    def counted(live: dict[str, None], *args: Any) -> None:
        before = len(live)
        join(live, *args)
        seen["joined"] += before - len(live)
    return counted


def _vd(monkeypatch: pytest.MonkeyPatch, fold: bool, seed: int, hosts: int, flaky: bool,
        changed: bool = True) -> tuple[str, list[str], dict[str, int]]:
    """A vertical-deadline run of many-VM jobs (``test_sim_lows.vd_run``) with ``fold``
    (and ``sim.CHANGED`` and ``plan.CHANGED`` as ``changed``): its digest, the backend's
    state after every apply and advance, and counts."""
    monkeypatch.setattr(sim_pace, "FOLD", fold)
    monkeypatch.setattr(sim, "CHANGED", changed)
    monkeypatch.setattr(plan, "CHANGED", changed)
    seen = {"joined": 0}
    monkeypatch.setattr(sim, "join_quiet", _counting(seen))
    if flaky:
        monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply, keep=True))
    states: list[str] = []
    apply, advance = SimBackend.apply, SimBackend.advance

    def applying(self: SimBackend, plan: Plan) -> ApplyReport:
        out = apply(self, plan)
        states.append(_state(self))
        return out

    def advancing(self: SimBackend, t0: float, t1: float) -> None:
        advance(self, t0, t1)
        states.append(_state(self))

    monkeypatch.setattr(SimBackend, "apply", applying)
    monkeypatch.setattr(SimBackend, "advance", advancing)
    return vd_run(monkeypatch, seed, hosts, seen), states, seen


@VD_RUNS
def test_the_quiet_applications_in_the_pass_give_the_reference_run_state_for_state(
        monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int, flaky: bool) -> None:
    seen = same_run(_vd(monkeypatch, True, seed, hosts, flaky),
                    _vd(monkeypatch, False, seed, hosts, flaky), flaky)
    assert seen["joined"] > 100  # the fold was taken


@pytest.mark.parametrize("min_vector", [1, 10**9])  # the numpy pass, the loop
@pytest.mark.parametrize("seed", range(4))
def test_a_trace_run_is_the_same_both_ways(seed: int, min_vector: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_pace, "MIN_VECTOR", min_vector)
    seen = {"joined": 0}
    monkeypatch.setattr(sim, "join_quiet", _counting(seen))
    folded = Checked()
    got = trace_run(folded, seed)
    monkeypatch.setattr(sim_pace, "FOLD", False)
    reference = Checked()
    assert repr(got) == repr(trace_run(reference, seed))  # (the sign of a zero too)
    assert folded.counts == reference.counts
    assert seen["joined"] > 0


_ALLOC = st.sampled_from([0.25, 0.5, 1.0, 2.0, 0.0, -0.0, math.nan, -0.5, 5e-324, 0.75,
                          1e-300, None])
_VMS = st.lists(st.tuples(_ALLOC, st.sampled_from([0.0, 0.0, 300.0, 600.0, 700.0]),
                          st.sampled_from([-math.inf, -math.inf, 500.0, 600.0, 650.0])),
                min_size=0, max_size=4)
_APP = st.tuples(_VMS, st.integers(0, 4),  # its VMs, its task count
                 st.sampled_from([1.0, 2.0, 0.5, 0.0]),  # full CPU
                 st.sampled_from([0.0, 256.0]),  # memory
                 st.sampled_from([0.0, 50.0, 299.0, 1e6]),  # work done (of 300)
                 st.sampled_from(["none", "known", "later"]),  # its quiet time
                 st.booleans())  # its least CPU allocation kept (when it is the min)


@settings(max_examples=400, deadline=None)
@given(specs=st.lists(_APP, min_size=1, max_size=6), trade_memory=st.booleans(),
       min_vector=st.sampled_from([1, 10**9]))
def test_one_advance_from_random_states_is_the_same_both_ways(
        specs: list[tuple[Any, ...]], trade_memory: bool, min_vector: int) -> None:
    """Each application's models, kept paces and quiet times after ``advance(600, 900)``
    are ``repr``-equal with and without the fold."""
    t0, t1 = 600.0, 900.0

    def build() -> SimBackend:
        b = SimBackend(trade_memory=trade_memory)
        for k, (vms, tasks, cpu, memory, done, quiet, low) in enumerate(specs):
            app = f"a{k}"
            b.add_app(app, RigidApp(vms=tasks, work_total=300.0, cpu=cpu, memory=memory,
                                    work_done=min(done, 300.0)))
            for j, (a, ready, until) in enumerate(vms):
                alloc = {} if a is None else {"cpu": a, "memory": 128.0}
                b._put(f"{app}/vm{j}", _VM(app, 0, alloc, ready, until))
            if quiet == "known":
                b._quiet[app] = t0
            elif quiet == "later":
                b._quiet[app] = t1
            else:
                b._quiet.pop(app, None)
            if low and vms:
                b._lows[app] = min([vm.alloc.get("cpu", 0.0)
                                    for vm in b._by_app[app].values()])
        return b

    out = []
    for fold in (True, False):
        b = build()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sim_pace, "MIN_VECTOR", min_vector)
            mp.setattr(sim_pace, "FOLD", fold)
            try:
                b.advance(t0, t1)
            except ValueError as exc:  # (a task-less application with no VM: a min of
                out.append(repr(exc))  # nothing, both ways)
                continue
        out.append(repr(([(a, m.work_done, m.finish_time, m.last_rate)
                          for a, m in b.apps.items()], sorted(b._pace.items()),
                         sorted(b._quiet.items()))))
    assert out[0] == out[1]
