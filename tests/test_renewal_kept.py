"""The economy's per-period shortcuts, pinned to what they replace.

- ``Economy._due`` (the renewed accounts kept between periods while the same names come and
  the allowances are the same accounts) equals the fresh answer, ``sorted({a for a in
  accounts if a in allowances})``, after lists changed in place, allowances opened, closed,
  forgotten and edited directly; a renewal through it gives the books of
  ``renew_reference``;
- ``Economy.charge`` by bid (the paid amounts taken from the bills, not mapped back from the
  charging plugin's indexes) equals the general path (the plugin's ``charge``): the same
  ``Charged`` (paid, unpaid, total) and the same balances, money conserved, with bills that
  some accounts cannot pay;
- the in-memory witness of moves that are tuples already equals the witness of the same moves
  as lists (a retry given either way replays).
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import Allowance
from merkat.bank.witness import witness
from merkat.core.backend import Plan
from merkat.core.model import Decision
from merkat.runtime.economy import ByBid, Economy

APPS = [f"app:j{k}" for k in range(6)]


def economy() -> Economy:
    ledger = MemoryLedger()
    ledger.create_account("user:u", AccountKind.user)
    for a in APPS:
        ledger.create_account(a, AccountKind.application, owner="user:u")
    e = Economy(ledger)
    e.owners.update(dict.fromkeys(APPS, "user:u"))
    return e


steps = st.lists(st.one_of(
    st.tuples(st.just("renew"), st.lists(st.sampled_from(APPS), max_size=8)),
    st.tuples(st.just("same"), st.just([])),  # the last list again, unchanged
    st.tuples(st.just("edit"), st.lists(st.sampled_from(APPS), min_size=1, max_size=3)),
    st.tuples(st.just("allow"), st.lists(st.sampled_from(APPS), min_size=1, max_size=2)),
    st.tuples(st.just("close"), st.lists(st.sampled_from(APPS), min_size=1, max_size=2)),
    st.tuples(st.just("forget"), st.lists(st.sampled_from(APPS), min_size=1, max_size=2)),
    st.tuples(st.just("drop"), st.lists(st.sampled_from(APPS), min_size=1, max_size=1)),
), max_size=14)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_kept_due_accounts_are_the_fresh_answer(script: list) -> None:
    fast, ref = economy(), economy()
    names: list[str] = []
    for period, (op, arg) in enumerate(script):
        for e in (fast, ref):
            if op == "allow":
                for a in arg:
                    e.allowances[a] = Allowance(3, 40)  # (directly: counted by number)
            elif op == "close":
                e.close(arg, period)
                e.owners.update(dict.fromkeys(arg, "user:u"))
            elif op == "forget":
                e.forget(arg)
                e.owners.update(dict.fromkeys(arg, "user:u"))
            elif op == "drop":
                e.allowances.pop(arg[0], None)
        if op == "renew":
            names = list(arg)
        elif op == "edit":
            names[: len(arg)] = arg  # the same list, changed in place
        if op in ("renew", "same", "edit"):
            want = sorted({a for a in names if a in fast.allowances})
            assert fast._due(names) == want
            assert fast.renew(period, names) == ref.renew_reference(period, list(names))
            assert fast.ledger.balances() == ref.ledger.balances()
            assert fast._due(iter(names)) == want  # (not a list: never kept)
    assert fast.ledger.audit().ok and fast.minted == ref.minted


def decision(bills: list[tuple[str, int]], index: int) -> Decision:
    return Decision(index=index, time=60.0 * index, plan=Plan(60.0 * index, 60.0),
                    bills=tuple(bills), usage=(), refused=(), prices={}, allocated={},
                    bidding=0, apps={}, taken=())


class General(ByBid):
    """Charging by bid through the general path (a plugin's ``charge``)."""


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=len(APPS), max_size=len(APPS)),
       st.lists(st.lists(st.tuples(st.sampled_from(APPS), st.integers(0, 40)), max_size=8),
                min_size=1, max_size=4))
def test_a_charge_by_bid_equals_the_general_path(start: list, periods: list) -> None:
    fast, ref = economy(), economy()
    ref._charging = General(ref.provider)
    for e in (fast, ref):
        e.ledger.mint_many([(a, x) for a, x in zip(APPS, start, strict=True) if x], "start")
    accounts = {a.removeprefix("app:"): a for a in APPS}
    for k, bills in enumerate(periods):
        d = decision([(a.removeprefix("app:"), x) for a, x in bills], k)
        got, want = fast.charge(d, accounts), ref.charge(d, accounts)
        assert (got.paid, got.unpaid, got.total) == (want.paid, want.unpaid, want.total)
        assert fast.ledger.balances() == ref.ledger.balances()
    assert fast.ledger.audit().ok and sum(fast.ledger.balances().values()) == sum(start)


def test_a_charge_by_bid_exact_numbers() -> None:
    e = economy()
    e.ledger.mint_many([("app:j0", 50), ("app:j1", 10)], "start")
    charged = e.charge(decision([("j0", 30), ("j1", 20), ("j2", 0)], 0),
                       {f"j{k}": f"app:j{k}" for k in range(3)})
    assert (charged.paid, charged.unpaid, charged.total) == ({"j0": 30, "j2": 0}, {"j1"}, 30)
    assert e.ledger.balances(["app:j0", "app:j1", "provider"]) == {
        "app:j0": 20, "app:j1": 10, "provider": 30}
    everyone = e.charge(decision([("j1", 4), ("j2", 0)], 1), {"j1": "app:j1", "j2": "app:j2"})
    assert (everyone.paid, everyone.unpaid, everyone.total) == ({"j1": 4, "j2": 0},
                                                                frozenset(), 4)


def test_the_witness_of_tuples_is_the_witness_of_lists() -> None:
    moves = (("a", "b", 5), ("a", "c", 6))
    assert witness("batch", moves) == witness("batch", [list(m) for m in moves])
    assert witness("batch", list(moves)) == witness("batch", moves)
    assert witness("batch", moves) != witness("batch", moves[::-1])


def test_an_allowance_swapped_between_two_reads_is_seen() -> None:
    """One account's allowance removed and another's added (same number of allowances)
    between two reads: the kept answer is not reused (hypothesis found it once)."""
    e = economy()
    e.allowances[APPS[1]] = Allowance(3, 40)
    names = [APPS[0]]
    assert e._due(names) == []
    e.allowances.pop(APPS[1])
    e.allowances[APPS[0]] = Allowance(3, 40)
    assert e._due(names) == [APPS[0]]
    del e.allowances[APPS[0]]
    assert e._due(names) == []
