"""The ledger contract, run against every implementation (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from merkat.bank.errors import (
    DuplicateAccount,
    IdempotencyConflict,
    InsufficientFunds,
    InvalidInput,
    UnknownAccount,
    UnknownTransfer,
)
from merkat.bank.ledger import AccountKind, Ledger, TransferKind
from merkat.bank.money import MICRO
from test_bank_support import ledger_fixture, make_ledger_fixture  # noqa: F401

C = MICRO  # one credit


def setup_users(ledger: Ledger) -> None:
    ledger.create_account("alice", AccountKind.user)
    ledger.create_account("bob", AccountKind.user)
    ledger.create_account("app", AccountKind.application, owner="alice")
    ledger.create_account("prov", AccountKind.provider)
    ledger.mint("alice", 100 * C, "seed")


def test_accounts(ledger: Ledger) -> None:
    setup_users(ledger)
    assert [a.name for a in ledger.accounts()] == ["alice", "app", "bob", "prov"]
    assert [a.name for a in ledger.accounts(AccountKind.user)] == ["alice", "bob"]
    app = ledger.get_account("app")
    assert (app.kind, app.owner) == (AccountKind.application, "alice")
    assert ledger.has_account("bob") and not ledger.has_account("carol")
    with pytest.raises(DuplicateAccount):
        ledger.create_account("alice", AccountKind.user)
    with pytest.raises(UnknownAccount):
        ledger.create_account("app2", AccountKind.application, owner="carol")
    with pytest.raises(InvalidInput, match="owner"):
        ledger.create_account("app3", AccountKind.application, owner="prov")
    with pytest.raises(InvalidInput, match="owner"):
        ledger.create_account("app4", AccountKind.application)
    with pytest.raises(InvalidInput, match="account"):
        ledger.create_account("bad name", AccountKind.user)
    assert len(ledger.accounts()) == 4


def test_mint_transfer_burn_and_audit(ledger: Ledger) -> None:
    setup_users(ledger)
    t = ledger.transfer("alice", "bob", 12_500_000, "gift", period=3)
    assert (t.kind, t.payer, t.payee, t.amount, t.period) == (
        TransferKind.transfer,
        "alice",
        "bob",
        12_500_000,
        3,
    )
    ledger.burn("bob", 2_500_000, "expiry")
    assert ledger.balances() == {"alice": 87_500_000, "bob": 10_000_000, "app": 0, "prov": 0}
    a = ledger.audit()
    assert (a.minted, a.burned, a.sum_of_balances, a.ok) == (100 * C, 2_500_000, 97_500_000, True)
    assert ledger.get_transfer(t.id) == t
    hist = ledger.history("bob")
    assert [h.kind for h in hist] == [TransferKind.burn, TransferKind.transfer]
    assert ledger.history("bob", limit=1)[0].amount == 2_500_000


def test_overdraw_refused_not_clipped(ledger: Ledger) -> None:
    setup_users(ledger)
    with pytest.raises(InsufficientFunds, match=r"'alice' has 100, needs 100\.000001"):
        ledger.transfer("alice", "bob", 100 * C + 1, "too much")
    with pytest.raises(InsufficientFunds):
        ledger.burn("bob", 1, "nothing to burn")
    assert ledger.balances()["alice"] == 100 * C and ledger.balances()["bob"] == 0
    assert len(ledger.history("alice")) == 1
    ledger.transfer("alice", "bob", 100 * C, "everything")  # exactly the balance is fine
    assert ledger.balance("alice") == 0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("alice", "bob", 0, "r"), "amount"),
        (("alice", "bob", -5, "r"), "amount"),
        (("alice", "bob", 1.5, "r"), "amount"),
        (("alice", "bob", 1, ""), "reason"),
        (("alice", "alice", 1, "r"), "payee"),
        (("alice", "no such", 1, "r"), "payee"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(
    ledger: Ledger, args: tuple[Any, ...], field: str
) -> None:
    setup_users(ledger)
    with pytest.raises(InvalidInput) as err:
        ledger.transfer(*args)
    assert err.value.field == field
    with pytest.raises(UnknownAccount, match="carol"):
        ledger.transfer("alice", "carol", 1, "r")
    with pytest.raises(InvalidInput, match="period"):
        ledger.transfer("alice", "bob", 1, "r", period=-1)
    assert ledger.balances()["alice"] == 100 * C
    assert ledger.audit().ok


def test_idempotency_key_moves_money_once(ledger: Ledger) -> None:
    setup_users(ledger)
    t1 = ledger.transfer("alice", "bob", 7 * C, "pay", idempotency_key="k-1")
    t2 = ledger.transfer("alice", "bob", 7 * C, "pay", idempotency_key="k-1")
    assert t1 == t2
    assert ledger.balance("bob") == 7 * C
    assert len(ledger.history("bob")) == 1
    with pytest.raises(IdempotencyConflict, match="k-1"):
        ledger.transfer("alice", "bob", 8 * C, "pay", idempotency_key="k-1")
    with pytest.raises(IdempotencyConflict):
        ledger.mint("bob", 7 * C, "pay", idempotency_key="k-1")
    m1 = ledger.mint("bob", 1 * C, "m", idempotency_key="m-1")
    assert ledger.mint("bob", 1 * C, "m", idempotency_key="m-1") == m1
    assert ledger.balance("bob") == 8 * C
    moves = [("alice", "bob", 1 * C), ("alice", "prov", 2 * C)]
    ids = ledger.transfer_many(moves, "batch", period=1, idempotency_key="b-1")
    assert list(ledger.transfer_many(moves, "batch", period=1, idempotency_key="b-1")) == list(ids)
    assert ledger.balances(["alice", "bob", "prov"]) == {
        "alice": 90 * C,
        "bob": 9 * C,
        "prov": 2 * C,
    }
    with pytest.raises(IdempotencyConflict):
        ledger.transfer_many(moves[:1], "batch", period=1, idempotency_key="b-1")
    assert ledger.audit().ok


def test_transfer_many_is_all_or_nothing_on_net_changes(ledger: Ledger) -> None:
    setup_users(ledger)
    ledger.create_account("app2", AccountKind.application, owner="alice")
    ledger.transfer_many([("alice", "app", 10 * C), ("alice", "app2", 5 * C)], "fund")
    # app pays 12 but receives 3 within the batch: net -9 <= 10, allowed.
    ids = ledger.transfer_many(
        [("app", "prov", 12 * C), ("app2", "app", 3 * C), ("app2", "prov", 2 * C)],
        "charge",
        period=5,
    )
    assert len(ids) == 3 and len(set(ids)) == 3
    assert ledger.balances(["app", "app2", "prov"]) == {"app": 1 * C, "app2": 0, "prov": 14 * C}
    assert [ledger.get_transfer(i).amount for i in ids] == [12 * C, 3 * C, 2 * C]
    before = ledger.balances()
    with pytest.raises(InsufficientFunds, match="'app'"):
        ledger.transfer_many([("prov", "bob", 1 * C), ("app", "prov", 2 * C)], "charge")
    with pytest.raises(UnknownAccount):
        ledger.transfer_many([("prov", "bob", 1 * C), ("ghost", "prov", 2 * C)], "charge")
    with pytest.raises(InvalidInput, match=r"moves\[1\].amount"):
        ledger.transfer_many([("prov", "bob", 1 * C), ("app", "prov", 0)], "charge")
    assert ledger.balances() == before
    assert list(ledger.transfer_many([], "nothing")) == []
    with pytest.raises(UnknownTransfer):
        ledger.get_transfer(10_000)
    assert ledger.audit().ok


def test_large_batch_exact_totals(ledger: Ledger) -> None:
    ledger.create_account("u", AccountKind.user)
    ledger.create_account("p", AccountKind.provider)
    apps = [f"a{i}" for i in range(200)]
    for a in apps:
        ledger.create_account(a, AccountKind.application, owner="u")
    ledger.mint("u", 200 * C, "seed")
    ledger.transfer_many([("u", a, C) for a in apps], "fund")
    ids = ledger.transfer_many([(apps[k % 200], "p", 1 + k) for k in range(2000)], "charge")
    assert len(ids) == 2000
    assert ledger.balance("p") == sum(1 + k for k in range(2000)) == 2_001_000
    assert sum(ledger.balances(apps).values()) == 200 * C - 2_001_000
    assert ledger.audit().ok


def test_mint_many_in_one_transaction(ledger: Ledger) -> None:
    setup_users(ledger)
    ids = ledger.mint_many([("bob", 2 * C), ("app", 3 * C), ("bob", 1)], "renewal", 9, "r-9")
    assert len(ids) == 3
    assert [ledger.get_transfer(i).kind for i in ids] == [TransferKind.mint] * 3
    assert ledger.get_transfer(ids[1]).payee == "app" and ledger.get_transfer(ids[1]).payer is None
    assert list(
        ledger.mint_many([("bob", 2 * C), ("app", 3 * C), ("bob", 1)], "renewal", 9, "r-9")
    ) == list(ids)
    with pytest.raises(IdempotencyConflict):
        ledger.mint_many([("bob", 5)], "renewal", 9, "r-9")
    before = ledger.balances()
    with pytest.raises(UnknownAccount):
        ledger.mint_many([("bob", 5), ("ghost", 5)], "renewal")
    with pytest.raises(InvalidInput, match=r"credits\[0\]\.amount"):
        ledger.mint_many([("bob", 0)], "renewal")
    assert ledger.balances() == before
    assert ledger.balances(["bob", "app"]) == {"bob": 2 * C + 1, "app": 3 * C}
    audit = ledger.audit()
    assert audit.ok and audit.minted == 105 * C + 1
