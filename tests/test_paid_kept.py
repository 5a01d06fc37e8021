"""``core/batch_slo.py``'s ``paid`` with what it keeps (``Kept1.ok``: the record's bids list
it found bidding ``{r: x}`` on every VM, ``x`` and a balance that paid it) answers what it
answers with nothing kept (a fresh ``Kept1`` each call: the budget check and
``draft.rebid_columns``, the reference), bit for bit, over random sequences of calls on one
application: bids equal, shared, unequal, zeros of both signs, NaN and infinities; balances at
the micro-credit's edge of ``n`` copies of the bid, broke, and beyond a float's exact
integers; the record's columns replaced (a commit writing allocations, another bids list)
and its clean next state installed between calls."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.control.deadline import VerticalDeadline
from merkat.control.types import AppStatus, VMState
from merkat.core.batch_slo import Kept1, paid
from merkat.core.draft import draft, install
from merkat.core.model import App, AppNext, AppSpec, to_micro

value = st.sampled_from([0.0, -0.0, 1e-300, 0.01, 0.2, 0.37, 1.0, 3.0, 1e308, float("inf"),
                         float("nan")])


def _app(n: int) -> App:
    spec = AppSpec("a", "vertical-deadline", n, {"cpu": 1.0}, 0.0, 10.0, renewal=1.0,
                   deadline=1e4, trade=("cpu",))
    return App(spec, VerticalDeadline(seed=0), "app:a", status=AppStatus.RUNNING)


def _columns(n: int, bids: list[dict[str, float]], allocs: float) -> Any:
    return ([f"a/vm{k}" for k in range(n)], [VMState.RUNNING] * n, bids, list(range(n)),
            [False] * n, [{"cpu": allocs} for _ in range(n)])


def _outcome(app: App, made: Any) -> Any:
    if isinstance(made, dict):
        return ("bid", repr(made))
    assert isinstance(made, AppNext)
    cols = app.columns
    return ("next", made is app.clean, made.base is cols, made.bids is cols[2],
            [repr(b) for b in made.bids], made.ids is cols[0], made.allocs is cols[5],
            made.status, made.broke_since, made.same_vms, made.moved, made.vm_count)


@st.composite
def runs(draw: Any) -> tuple[int, list[Any]]:
    n = draw(st.sampled_from([1, 1, 2, 4, 5, 8, 64]))
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["same", "same", "same", "equal", "other", "mixed"]))
        v = draw(value)
        x = draw(st.one_of(st.just(None), value))  # None: the bids' own value
        slack = draw(st.sampled_from([None, -2, -1, 0, 1, 2]))
        balance = draw(st.sampled_from([0, -5, 5_000, 300_000, 2_000_000, 2 ** 53 - 1,
                                        2 ** 53, 2 ** 53 + 1, 10 ** 20]))
        steps.append((kind, v, x, slack, balance, draw(st.booleans()), draw(st.booleans())))
    return n, steps


@settings(max_examples=500, deadline=None)
@given(runs())
def test_paid_with_its_kept_proof_is_the_check_bit_for_bit(run: tuple[int, list[Any]]) -> None:
    n, steps = run
    app = _app(n)
    k = Kept1("cpu")
    bids: list[dict[str, float]] = [{"cpu": 0.5}] * n
    app.columns = _columns(n, bids, 0.5)
    for kind, v, x, slack, balance, allocs, clean in steps:
        if kind == "equal":  # another record's bids list, equal mappings not shared
            bids = [{"cpu": v} for _ in range(n)]
        elif kind == "other":  # one list shared by every VM
            bids = [{"cpu": v}] * n
        elif kind == "mixed" and n > 1:
            bids = [{"cpu": v}] + [{"cpu": 0.25}] * (n - 1)
        if kind != "same" or allocs:  # (a commit: new columns, the bids list kept or not)
            app.columns = _columns(n, bids, 0.5 if allocs else 0.25)
            app.clean = None
        if clean:  # its last commit installed it unchanged
            install(app, draft(app))
        bid = bids[0]["cpu"] if x is None else x
        if slack is not None:  # at the micro-credit's edge of n copies of the bid
            total = 0.0
            for _ in range(n):
                total += bid
            if (total * 1e6) - (total * 1e6) == 0:
                balance = to_micro(total) + slack
        cols = app.columns
        want = paid(app, cols, "cpu", bid, n, balance, Kept1("cpu"))
        want_out = _outcome(app, want)
        got = paid(app, cols, "cpu", bid, n, balance, k)
        assert _outcome(app, got) == want_out
        if isinstance(got, AppNext) and isinstance(want, AppNext) and want is not app.clean:
            assert got is not want  # (a new next state each call, as the reference)
