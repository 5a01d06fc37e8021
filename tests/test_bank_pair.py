"""A period's renewal and charge proved the last ones and applied again
(:mod:`merkat.bank.memory_pair`), pinned equal to the per-account loops
(``MemoryLedger.repeats = False``): period after period of renewals and charges, some
repeating the last ones exactly, some not (a bill changed, money credited between, an
allowance or the active set changed, a key used before, float amounts, an admission's charge
between two periods, a ledger that keeps no journal), the same results, balances, journal,
transfer ids, idempotency witnesses and audit; and ``test_cow``'s flaky trace runs."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from merkat.bank import ledger as ledger_mod
from merkat.bank import memory_pair
from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import Allowance, ChargeByBid
from merkat.runtime.economy import Economy
from test_cow import _run as cow_run

APPS = [f"app:j{k}" for k in range(6)]
USERS = ["user:u0", "user:u1"]


def _economy(repeats: bool, caps: dict[str, tuple[int, int]], start: int,
             journal: bool = True) -> Economy:
    ledger = MemoryLedger(journal, None if journal else 1)
    ledger.repeats = repeats  # type: ignore[misc]
    for u in USERS:
        ledger.create_account(u, AccountKind.user)
    for k, a in enumerate(APPS):
        ledger.create_account(a, AccountKind.application, owner=USERS[k % 2])
    economy = Economy(ledger)
    for k, a in enumerate(APPS):
        economy.owners[a] = USERS[k % 2]
        if a in caps:
            economy.allowances[a] = Allowance(*caps[a])
    ledger.mint_many([(a, start) for a in APPS], "start")
    return economy


def _books(economy: Economy) -> tuple[object, ...]:
    ledger = economy.ledger
    assert isinstance(ledger, MemoryLedger)
    assert ledger.audit().ok
    return (ledger.balances(), economy.minted, ledger._next_id, dict(ledger._idem),
            ledger._minted, [dataclasses.astuple(t) for t in ledger._all_transfers()],
            [dataclasses.astuple(b) for b in ledger._batches], list(ledger._single))


def _renew(economy: Economy, period: int, active: list[str]) -> object:
    try:
        return economy.renew(period, active)
    except Exception as exc:  # (a key used for other moves, the total supply's bound)
        return type(exc).__name__, str(exc)


def _charge(economy: Economy, period: int, bills: tuple[tuple[str, object], ...],
            tag: str = "") -> object:
    try:
        r = ChargeByBid("provider").apply(economy.ledger, period, bills, tag)  # type: ignore
    except Exception as exc:  # (a float amount, a key used for other moves)
        return type(exc).__name__, str(exc)
    return r.paid, r.unpaid, r.total, list(r.transfer_ids)


steps = st.lists(st.tuples(
    st.sampled_from(["same", "same", "same", "same", "bills", "credit", "active",
                     "allowance", "again", "float", "between", "skip"]),
    st.lists(st.tuples(st.sampled_from(APPS), st.integers(0, 60)), max_size=7),
    st.sampled_from(APPS), st.integers(1, 40)), min_size=1, max_size=14)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(APPS), st.tuples(st.integers(1, 60),
                                                        st.integers(20, 150))),
       st.integers(1, 100), steps, st.booleans())
def test_repeated_periods_equal_the_loops(caps: dict[str, tuple[int, int]], start: int,
                                          plan: list[tuple[str, list[tuple[str, int]], str,
                                                           int]], journal: bool) -> None:
    fast, ref = _economy(True, caps, start, journal), _economy(False, caps, start, journal)
    active = list(APPS)
    bills: tuple[tuple[str, int], ...] = ()
    for period, (what, new_bills, account, amount) in enumerate(plan):
        if what == "bills" or not bills:
            bills = tuple(new_bills)  # (a new tuple: the last one is kept while the same)
        elif what == "active":
            active = [a for a in active if a != account] or list(APPS)
        for economy in (fast, ref):
            if what == "credit":  # money moves between two periods: balances differ
                economy.ledger.mint(account, amount, "gift", period)
            if what == "allowance":
                economy.allowances[account] = Allowance(amount, 2 * amount + 10)
        key = period - 1 if what == "again" and period else period  # a key used before
        charge: tuple[tuple[str, object], ...] = \
            tuple((a, float(x)) for a, x in bills) if what == "float" else bills
        got = [_renew(fast, key, active)]
        want = [_renew(ref, key, active)]
        if what != "skip":  # (a period without a charge)
            got.append(_charge(fast, key, charge))
            want.append(_charge(ref, key, charge))
        if what == "between":  # an admission point's charge between two periods
            other = tuple(new_bills)
            got.append(_charge(fast, key, other, "/admission"))
            want.append(_charge(ref, key, other, "/admission"))
        assert got == want
        assert _books(fast) == _books(ref)


def _hits(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Count the renewals and charges applied again."""
    hits: collections.Counter[str] = collections.Counter()

    def counted(name: str) -> Callable[..., object]:
        f = getattr(memory_pair, name)

        def wrapper(*args: object) -> object:
            r = f(*args)
            hits[name] += r is not None
            return r
        return wrapper

    for name in ("renew_again", "charge_again"):
        monkeypatch.setattr(memory_pair, name, counted(name))
    return hits


def test_a_steady_period_is_applied_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two accounts renewed to their caps and charged what they were given: from the third
    period on the renewal and the charge are the last ones again, the books those of the
    loops; a bill changed, or money credited between, and the loops run again."""
    hits = _hits(monkeypatch)
    caps = {"app:j0": (30, 100), "app:j1": (30, 80)}
    fast, ref = _economy(True, caps, 100), _economy(False, caps, 100)
    steady = (("app:j0", 20), ("app:j1", 25), ("app:j2", 0), ("app:j3", 500))
    other = (("app:j0", 20), ("app:j1", 24))
    for period in range(12):
        bills = other if period == 6 else steady
        for economy in (fast, ref):
            if period == 9:
                economy.ledger.mint("app:j1", 3, "gift", period)
            economy.renew(period, APPS)
            ChargeByBid("provider").apply(economy.ledger, period, bills)
        assert _books(fast) == _books(ref)
    # j1 is renewed what it paid from period 2 (period 1 lifted it from 75 to its cap):
    # the pair cancels from there, applied again in periods 3-6 (period 6's other bills do
    # not cancel it, nor period 7's renewal of 24 the steady bill of 25; period 9's gift
    # moves the ids) and 11; the charges again in 3-5 and 11
    assert hits == {"renew_again": 5, "charge_again": 4}


def test_the_total_supply_bound_on_a_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """A renewal applied again that would mint above the bank's maximum is refused as the
    loops refuse it, nothing moved."""
    caps = {"app:j0": (30, 100)}
    fast, ref = _economy(True, caps, 100), _economy(False, caps, 100)
    bills = (("app:j0", 20),)
    for period in range(5):
        if period == 3:
            monkeypatch.setattr(ledger_mod, "MAX_TOTAL", fast.ledger._minted)  # type: ignore
        got = [_renew(fast, period, APPS), _charge(fast, period, bills)]
        want = [_renew(ref, period, APPS), _charge(ref, period, bills)]
        assert got == want
        assert _books(fast) == _books(ref)


@pytest.mark.parametrize(("policy", "hosts"), [("deadline-strict", 12),
                                               ("deadline-strict", 40)])
def test_a_trace_run_equals_the_loops_run(monkeypatch: pytest.MonkeyPatch, policy: str,
                                          hosts: int) -> None:
    """``test_cow``'s flaky trace run (one operation in four fails, one bill in nine is
    withheld; its digest: outcomes, records, paid, books) with the pairs applied again and
    with the loops only: the same digest, renewals and charges applied again in it."""
    hits = _hits(monkeypatch)
    digest = cow_run(monkeypatch, False, policy, hosts)[0]  # (undoes the patches)
    assert hits["renew_again"] > 2 and hits["charge_again"] > 2
    monkeypatch.setattr(MemoryLedger, "repeats", False)
    hits.clear()
    assert cow_run(monkeypatch, False, policy, hosts)[0] == digest
    assert not hits
