"""A kept admission point's plan and bills made from the placement's lists
(:mod:`merkat.core.admission_plan`) against ``make_plan``/``bills_of`` over its arrays (the
reference), and the kept state's lean build's pieces against their references: the patch
that makes every kept point's plan and bills both ways (``_plan_both_ways``, which
``tests/test_admission_kept.py``'s runs install), the pieces' property tests, and a kept
point's placement arrays made when read (``admission_place.LAZY``) against those made at
once."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_COLUMNS = ("ids", "states", "bids", "hosts", "fresh", "allocs")


def _twin(nx):  # type: ignore[no-untyped-def]
    """A next state whose column lists are copies of ``nx``'s, its base the copies where
    ``nx``'s column is still its base's (the same copy-on-write branches taken), the
    mappings the same objects."""
    from copy import copy

    from merkat.core import draft

    twin = copy(nx)
    base = []
    for c, b in zip(_COLUMNS, nx.base, strict=True):
        mine = getattr(nx, c)[:]
        setattr(twin, c, mine)
        base.append(mine if getattr(nx, c) is b else b)
    twin.base = nx.base if nx.base is draft._OWNED else tuple(base)
    return twin


def _same_next(a, b, held) -> None:  # type: ignore[no-untyped-def]
    """Two next states after a plan (``held``: the mappings they held before): the same
    columns, the same mappings kept (the same objects) and the others equal, each column
    its base's or not alike, the same fields."""
    for c in _COLUMNS:
        assert getattr(a, c) == getattr(b, c), c
    assert [x is o for x, o in zip(a.allocs, held, strict=True)] == \
        [y is o for y, o in zip(b.allocs, held, strict=True)]
    for c, x, y in zip(_COLUMNS, a.base, b.base, strict=True):
        assert (getattr(a, c) is x) == (getattr(b, c) is y), c
    assert (a.moved, a.status, a.vm_count) == (b.moved, b.status, b.vm_count)


def _plan_both_ways(monkeypatch: pytest.MonkeyPatch, counts: dict[str, int]) -> None:
    """Patches the admission's plan and bills (``admission._plan_bills``) to make them at
    every kept point both ways: from the placement's lists (``admission_plan.DIRECT``) and
    by ``make_plan``/``bills_of`` over its arrays (the reference) on twins of the drafted
    next states; the same plan (its ``allocations`` of the same type), bills, usage (read)
    and next states after. Counted in ``direct`` (kept points, made both ways) and
    ``direct_touched`` (those that touched a running VM)."""
    from dataclasses import replace

    from merkat.core import admission, admission_plan
    from merkat.core.model import Ops

    made = admission._plan_bills
    counts["direct"] = counts["direct_touched"] = 0

    def both(now, period, placed, ops, prices):  # type: ignore[no-untyped-def]
        if placed.rows is None:
            return made(now, period, placed, ops, prices)
        runs = (*placed.touched, *placed.fits)
        twins = {id(run[0]): _twin(run[0]) for run in runs}
        held = {id(run[0]): list(run[0].allocs) for run in runs}
        other = replace(placed, touched=[(twins[id(nx)], c, r) for nx, c, r in placed.touched],
                        fits=[(twins[id(nx)], c, r) for nx, c, r in placed.fits])
        monkeypatch.setattr(admission_plan, "DIRECT", False)
        want = made(now, period, other, Ops(list(ops.destroy), list(ops.suspend)), prices)
        monkeypatch.setattr(admission_plan, "DIRECT", True)
        got = made(now, period, placed, ops, prices)
        assert got[0] == want[0] and got[0].column is None and want[0].column is None
        assert type(got[0].allocations) is type(want[0].allocations)
        assert got[1] == want[1] and tuple(got[2]) == tuple(want[2])
        for run in runs:
            _same_next(run[0], twins[id(run[0])], held[id(run[0])])
        counts["direct"] += 1
        counts["direct_touched"] += bool(placed.touched)
        return got

    monkeypatch.setattr(admission, "_plan_bills", both)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=40),
       st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 3.0, 1e300, float("inf"),
                                 float("nan")]), min_size=160, max_size=160))
def test_the_lean_builds_pieces_are_the_references(host_l: list[int],
                                                   values: list[float]) -> None:
    """Each node's rows (the lean dict comprehension and its fix-up) are the reference's,
    in the same order; the bounds give the reference's ``traded`` and, where finite, its
    sums to within rounding (bids and caps of zeros, signed zeros, infinities and NaN)."""
    from merkat.core.admission_state import _bounds, _bounds_ref, _rows_on, _rows_on_ref

    host = np.array(host_l, dtype=np.int64)
    for nodes in (8, 40):  # (more rows than nodes, or not)
        assert list(_rows_on(host, host_l, nodes).items()) == list(_rows_on_ref(host_l).items())
    n = len(host_l)
    bid = np.abs(np.array(values[:2 * n]).reshape(n, 2))
    cap = np.abs(np.array(values[80:80 + 2 * n]).reshape(n, 2))
    got, want = _bounds(bid, cap, cap.T.tolist()), _bounds_ref(bid, cap, cap.T.tolist())
    assert got[2] == want[2]
    for x, y in zip(got[0] + got[1], want[0] + want[1], strict=True):
        assert np.isnan(x) == np.isnan(y) and np.isinf(x) == np.isinf(y)
        assert not np.isfinite(y) or np.isclose(x, y, rtol=1e-12, atol=0.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.floats(0.0, 1e6) | st.sampled_from([0.0, 0.5, 1.5, 2.5]),
                                   st.floats(0.0, 1e3) | st.just(0.0)),
                         min_size=1, max_size=12), min_size=1, max_size=6),
       st.sampled_from([1.0, 1e6, 1e13]))
def test_the_newcomers_bills_from_their_bids_are_bills_ofs(vms: list[list[tuple[float, float]]],
                                                           scale: float) -> None:
    """:func:`merkat.core.admission_plan.bills` (the newcomers' bids summed in plain Python,
    below and from ``MIN_ARRAY_BILLS`` VMs: bills_of's plain and numpy paths) gives
    :func:`~merkat.core.bills.bills_of`'s bills over the placement's arrays, or None only
    where a bid or a total leaves ``int64``; ties at half a micro-credit included."""
    from types import SimpleNamespace

    from merkat.core import admission_plan
    from merkat.core.bills import bills_of

    runs = [(SimpleNamespace(id=f"a{len(vms) - k}", ids=[f"v{k}.{j}" for j in range(len(v))]),
             SimpleNamespace(columns=(("cpu", 0),)), None) for k, v in enumerate(vms)]
    rows = [[b0 * scale, b1] for v in vms for b0, b1 in v]
    n = len(rows)
    got = admission_plan.bills(runs, rows)  # type: ignore[arg-type]
    host = np.arange(n, dtype=np.int64)
    before = np.full(n, -1, dtype=np.int64)
    if got is None:
        assert any(not (b0 + b1) * 1e6 < 9e18 for b0, b1 in rows) or \
            sum(round((b0 + b1) * 1e6) for b0, b1 in rows) >= 2**63
        return
    want, _ = bills_of(runs, host, before, np.zeros((n, 2)),  # type: ignore[arg-type]
                       np.array(rows, dtype=np.float64), {"cpu": 1.0, "memory": 0.0})
    assert got == want


def test_a_kept_points_placement_arrays_are_made_when_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``admission_place.LAZY``: a kept point's hosts, bids and hosts before
    (:class:`~merkat.core.admission_place.KeptPlacement`) are not made in a run charging by
    bid (its plan and bills are made from the lists), and once read they are the arrays
    made at once with ``LAZY`` off (the same run, point for point, byte for byte; every
    point's are also compared with the full path's by the tests above)."""
    from tests.test_admission_kept import PERIOD, _kept_world

    from merkat.core import admission, admission_keep, admission_place
    from merkat.core.admission_place import KeptPlacement, Placement

    monkeypatch.setattr(admission, "MAX_NEW", 10**9)  # (the kept path at every point)
    place = admission_keep.place_kept

    def run(lazy: bool) -> list[object]:
        monkeypatch.setattr(admission_place, "LAZY", lazy)
        got: list[object] = []

        def keeping(*a):  # type: ignore[no-untyped-def]
            out = place(*a)
            if out is not None:
                got.append(out.placement)
            return out

        monkeypatch.setattr(admission_keep, "place_kept", keeping)
        driver, _ = _kept_world(5, cores=1.0)
        driver.run(until=8 * PERIOD)
        return got

    lazy, eager = run(True), run(False)
    assert len(lazy) == len(eager) > 3
    names = ("host", "allocation", "bid", "before")
    for p, q in zip(lazy, eager, strict=True):
        assert isinstance(p, KeptPlacement) and isinstance(q, Placement)
        assert not {"host", "bid", "before"} & vars(p).keys()  # (never read in the run)
        for n in names:
            x, y = getattr(p, n), getattr(q, n)
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
