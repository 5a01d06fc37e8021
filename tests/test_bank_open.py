"""An admitted application's account opened and funded in one step
(:func:`merkat.bank.memory_open.open_funded`, ``Economy.fused_open``) against the four ledger
calls it replaces (``fused_open = False``: create the owner, create the application, mint the
initial budget, move it): over random admissions, some of them bad (an invalid or reserved
name, an account that exists, an owner that is not a user, a key already used, a budget of
nothing or above what the bank may hold, an owner named as its application), the same
outcome (the same error, or none) and the same books after each: accounts, balances,
journal, transfer ids, idempotency keys and their witnesses, the kept keys of a ledger that
remembers few, minted totals and audit."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from merkat.bank import memory_open
from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.runtime.economy import Economy
from test_bank_pair import _books

OWNERS = ["users", "user:u1", "app:j0", "bad name", "u/token-3", "provider", "app:j9"]
ACCOUNTS = ["app:j0", "app:j1", "app:j2", "app:j3", "app:j9", "bad name", "app:x/token-1",
            "users", 7]


def _economy(remember: int | None, used: list[str]) -> Economy:
    ledger = MemoryLedger(journal=False, remember=remember) if remember else MemoryLedger()
    ledger.create_account("user:u1", AccountKind.user)
    ledger.mint("user:u1", 5, "start")
    for account in used:  # a key some other operation used before
        ledger.mint("user:u1", 1, "other", None, memory_open.mint_key(account))
    return Economy(ledger)


def _state(economy: Economy) -> tuple[object, ...]:
    ledger = economy.ledger
    assert isinstance(ledger, MemoryLedger)
    return (_books(economy), [dataclasses.astuple(a) for a in ledger._accounts],
            dict(ledger._index), economy.initial_budgets, dict(economy.owners),
            dict(economy.allowances))


def _open(economy: Economy, app: SimpleNamespace, period: int) -> str | None:
    try:
        economy.open(app, period)  # type: ignore[arg-type]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


admissions = st.lists(st.tuples(
    st.sampled_from(OWNERS), st.sampled_from(ACCOUNTS),
    st.sampled_from([0.0, 1.0, 2.5, 1e-7, 1e13, 4.7e12, 1e20]),
    st.sampled_from([0.0, 0.5]), st.sampled_from([0, 3, 2**63, -1])), max_size=8)


@settings(max_examples=300, deadline=None)
@given(admissions, st.sampled_from([None, 1, 2, 5]),
       st.lists(st.sampled_from(["app:j1", "app:j2"]), max_size=1, unique=True))
def test_open_in_one_step_equals_the_four_calls(admitted: list[tuple], remember: int | None,
                                                used: list[str]) -> None:
    fast, ref = _economy(remember, used), _economy(remember, used)
    ref.fused_open = False  # type: ignore[misc]
    for k, (owner, account, budget, renewal, period) in enumerate(admitted):
        spec = SimpleNamespace(id=f"j{k}", owner=owner, budget=budget, renewal=renewal,
                               budget_cap=None)
        app = SimpleNamespace(spec=spec, account=account)
        assert _open(fast, app, period) == _open(ref, app, period)
        assert _state(fast) == _state(ref)


def test_the_one_step_is_taken_and_keeps_the_books(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual admission (a new user, then another application of hers) takes the one step:
    the owner's account, the application's, two journaled transfers, audit OK."""
    economy = _economy(None, [])
    calls = []
    step = memory_open.open_funded
    monkeypatch.setattr(memory_open, "open_funded",
                        lambda *a: calls.append(step(*a)) or calls[-1])
    for k, owner in enumerate(["user:new", "user:new"]):
        spec = SimpleNamespace(id=f"j{k}", owner=owner, budget=2.0, renewal=0.5,
                               budget_cap=None)
        economy.open(SimpleNamespace(spec=spec, account=f"app:j{k}"), 4)  # type: ignore[arg-type]
    assert calls == [True, True]
    ledger = economy.ledger
    assert ledger.balances(["user:new", "app:j0", "app:j1"]) == \
        {"user:new": 0, "app:j0": 2_000_000, "app:j1": 2_000_000}
    t = ledger.get_transfer(ledger._next_id - 1)  # type: ignore[attr-defined]
    assert (t.payer, t.payee, t.amount, t.period, t.idempotency_key) == \
        ("user:new", "app:j1", 2_000_000, 4, "initial-transfer/app:j1")
    assert ledger.audit().ok and economy.minted == economy.initial_budgets == 4_000_000
