"""The simulated backend takes each rigid application's least CPU allocation from the plan's
column (:class:`~merkat.core.backend.AllocColumn`, :func:`merkat.backends.sim_pace.least_cpu`)
instead of a ``min`` over its VMs' mappings at every advance: the kept least is that ``min``,
bit for bit, whenever it is read (before every advance of many-VM runs with migrations,
suspends, resumes, boots, ends, admission points and failed operations), the backend's state
after every apply and advance is the reference's (``sim_pace.LOWS`` off: the ``min`` every
time), and so is the run's outcome; ``least_cpu`` itself keeps exactly the spans whose ``min``
it is (hypothesis: NaN, zeros of both signs, equal, subnormal and negative values, groups of
another size)."""

from __future__ import annotations

import dataclasses
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.backends import sim_pace
from merkat.backends.sim import SimBackend
from merkat.core import plan as plan_mod
from merkat.core.backend import AllocColumn, ApplyReport, Listed, Plan
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market
from test_lazy_records import _flaky, run_digest


def _jobs(seed: int, n: int = 40) -> Workload:
    """``n`` jobs of 1-12 VMs over 20,000 s."""
    rng = np.random.default_rng(seed)
    return Workload.from_arrays(submit=np.sort(rng.integers(0, 20_000, n)).tolist(),
                                run=rng.integers(600, 6_000, n).tolist(),
                                procs=rng.integers(1, 13, n).tolist(),
                                deadline_factor=rng.uniform(1.2, 4.0, n).tolist())


def _state(b: SimBackend) -> str:
    """The backend's state: every model's progress, the kept paces, the live set."""
    return repr(([(a, m.work_done, m.finish_time, m.last_rate) for a, m in b.apps.items()],
                 sorted(b._pace.items()), sorted(b._live), sorted(b._quiet.items()),
                 sorted((v, vm.host, vm.alloc, vm.ready_at, vm.migrating_until)
                        for v, vm in b.vms.items())))


def _run(monkeypatch: pytest.MonkeyPatch, lows: bool, seed: int, hosts: int, flaky: bool,
         handed: bool = True) -> tuple[str, list[str], dict[str, int]]:
    """A vertical-deadline run of many-VM jobs on ``hosts`` one-core hosts; with ``lows``
    every kept least is checked against the ``min`` before every advance (``handed``: the
    plan's least values read, :data:`sim_pace.HANDED`). Returns the outcome's digest, the
    backend's state after every apply and advance, and counts."""
    monkeypatch.setattr(sim_pace, "LOWS", lows)
    monkeypatch.setattr(sim_pace, "HANDED", handed)
    monkeypatch.setattr(plan_mod, "LISTED", lows)  # (the plan's allocations as its lists)
    monkeypatch.setattr(plan_mod, "MIN_COLUMN_VMS", 1)  # (every one-column plan carries it)
    if flaky:
        monkeypatch.setattr(SimBackend, "apply", _flaky(SimBackend.apply, keep=True))
    states: list[str] = []
    seen = {"checked": 0, "columns": 0, "listed": 0, "handed": 0}
    apply, advance = SimBackend.apply, SimBackend.advance

    def applying(self: SimBackend, plan: Plan) -> ApplyReport:
        seen["columns"] += plan.column is not None
        seen["handed"] += plan.column is not None and plan.column.lows is not None
        seen["listed"] += type(plan.allocations) is Listed
        out = apply(self, plan)
        states.append(_state(self))
        return out

    def advancing(self: SimBackend, t0: float, t1: float) -> None:
        for app_id, low in self._lows.items():  # what _rigid_pace would read
            group = self._by_app[app_id].values()
            assert repr(low) == repr(min([vm.alloc.get("cpu", 0.0) for vm in group]))
            seen["checked"] += 1
        advance(self, t0, t1)
        states.append(_state(self))

    monkeypatch.setattr(SimBackend, "apply", applying)
    monkeypatch.setattr(SimBackend, "advance", advancing)
    return vd_run(monkeypatch, seed, hosts, seen), states, seen


def vd_run(monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int, seen: dict[str, int]
           ) -> str:
    """Run :func:`_jobs` (``seed``) under vertical-deadline on ``hosts`` one-core hosts with
    what ``monkeypatch`` set, then undo it; the outcome's digest (``seen`` counts the
    kinds of change, and ``failed`` the failed operations)."""
    out = simulate_market(_jobs(seed), Cluster(hosts, 1, None),
                          MarketConfig(period=300.0, policy="vertical-deadline"))
    monkeypatch.undo()
    digest = run_digest(out, seen)
    seen["failed"] = sum(len(r.failed) for r in out.records)
    return digest


VD_RUNS = pytest.mark.parametrize(("seed", "hosts", "flaky"),
                                  [(3, 6, False), (5, 12, False), (3, 6, True), (7, 8, True)])
"""The many-VM runs compared both ways: two plain, two flaky."""


def same_run(mine: tuple[str, list[str], dict[str, int]],
             ref: tuple[str, list[str], dict[str, int]], flaky: bool) -> dict[str, int]:
    """Assert two runs (digest, what was recorded in order, counts) the same, entry for
    entry, and that ``mine`` went through every kind of change (and failures when
    ``flaky``); its counts."""
    (digest, got, seen), (ref_digest, want, _) = mine, ref
    assert digest == ref_digest
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, k
    assert seen["suspended"] > 0 and seen["resumed"] > 0 and seen["migrations"] > 0
    assert not flaky or seen["failed"] > 10
    return seen


@VD_RUNS
def test_the_kept_least_allocations_give_the_reference_run_state_for_state(
        monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int, flaky: bool) -> None:
    seen = same_run(_run(monkeypatch, True, seed, hosts, flaky),
                    _run(monkeypatch, False, seed, hosts, flaky), flaky)
    # the kept least values were read
    assert seen["columns"] > 10 and seen["checked"] > 100 and seen["listed"] > 10


@VD_RUNS
def test_the_plans_handed_least_values_give_the_backends_own_state_for_state(
        monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int, flaky: bool) -> None:
    """The backend reading the least values the plan handed over in its column
    (``AllocColumn.lows``) gives the run it gives taking them itself (``HANDED`` off)."""
    seen = same_run(_run(monkeypatch, True, seed, hosts, flaky),
                    _run(monkeypatch, True, seed, hosts, flaky, handed=False), flaky)
    assert seen["handed"] > 10 and seen["checked"] > 100


_VALUES = st.sampled_from([0.25, 0.5, 1.0, 2.0, 0.0, -0.0, float("nan"), 5e-324, -0.5,
                           0.75, 1e-300, 3.0])


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(st.tuples(st.lists(_VALUES, min_size=0, max_size=6),
                                st.integers(-1, 1)), min_size=1, max_size=8),
       resource=st.sampled_from(["cpu", "cpu", "memory"]), listed_off=st.sampled_from([0, 0, 1]))
def test_least_cpu_keeps_exactly_the_spans_whose_min_it_is(
        spans: list[tuple[list[float], int]], resource: str, listed_off: int) -> None:
    """Each span's application holds ``len(span) + off`` VMs in the backend (``off`` 0: the
    span is all of them). A kept least is ``repr``-equal to Python's ``min`` of the span;
    one is kept exactly where the column is of CPU, fits the plan's listed VMs, no span is
    empty, the group is the span's size, the span holds no NaN and its ``min`` is no zero."""
    values = [v for span, _ in spans for v in span]
    sizes = [len(span) for span, _ in spans]
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    apps = [f"a{k}" for k in range(len(spans))]
    groups = {a: [None] * max(0, len(span) + off)
              for a, (span, off) in zip(apps, spans, strict=True)}
    column = AllocColumn(resource, np.array(values, dtype=float), apps, starts, sizes)
    out: dict[str, float] = {}
    sim_pace.least_cpu(column, len(values) + listed_off, groups, out)
    if 0 not in sizes:  # the plan's least values handed over: the same kept, bit for bit
        handed = dataclasses.replace(column, lows=np.minimum.reduceat(
            column.values, starts).tolist())
        also: dict[str, float] = {}
        sim_pace.least_cpu(handed, len(values) + listed_off, groups, also)
        assert repr(also) == repr(out)
    fits = resource == "cpu" and listed_off == 0 and 0 not in sizes
    for a, (span, off) in zip(apps, spans, strict=True):
        want = min(span) if span else None
        nan = any(v != v for v in span)  # (numpy's minimum keeps it: left to ``min``)
        keep = fits and off == 0 and want is not None and not nan and want != 0.0
        assert (a in out) == keep, (a, span, off)
        if keep:
            assert repr(out[a]) == repr(want)


def test_a_column_that_is_not_every_vm_of_an_application_keeps_no_least(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan whose column lists two of an application's three VMs (the third holds an
    older, lower mapping: a destroy that failed, say) keeps no least for it; the VMs' own
    ``min`` paces it, as in the reference. A column of all three keeps theirs."""
    from merkat.backends.sim import RigidApp
    from merkat.core.backend import VMPlacement

    def plan(t: float, values: list[float], create: bool) -> Plan:
        ids = [f"a/vm{k}" for k in range(len(values))]
        return Plan(t, 60.0, create=tuple(VMPlacement(v, "a", 0) for v in ids) if create
                    else (), allocations={v: {"cpu": x} for v, x in zip(ids, values,
                                                                        strict=True)},
                    column=AllocColumn("cpu", np.array(values), ["a"], [0], [len(values)]))

    def run(lows: bool) -> tuple[list[str], SimBackend]:
        monkeypatch.setattr(sim_pace, "LOWS", lows)
        b = SimBackend(boot_s=0.0, trade_memory=False)
        b.add_app("a", RigidApp(vms=3, work_total=1e6))
        out = []
        for t, p in ((0.0, plan(0.0, [0.5, 0.25, 0.125], True)), (60.0, None),
                     (120.0, plan(120.0, [0.5, 0.75], False)), (180.0, None),
                     (240.0, plan(240.0, [0.5, 0.75, 0.625], False)), (300.0, None)):
            if p is not None:
                b.apply(p)
                out.append(repr(sorted(b._lows.items())))
            b.advance(t, t + 60.0)
            out.append(_state(b))
        return out, b

    got, b = run(True)
    want, _ = run(False)
    lows = [s for s in got if s.startswith("[(") or s == "[]"]
    assert lows == ["[('a', 0.125)]", "[]", "[('a', 0.5)]"]  # the second: not every VM
    assert [s for s in got if s not in lows] == [s for s in want if s != "[]"]
    assert b._lows == {"a": 0.5}


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from([f"v{k}" for k in range(12)]),
                                st.sampled_from([0.25, 0.5, -0.0, float("nan")])),
                      max_size=10, unique_by=lambda p: p[0]),
       probe=st.sampled_from(["v0", "v3", "v11", "nope"]))
def test_listed_allocations_read_as_the_dict(pairs: list[tuple[str, float]],
                                             probe: str) -> None:
    """:class:`~merkat.core.backend.Listed` reads as ``dict(zip(ids, allocs))``: look-ups,
    membership, size, order, items, ``==`` both ways, ``repr``; the plan holding it prints
    and compares as the plan holding the dict."""
    ids = [v for v, _ in pairs]
    allocs = [{"cpu": a} for _, a in pairs]
    want = dict(zip(ids, allocs, strict=True))
    got = Listed(ids, allocs)
    assert got._dict is None  # (nothing built yet)
    assert len(got) == len(want) and list(got) == list(want) and repr(got) == repr(want)
    assert list(got.items()) == list(want.items()) and list(got.keys()) == list(want.keys())
    assert all(map(operator.is_, got.values(), want.values()))
    assert (probe in got) == (probe in want) and got.get(probe) is want.get(probe)
    if probe in want:
        assert got[probe] is want[probe]
    assert got == want and want == got and got == Listed(ids, allocs)
    assert (got != want) is False and dict(got) == want and {**got} == want
    assert (got == {"x": {}}) == (want == {"x": {}})
    a, b = Plan(0.0, 60.0, allocations=got), Plan(0.0, 60.0, allocations=want)
    assert a == b and repr(a) == repr(b)
    with pytest.raises(ValueError):
        Listed(ids, [*allocs, {}])
