"""A themis period's renewals on the in-memory ledger in one pass over kept rows
(:mod:`merkat.bank.memory_renew`), pinned to :meth:`Economy.renew_reference`: the same mints,
moves, journal, transfer ids and balances while the kept rows are reused period after period
and rebuilt when an allowance, an owner or the active set changes; a retried period replays;
a mint over the supply bound moves nothing."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from tests.test_renewal_one_pass import books

from merkat.bank import memory_renew
from merkat.bank.errors import InvalidInput
from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.bank.money import MAX_TOTAL
from merkat.bank.policies import Allowance, ChargeByBid
from merkat.runtime.economy import Economy

APPS = [f"app:j{k}" for k in range(6)]
USERS = [f"user:u{k}" for k in range(3)]


def build(start: dict[str, int]) -> Economy:
    ledger = MemoryLedger()
    for u in USERS:
        ledger.create_account(u, AccountKind.user)
    for a in APPS:
        ledger.create_account(a, AccountKind.application, owner=USERS[0])
    economy = Economy(ledger, kind="themis")
    credits = sorted((n, b) for n, b in start.items() if b > 0)
    if credits:
        ledger.mint_many(credits, "start")
    for k, a in enumerate(APPS):
        economy.owners[a] = USERS[k % len(USERS)]
        economy.allowances[a] = Allowance(10 + k, 60 + 10 * k)
    return economy


step = st.one_of(
    st.tuples(st.just("period"), st.lists(st.tuples(st.sampled_from(APPS),
                                                    st.integers(0, 70)), max_size=4)),
    st.tuples(st.just("owner"), st.sampled_from(APPS), st.sampled_from(USERS)),
    st.tuples(st.just("allowance"), st.sampled_from(APPS), st.integers(1, 40),
              st.integers(1, 120)),
    st.tuples(st.just("drop"), st.sampled_from(APPS)),
    st.tuples(st.just("active"), st.lists(st.sampled_from(APPS), max_size=6)),
)


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({n: st.integers(0, 90) for n in APPS + USERS}),
       st.lists(step, max_size=14))
def test_the_kept_rows_renew_as_the_reference(start: dict, script: list) -> None:
    fast, ref = build(start), build(start)
    active = list(APPS)
    period = 0
    for s in script:
        for economy in (fast, ref):
            if s[0] == "owner":
                economy.owners[s[1]] = s[2]
            elif s[0] == "allowance":
                economy.allowances[s[1]] = Allowance(s[2], s[3])
            elif s[0] == "drop":
                economy.allowances.pop(s[1], None)
        if s[0] == "active":
            active = list(s[1])
        if s[0] != "period":
            continue
        assert fast.renew(period, active) == ref.renew_reference(period, active)
        assert books(fast) == books(ref)
        for economy in (fast, ref):  # spend between periods: the balances move
            ChargeByBid("provider").apply(economy.ledger, period,
                                          [(a, x) for a, x in s[1] if x > 0])
        period += 1
    assert books(fast) == books(ref)


def test_the_one_pass_is_taken_and_its_rows_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exact numbers: j0 (rate 10, cap 60) at 55 gets 5, j1 (11, 70) at 0 gets 11; their
    owners u0 and u1 are minted 5 and 11 and hold what they held; the rows are built once
    for the same active list and again when an owner changes."""
    calls: list[int] = []
    one_pass = memory_renew.renew

    def counted(*args: Any) -> tuple[int | None, memory_renew.Table | None]:
        calls.append(args[-1])
        return one_pass(*args)

    monkeypatch.setattr(memory_renew, "renew", counted)
    economy = build({"app:j0": 55, "user:u0": 7})
    active = ["app:j1", "app:j0"]
    assert economy.renew(0, active) == 16
    rows = economy._table
    assert economy.ledger.balances(["app:j0", "app:j1", "user:u0", "user:u1"]) == {
        "app:j0": 60, "app:j1": 11, "user:u0": 7, "user:u1": 0}
    assert economy.renew(1, active) == 11  # j0 at its cap, j1 11 more
    assert economy._table is rows and calls == [0, 1]
    economy.owners["app:j1"] = "user:u2"
    assert economy.renew(2, active) == 11
    assert economy._table is not rows
    assert economy.ledger.balances(["user:u1", "user:u2"]) == {"user:u1": 0, "user:u2": 0}
    moves = [t for t in economy.ledger.history("app:j1") if t.period == 2]
    assert [(t.payer, t.payee, t.amount, t.reason) for t in moves] == [
        ("user:u2", "app:j1", 11, "credit manager")]


def test_a_retried_period_replays_and_an_owner_renewed_takes_the_reference() -> None:
    economy = build({})
    active = ["app:j0", "app:j1"]
    assert economy.renew(0, active) == 21
    before = books(economy)
    economy.ledger.transfer("app:j0", "user:u0", 4, "spend")
    economy.renew(0, active)  # the keys of period 0 replay (the general path): nothing moves
    assert economy.ledger.balance("app:j0") == 6
    assert books(economy)[2] == before[2] + 1  # only the spend's transfer id
    ref = build({})
    ref.renew_reference(0, active)
    ref.ledger.transfer("app:j0", "user:u0", 4, "spend")
    for e in (economy, ref):
        e.owners["app:j1"] = "app:j0"  # an owner among the due accounts: the reference
    assert economy.renew(1, active) == ref.renew_reference(1, active)
    mine, theirs = books(economy), books(ref)  # (the retry counted its replayed mint)
    assert (mine[0], mine[2], mine[3]) == (theirs[0], theirs[2], theirs[3])


def test_a_mint_over_the_supply_bound_moves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    economy = build({"app:j0": 10})
    ledger = economy.ledger
    assert isinstance(ledger, MemoryLedger)
    before = ledger.balances()
    monkeypatch.setattr(ledger, "_minted", MAX_TOTAL)  # (check_total: the supply's bound)
    with pytest.raises(InvalidInput):
        economy.renew(0, list(APPS))
    assert ledger.balances() == before
