"""The bank's side of a period in one pass each, pinned equal to the references they replace.

- ``Economy.renew`` (one read of the balances, one loop) against ``Economy.renew_reference``
  (``Allowance.due`` per account, the balances read twice, ``CreditManager.plan``): the same
  mints, moves, journal, transfer ids and balances, over random economies, owners (an owner
  that is itself a renewed account included), balances and active sets, period after period;
- ``ChargeByBid.plan`` (one pass) against the greedy ``_affordable`` choice and its moves, and
  ``MemoryLedger.pay_each`` (a period's charge in one pass) against ``Ledger.pay_each`` (the
  balances read, the choice, the batch): the same results, errors and books;
- ``MemoryLedger.transfer_many`` (moves applied then checked, undone when refused) against a
  model of the net-change check: the same balances, or the same ``InsufficientFunds`` (account,
  balance, need) with nothing moved;
- the in-memory idempotency witness (a hash of the moves, not their SHA-256 fingerprint): a
  retry replays (moves given as lists or tuples), another use of the key conflicts.
"""

from __future__ import annotations

import dataclasses
import functools

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from merkat.bank.errors import IdempotencyConflict, InsufficientFunds, InvalidInput
from merkat.bank.ledger import AccountKind, Ledger
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import Allowance, ChargeByBid, _affordable
from merkat.runtime.economy import Economy

APPS = [f"app:j{k}" for k in range(8)]
USERS = [f"user:u{k}" for k in range(3)]


@st.composite
def economies(draw: st.DrawFn) -> dict:
    """A random economy: kind, owners (users, or now and then another application: the
    reference's case), allowances (some accounts without), balances, active sets."""
    kind = draw(st.sampled_from(["themis", "closed"]))
    owners = {a: draw(st.sampled_from(USERS + APPS[:2])) for a in APPS}
    owners = {a: o for a, o in owners.items() if o != a}
    rates = {a: (draw(st.integers(1, 50)), draw(st.integers(50, 150)))
             for a in owners if a in APPS[:2] or draw(st.booleans())}
    balances = {n: draw(st.integers(0, 120)) for n in APPS + USERS}
    active = [draw(st.lists(st.sampled_from(APPS + APPS[:2] + ["app:gone"]), max_size=12))
              for _ in range(draw(st.integers(1, 4)))]
    charges = [draw(st.lists(st.tuples(st.sampled_from(APPS), st.integers(0, 80)),
                             max_size=6)) for _ in active]
    return {"kind": kind, "owners": owners, "rates": rates, "balances": balances,
            "active": active, "charges": charges}


def build(world: dict) -> Economy:
    ledger = MemoryLedger()
    for u in USERS:
        ledger.create_account(u, AccountKind.user)
    for a in APPS:
        ledger.create_account(a, AccountKind.application, owner=USERS[0])
    economy = Economy(ledger, kind=world["kind"])
    credits = sorted((n, b) for n, b in world["balances"].items() if b > 0)
    if credits:
        ledger.mint_many(credits, "start")
    economy.owners.update(world["owners"])
    for a, (rate, cap) in world["rates"].items():
        economy.allowances[a] = Allowance(rate, cap)
    return economy


def books(economy: Economy) -> tuple:
    ledger = economy.ledger
    assert isinstance(ledger, MemoryLedger)
    assert ledger.audit().ok
    return (ledger.balances(), economy.minted, ledger._next_id,
            [dataclasses.astuple(t) for t in ledger._all_transfers()])


@settings(max_examples=300, deadline=None)
@given(economies())
def test_renew_equals_reference(world: dict) -> None:
    fast, ref = build(world), build(world)
    for period, (active, charges) in enumerate(zip(world["active"], world["charges"],
                                                   strict=True)):
        assert fast.renew(period, active) == ref.renew_reference(period, active)
        assert books(fast) == books(ref)
        for economy in (fast, ref):  # spend between periods: the balances move
            bills = [(a, x) for a, x in charges if x > 0]
            ChargeByBid("provider").apply(economy.ledger, period, bills)
    assert books(fast) == books(ref)


def test_renew_exact_numbers_and_the_owner_that_is_renewed() -> None:
    """themis: u0 is minted 20 + 15 (j1 is 15 below its cap) and gives them; j0 owns j2,
    so the mint changes a renewed account's balance between the reference's two reads:
    that period takes the reference, the same books either way."""
    world = {"kind": "themis", "owners": {"app:j0": "user:u0", "app:j1": "user:u0"},
             "rates": {"app:j0": (20, 100), "app:j1": (20, 60)},
             "balances": {"app:j1": 45}}
    e = build(world)
    assert e.renew(3, ["app:j1", "app:j0", "app:j0", "app:j5"]) == 35
    assert e.ledger.balances(["app:j0", "app:j1", "user:u0"]) == {
        "app:j0": 20, "app:j1": 60, "user:u0": 0}
    world["owners"]["app:j2"] = "app:j0"
    world["rates"]["app:j2"] = (10, 10)
    world["balances"]["app:j0"] = 85  # 15 below its cap, 5 once minted j2's 10
    fast, ref = build(world), build(world)
    assert fast.renew(0, ["app:j0", "app:j2"]) == ref.renew_reference(0, ["app:j0", "app:j2"])
    assert books(fast) == books(ref)
    assert fast.ledger.balances(["app:j0", "app:j2", "user:u0"]) == {
        "app:j0": 90, "app:j2": 10, "user:u0": 10}


def test_closed_economy_gives_what_owners_have_in_name_order() -> None:
    world = {"kind": "closed", "owners": {"app:j0": "user:u0", "app:j1": "user:u0"},
             "rates": {"app:j0": (20, 100), "app:j1": (20, 100)},
             "balances": {"user:u0": 25}}
    e = build(world)
    assert e.renew(0, ["app:j1", "app:j0"]) == 0
    assert e.ledger.balances(["app:j0", "app:j1", "user:u0"]) == {
        "app:j0": 20, "app:j1": 5, "user:u0": 0}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 40)), max_size=10),
       st.fixed_dictionaries({n: st.integers(0, 60) for n in "abcd"}))
def test_charge_plan_is_the_greedy_choice(bills: list, balances: dict) -> None:
    paid, unpaid = _affordable(bills, balances)
    moves = [(bills[k][0], "p", bills[k][1]) for k in paid if bills[k][1] > 0]
    assert ChargeByBid.plan(bills, balances, "p") == (moves, paid, unpaid)


def _net_model(bal: dict, moves: list) -> tuple[str, int, int] | dict:
    """The reference check: net changes per account (first seen first); the first account
    whose net change overdraws it, or the balances after."""
    net: dict[str, int] = {}
    for payer, payee, amount in moves:
        net[payer] = net.get(payer, 0) - amount
        net[payee] = net.get(payee, 0) + amount
    for name, delta in net.items():
        if bal[name] + delta < 0:
            return (name, bal[name], -delta)
    return {n: bal[n] + net.get(n, 0) for n in bal}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from("abcd"),
                                   st.integers(1, 50)).filter(lambda m: m[0] != m[1]),
                         min_size=1, max_size=8), max_size=6))
def test_transfer_many_is_the_net_check(batches: list) -> None:
    ledger = MemoryLedger()
    for n in "abcd":
        ledger.create_account(n, AccountKind.user)
    ledger.mint_many([(n, 40) for n in "abcd"], "start")
    for k, moves in enumerate(batches):
        before = ledger.balances()
        expected = _net_model(before, moves)
        if isinstance(expected, tuple):
            with pytest.raises(InsufficientFunds) as err:
                ledger.transfer_many(moves, "t", idempotency_key=f"k{k}")
            assert (err.value.account, err.value.balance, err.value.needed) == expected
            assert ledger.balances() == before
        else:
            ledger.transfer_many(moves, "t", idempotency_key=f"k{k}")
            assert ledger.balances() == expected
        assert ledger.audit().ok


def test_a_payer_may_dip_within_a_batch_but_not_end_below_zero() -> None:
    ledger = MemoryLedger()
    for n in "abc":
        ledger.create_account(n, AccountKind.user)
    ledger.mint_many([("a", 10), ("c", 10)], "start")
    ledger.transfer_many([("a", "b", 15), ("c", "a", 10)], "t")  # a: 10 -> -5 -> 5
    assert ledger.balances() == {"a": 5, "b": 15, "c": 0}
    with pytest.raises(InsufficientFunds) as err:  # a: 5 -> -10 -> -3: refused whole
        ledger.transfer_many([("a", "c", 15), ("b", "a", 7)], "t")
    assert (err.value.account, err.value.balance, err.value.needed) == ("a", 5, 8)
    assert ledger.balances() == {"a": 5, "b": 15, "c": 0} and ledger.audit().ok


def test_a_refused_batch_moves_nothing() -> None:
    ledger = MemoryLedger()
    for n in "ab":
        ledger.create_account(n, AccountKind.user)
    ledger.mint("a", 10, "start")
    with pytest.raises(InvalidInput, match=r"moves\[1\]"):
        ledger.transfer_many([("a", "b", 5), ("a", "b", -1)], "t")
    with pytest.raises(InvalidInput, match=r"moves\[1\]"):  # (with a key: the same error)
        ledger.transfer_many([("a", "b", 5), ["a", {"b"}, 1]], "t", idempotency_key="x")

    def fail(conn: object) -> None:
        raise RuntimeError("the caller's write failed")

    with pytest.raises(RuntimeError):
        ledger.transfer_many([("a", "b", 5)], "t", also=fail)

    class Odd(str):  # a name whose comparison fails half-way through a charge
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("interrupted")

        __hash__ = str.__hash__

    with pytest.raises(RuntimeError):
        ledger.pay_each([("a", 5), (Odd("a"), 1)], "b", "charge")
    assert ledger.balances() == {"a": 10, "b": 0}
    assert ledger.audit().ok


def test_the_witness_tells_a_retry_from_another_use_of_the_key() -> None:
    ledger = MemoryLedger(journal=False, remember=4)
    for n in "abc":
        ledger.create_account(n, AccountKind.user)
    ledger.mint_many([("a", 100)], "start", idempotency_key="m")
    assert ledger.mint_many([["a", 100]], "start", idempotency_key="m") == range(1, 2)  # type: ignore[list-item]
    with pytest.raises(IdempotencyConflict):
        ledger.mint_many([("a", 101)], "start", idempotency_key="m")
    ids = ledger.transfer_many([("a", "b", 5), ("a", "c", 6)], "t", 1, "t/1")
    assert ledger.transfer_many([["a", "b", 5], ["a", "c", 6]], "t", 1, "t/1") == ids  # type: ignore[list-item]
    with pytest.raises(IdempotencyConflict):
        ledger.transfer_many([("a", "c", 6), ("a", "b", 5)], "t", 1, "t/1")
    t = ledger.transfer("a", "b", 1, "one", idempotency_key="one")
    assert ledger.transfer("a", "b", 1, "one", idempotency_key="one") == t
    with pytest.raises(IdempotencyConflict):
        ledger.transfer("a", "c", 1, "one", idempotency_key="one")
    assert ledger.balances() == {"a": 88, "b": 6, "c": 6}


def _pay_world() -> MemoryLedger:
    ledger = MemoryLedger()
    for n in "abcdp":
        ledger.create_account(n, AccountKind.user)
    ledger.mint_many([(n, 30) for n in "abcd"], "start")
    return ledger


def _outcome(call: object) -> object:
    try:
        return call()  # type: ignore[operator]
    except Exception as exc:  # the same error, or the same result
        return (type(exc).__name__, str(exc))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("abcdpx"), st.integers(-1, 25)),
                         max_size=8), max_size=5),
       st.lists(st.sampled_from(["k0", "k1", None]), min_size=5, max_size=5))
def test_pay_each_in_one_pass_is_the_reference(batches: list, keys: list) -> None:
    """Greedy in order, zero bills, an account twice, the payee's own bill, a negative
    amount, an unknown account, keys used again: the in-memory pass gives what the
    reference (``Ledger.pay_each``) gives, and the same books."""
    fast, ref = _pay_world(), _pay_world()
    for bills, key in zip(batches, keys, strict=False):
        got = _outcome(functools.partial(fast.pay_each, bills, "p", "charge", 1, key))
        want = _outcome(functools.partial(Ledger.pay_each, ref, bills, "p", "charge", 1, key))
        if isinstance(got, tuple) and len(got) == 4:
            got = (*got[:3], list(got[3]))
            want = (*want[:3], list(want[3]))  # type: ignore[misc]
        assert got == want
        assert fast.balances() == ref.balances() and fast.audit().ok
        assert [dataclasses.astuple(t) for t in fast._all_transfers()] == \
            [dataclasses.astuple(t) for t in ref._all_transfers()]
