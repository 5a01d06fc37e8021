"""The plain forms of the batched policies (``one``, the period's: Python floats, one
application at a time; ``decide_rows``: it row by row) give the numpy forms' bits
(``decide``, the reference), row by row: the same stops, suspensions, declines, bids (their
``repr``: the sign of a zero, NaN, infinities) and controller state, on random rows full of
edge values (zeros of both signs, NaN and infinite bids and allocations, metrics not reported,
empty balances, a VM size of zero); a row the numpy form raises on is declined by the plain
form, its controller not moved, and the other rows are decided."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.control.base import Controller
from merkat.control.batched import BATCHED
from merkat.control.batched.base import Rows, batch_of
from merkat.control.deadline import VerticalDeadline
from merkat.control.registry import make_policy
from merkat.core import batch

POLICIES = ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial",
            "vertical-deadline", "merkat-vertical")
NAMES = ("cpu", "memory")

edge = st.sampled_from([0.0, -0.0, 1e-300, 0.01, 0.2, 0.5, 0.99, 1.0, 1.5, 2.0, 40.0, 1e308,
                        float("inf"), float("nan")])
amount = st.sampled_from([0.0, -0.0, 0.01, 0.25, 0.5, 1.0, 3.0, 1e308, float("inf"),
                          float("nan")])
reported = st.sampled_from([0.0, -0.0, 0.05, 0.5, 1.0, 2.0, 100.0, 1e308, float("inf")])
metric = st.one_of(st.none(), reported)
size = st.sampled_from([0.0, 0.5, 1.0, 2.0, 512.0])


@st.composite
def controllers(draw: Any, policy: str, R: int) -> Controller:
    seed = draw(st.integers(0, 2 ** 20))
    if policy == "vertical-deadline":
        vd = VerticalDeadline(seed=seed, abort_hopeless=draw(st.booleans()),
                              t_diff=draw(st.sampled_from([0.0, 0.05, 0.5])),
                              limit=draw(st.integers(1, 3)),
                              ewma_alpha=draw(st.sampled_from([0.3, 0.5, 1.0])),
                              max_alloc_tol=draw(st.sampled_from([0.0, 0.01, 0.5])),
                              horizon=draw(st.integers(1, 3)))
        for r in NAMES[:R]:
            if draw(st.booleans()):
                vd.alloc_est.value[r] = draw(amount)
        vd.scaler.direction = draw(st.integers(-1, 1))
        vd.scaler.run = draw(st.integers(0, 4))
        return vd
    if policy == "merkat-vertical":
        mv = make_policy(policy, seed=seed, low=draw(st.sampled_from([0.5, 0.75])),
                         high=draw(st.sampled_from([1.0, 1.2])),
                         alloc_min=draw(st.sampled_from([0.0, 0.25, 1.0])),
                         horizon=draw(st.integers(1, 3)))
        for r in NAMES[:R]:
            mv.scaler.history[r] = draw(st.integers(-1, 1))  # type: ignore[attr-defined]
        return mv
    ctl = make_policy(policy, seed=seed, backoff_max=draw(st.integers(0, 3)),
                      low=draw(st.sampled_from([0.5, 0.75])),
                      high=draw(st.sampled_from([1.0, 1.2])),
                      min_fraction=draw(st.sampled_from([0.0, 0.25, 1.0])),
                      horizon=draw(st.integers(1, 3)))
    for r in NAMES[:R]:
        ctl.scaler.history[r] = draw(st.integers(-1, 1))  # type: ignore[attr-defined]
    if draw(st.booleans()):
        ctl.backoff, ctl.waited = draw(st.integers(0, 2)), draw(st.integers(0, 2))  # type: ignore[attr-defined]
    return ctl


@st.composite
def groups(draw: Any) -> tuple[str, list[Controller], Rows, list[int]]:
    policy = draw(st.sampled_from(POLICIES))
    R = draw(st.integers(1, 2))
    n = draw(st.integers(1, 8))
    form = BATCHED.get(policy)
    now = 10_000.0
    ctls, rows, fixed, balances = [], [], [], []
    for _ in range(n):
        ctl = draw(controllers(policy, R))
        balance = draw(st.sampled_from([0, -5, 5_000, 300_000, 2_000_000, 2 ** 53 + 1,
                                        10 ** 20]))
        nvms = float(draw(st.integers(1, 6)))
        done, total = draw(metric), draw(reported)
        perf = draw(metric) if policy == "merkat-vertical" else None  # (its own metric)
        row = [balance / 1e6, nvms, done, total, draw(metric), draw(metric), perf,
               *[draw(edge) for _ in range(R)], *[draw(amount) for _ in range(R)]]
        deadline = now + draw(st.sampled_from([-100.0, 0.0, 5.0, 300.0, 3000.0, 1e5, 1e300]))
        fixed.append([float(x) for x in (
            draw(st.sampled_from([0.0, 1.0, 1e6])), deadline,
            *[draw(size) for _ in range(R)],
            *form.state(ctl, NAMES[:R])[:form.fixed])])
        ctls.append(ctl)
        rows.append(row)
        balances.append(balance)
    prices = [draw(st.sampled_from([0.0, 0.37, 2.0, float("inf")])) for _ in range(R)]
    floors = [draw(st.sampled_from([0.0, 0.001, 0.01])) for _ in range(R)]
    return policy, ctls, Rows(now, 300.0, NAMES[:R], prices, [64.0, 65536.0][:R], floors,
                              rows, fixed), balances


def _state(ctl: Any) -> tuple[Any, ...]:
    scaler = ctl.scaler
    rng = json.dumps(ctl.rng.bit_generator.state, sort_keys=True, default=str)
    if isinstance(ctl, VerticalDeadline):
        return (repr(ctl.alloc_est.value), scaler.direction, scaler.run, repr(scaler.wanted),
                ctl.short, ctl.suspended_at, repr(ctl.suspend_cost), ctl.suspensions, rng)
    return (dict(scaler.history), repr(scaler.wanted), getattr(ctl, "short", None),
            getattr(ctl, "backoff", None), getattr(ctl, "waited", None), rng)


def _numpy_row(form: Any, ctl: Controller, rows: Rows, i: int) -> Any:
    """The numpy form on row ``i`` alone (a group of one): its (stop, suspend, declined, bid
    reprs), or the exception it raised."""
    one = Rows(rows.time, rows.period, rows.resources, rows.prices, rows.capacity,
               rows.bid_min, [rows.rows[i]], [rows.fixed[i]])
    try:
        with np.errstate(all="ignore"):
            d = form.decide([ctl], batch_of(one, form.live([ctl], rows.resources)))
    except Exception as e:  # (the scalar re-split on a VM size of 0)
        return e
    declined = bool(d.declined[0]) if d.declined is not None else False
    return d.stop[0], bool(d.suspend[0]), declined, [repr(x) for x in d.rows()[0]]


@settings(max_examples=300, deadline=None)
@given(groups())
def test_the_plain_form_is_the_numpy_form_bit_for_bit(
        group: tuple[str, list[Controller], Rows, list[int]]) -> None:
    policy, ctls, rows, _ = group
    form = BATCHED.get(policy)
    mine = copy.deepcopy(ctls)
    before = [_state(c) for c in ctls]
    got = form.decide_rows(mine, rows)  # type: ignore[attr-defined]
    assert got.bid is None and got.values is not None and got.declined is not None
    for i, ctl in enumerate(ctls):
        want = _numpy_row(form, ctl, rows, i)
        if isinstance(want, Exception):  # declined, its controller not moved
            assert got.declined[i] and got.stop[i] is None and not got.suspend[i]
            assert _state(mine[i]) == before[i]
            continue
        stop, suspend, declined, bid = want
        assert (got.stop[i], got.suspend[i], got.declined[i]) == (stop, suspend, declined)
        if not declined:
            assert [repr(x) for x in got.values[i]] == bid
        assert _state(mine[i]) == _state(ctl)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_period_decides_every_group_size_one_application_at_a_time(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The period's dispatch (``core/batch.py``'s ``Pass``) runs the plain form's ``one`` on
    each application, a lone one and those of a group of 200 alike (no numpy pass)."""
    from tests.test_batched import _random_apps

    from merkat.core.reconcile import Decider
    calls: list[str] = []
    form = type(BATCHED.get(policy))
    for name in ("decide", "one"):
        real = getattr(form, name)
        monkeypatch.setattr(form, name, lambda self, *a, _n=name, _f=real: (
            calls.append(_n), _f(self, *a))[1])
    decider = Decider(300.0, {"cpu": 64.0, "memory": 65536.0}, {"cpu": 0.01}, 3)
    for n in (1, 200):
        rows, now = _random_apps(policy, ("cpu",), n, seed=n)
        out = batch.decide(decider, rows, now, {"cpu": 0.37, "memory": 0.0}, [])
        assert len(out) <= calls.count("one")
    assert "decide" not in calls and calls.count("one") > 150
