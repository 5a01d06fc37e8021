"""The plain forms of the batched policies (``decide_rows``: Python floats row by row, for
small groups) give the numpy forms' bits (``decide``): the same stops, suspensions, bids (their
``repr``: the sign of a zero, NaN, infinities) and controller state, on random rows full of
edge values (zeros of both signs, NaN and infinite bids and allocations, metrics not reported,
empty balances, a VM size of zero); and the plain ``_fitting`` is the numpy one."""

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
from merkat.control.batched.base import PLAIN_BELOW, Rows, batch_of, plain
from merkat.control.deadline import VerticalDeadline
from merkat.control.registry import make_policy
from merkat.core import batch

POLICIES = ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial",
            "vertical-deadline")
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
        row = [balance / 1e6, nvms, done, total, draw(metric), draw(metric), None,
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
    return (dict(scaler.history), repr(scaler.wanted), ctl.short, ctl.backoff, ctl.waited,
            rng)


@settings(max_examples=300, deadline=None)
@given(groups())
def test_the_plain_form_is_the_numpy_form_bit_for_bit(
        group: tuple[str, list[Controller], Rows, list[int]]) -> None:
    policy, ctls, rows, balances = group
    form = BATCHED.get(policy)
    mine = copy.deepcopy(ctls)
    before = [_state(c) for c in ctls]
    try:
        with np.errstate(all="ignore"):
            want = form.decide(ctls, batch_of(rows, form.live(ctls, rows.resources)))
    except ZeroDivisionError:  # (the scalar re-split on a VM size of 0): the same, no state moved
        with pytest.raises(ZeroDivisionError):
            form.decide_rows(mine, rows)  # type: ignore[attr-defined]
        assert [_state(c) for c in mine] == [_state(c) for c in ctls] == before
        return
    got = form.decide_rows(mine, rows)  # type: ignore[attr-defined]
    assert got.stop == want.stop
    assert got.suspend == want.suspend
    assert got.bid is None and got.values is not None
    assert [[repr(x) for x in v] for v in got.rows()] == \
        [[repr(x) for x in v] for v in want.rows()]
    assert [_state(c) for c in mine] == [_state(c) for c in ctls]
    at = list(range(len(rows.resources)))
    assert batch._fitting_rows(got.rows(), rows.rows, balances) == batch._fitting(
        want.bid, at, np.array([r[1] for r in rows.rows]), balances).tolist()


def test_the_form_is_chosen_by_the_group_size() -> None:
    slo, generic = BATCHED.get("deadline-strict"), BATCHED.get("merkat-vertical")
    assert plain(slo, 1) and plain(slo, PLAIN_BELOW - 1)
    assert not plain(slo, PLAIN_BELOW)
    assert not plain(generic, 1)  # (no plain form: numpy at every size)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_small_group_in_the_platform_takes_the_plain_form(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The period's dispatch (``core/batch.py``) runs the plain form on a group under
    ``PLAIN_BELOW`` and the numpy form on a larger one."""
    from tests.test_batched import _random_apps

    from merkat.core.reconcile import Decider
    calls: list[str] = []
    form = type(BATCHED.get(policy))
    for name in ("decide", "decide_rows"):
        real = getattr(form, name)
        monkeypatch.setattr(form, name, lambda self, *a, _n=name, _f=real: (
            calls.append(_n), _f(self, *a))[1])
    monkeypatch.setattr(batch, "MIN_BATCH", 1)
    decider = Decider(300.0, {"cpu": 64.0, "memory": 65536.0}, {"cpu": 0.01}, 3)
    for n in (3, 2 * PLAIN_BELOW):  # (the applications without a rate are left out)
        rows, now = _random_apps(policy, ("cpu",), n, seed=n)
        batch.decide(decider, [(a, BATCHED.get(policy), b, s) for a, b, s in rows], now,
                     {"cpu": 0.37, "memory": 0.0}, [])
    assert calls == ["decide_rows", "decide"]
