"""A plan made with the last plan's column tells the backend which VMs' mappings it changed
(``Listed.since``, ``Listed.changed``: ``plan.CHANGED``) and the simulated backend, when
it carried out that plan last and put or released no VM since, visits only those
(``sim.CHANGED``): the backend's state after every apply and advance is the reference's
(both off: every listed VM visited), in many-VM vertical-deadline runs (plain and flaky:
suspends, resumes, migrations, boots, failed operations, admission points) and in trace
runs; one apply of a random second plan on a random state, stated against the first plan
or not, with VMs put or released between or not, leaves the same state both ways
(hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.backends import sim
from merkat.backends.sim import _VM, RigidApp, SimBackend
from merkat.core import plan
from merkat.core.backend import Listed, Plan, VMPlacement
from test_sim_fold import _state, _vd
from test_sim_lows import VD_RUNS, same_run
from test_sim_pace import Checked
from test_sim_pace import _run as trace_run


def _told(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the plans' ``Listed`` that tell what changed (``plan._listed``)."""
    seen = {"told": 0}
    listed = plan._listed

    def counted(*args: Any) -> Any:
        out = listed(*args)
        seen["told"] += getattr(out, "changed", None) is not None
        return out
    monkeypatch.setattr(plan, "_listed", counted)
    return seen


@VD_RUNS
def test_the_changed_vms_alone_give_the_reference_run_state_for_state(
        monkeypatch: pytest.MonkeyPatch, seed: int, hosts: int, flaky: bool) -> None:
    told = _told(monkeypatch)  # (each run undoes what monkeypatch set)
    mine = _vd(monkeypatch, True, seed, hosts, flaky, changed=True)
    assert told["told"] > 0  # (plans told what changed)
    same_run(mine, _vd(monkeypatch, True, seed, hosts, flaky, changed=False), flaky)


@pytest.mark.parametrize("seed", range(4))
def test_a_trace_run_is_the_same_with_the_changed_vms_alone(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = Checked()
    got = trace_run(mine, seed)
    monkeypatch.setattr(sim, "CHANGED", False)
    monkeypatch.setattr(plan, "CHANGED", False)
    reference = Checked()
    assert repr(got) == repr(trace_run(reference, seed))  # (the sign of a zero too)
    assert mine.counts == reference.counts


def check_changed(got: Any, before: Any) -> int:
    """1 when ``got`` (a plan's allocations) tells which mappings changed since ``before``
    (the last plan's), after checking it: the same VM ids, and ``changed`` exactly the
    positions whose mapping is not ``before``'s object; else 0."""
    if not isinstance(got, Listed) or got.changed is None:
        return 0
    assert isinstance(before, Listed) and got.since is before.allocs
    assert list(got.ids) == list(before.ids)
    assert list(got.changed) == [m for m, (a, b) in enumerate(
        zip(got.allocs, before.allocs, strict=True)) if a is not b]
    return 1


_VMS = st.lists(st.sampled_from(["kept", "new", "equal"]), min_size=0, max_size=4)


@settings(max_examples=300, deadline=None)
@given(specs=st.lists(st.tuples(_VMS, st.booleans(), st.booleans()), min_size=1, max_size=6),
       stated=st.sampled_from(["first", "other", "none"]),
       between=st.sampled_from(["none", "put", "release", "create", "destroy", "other plan"]))
def test_one_apply_of_a_random_second_plan_is_the_same_both_ways(
        specs: list[tuple[Any, ...]], stated: str, between: str) -> None:
    """A first plan gives every VM a mapping; the second keeps it (the same object), gives
    a new one or an equal copy, and says so against the first plan (its ``allocs``),
    another list, or not at all; between them a VM is put, released, created or destroyed
    by the second plan, or a third plan is carried out, or nothing: each application's
    kept pace and least allocation, every VM's mapping and the live set are the same."""

    def run(changed: bool) -> str:
        b = SimBackend()
        ids: list[str] = []
        first: list[dict[str, float]] = []
        second: list[dict[str, float]] = []
        for k, (vms, _, _) in enumerate(specs):
            app = f"a{k}"
            b.add_app(app, RigidApp(vms=len(vms), work_total=300.0))
            for j, how in enumerate(vms):
                vm_id = f"{app}/vm{j}"
                b._put(vm_id, _VM(app, 0, {}, 0.0))
                ids.append(vm_id)
                a = {"cpu": 0.5 + j}
                first.append(a)
                second.append({"kept": a, "new": {"cpu": 0.25}, "equal": dict(a)}[how])
        b.apply(Plan(time=0.0, period=300.0, allocations=Listed(ids, first)))
        for k, (_, paced, low) in enumerate(specs):
            if paced:
                b._live.pop(f"a{k}", None)
                b._pace[f"a{k}"] = 1.0
            if low:
                b._lows[f"a{k}"] = 0.5
        create: tuple[VMPlacement, ...] = ()
        destroy: tuple[str, ...] = ()
        if between == "put" and ids:
            b._put(ids[0], _VM("a0", 1, {}, 0.0))
        elif between == "release" and ids:
            b._release(ids[-1])
        elif between == "create":
            create = (VMPlacement("a0/extra", "a0", 0),)
        elif between == "destroy" and ids:
            destroy = (ids[-1],)
            ids, first, second = ids[:-1], first[:-1], second[:-1]
        elif between == "other plan":
            b.apply(Plan(time=0.0, period=300.0, allocations=Listed(ids[:1], first[:1])))
        since = {"first": first, "other": list(first), "none": None}[stated]
        told = [m for m, (x, y) in enumerate(zip(second, first, strict=True)) if x is not y]
        raised = ""
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sim, "CHANGED", changed)
            try:  # (a VM released between and listed: not here, both ways)
                b.apply(Plan(time=300.0, period=300.0, create=create, destroy=destroy,
                             allocations=Listed(ids, second, since,
                                                None if since is None else told)))
            except KeyError as exc:
                raised = repr(exc)
        return repr((raised, _state(b), sorted(b._pace.items()), list(b._live),
                     sorted(b._lows.items()),
                     [(v, vm.alloc is m) for v, vm, m in zip(
                         ids, map(b.vms.get, ids), second, strict=True) if vm is not None]))

    assert run(True) == run(False)
