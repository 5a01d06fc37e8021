"""Bank policies with exact numbers, against every ledger implementation."""

from __future__ import annotations

import pytest

from merkat.bank.errors import IdempotencyConflict, InvalidInput
from merkat.bank.ledger import AccountKind, Ledger
from merkat.bank.money import MICRO
from merkat.bank.policies import (
    Allowance,
    ChargeByBid,
    ChargeByUse,
    CreditManager,
    IdleTax,
    VirtualBank,
    hold_account,
    split_equally,
)
from test_bank_budget_support import InitialBudget, Renewal
from test_bank_support import ledger_fixture, make_ledger_fixture  # noqa: F401

C = MICRO


def world(ledger: Ledger, users: int = 3) -> list[str]:
    names = [f"u{i}" for i in range(users)]
    for u in names:
        ledger.create_account(u, AccountKind.user)
    ledger.create_account("prov", AccountKind.provider)
    return names


def test_allowance_due_never_exceeds_cap() -> None:
    a = Allowance(rate=20, cap=60)
    assert [a.due(b) for b in (0, 40, 45, 60, 75)] == [20, 20, 15, 0, 0]
    with pytest.raises(InvalidInput, match="rate"):
        Allowance(rate=0, cap=1)


def test_initial_budget_once(ledger: Ledger) -> None:
    world(ledger)
    budget = InitialBudget(60 * C)
    t1 = budget.apply(ledger, "u0")
    assert budget.apply(ledger, "u0") == t1  # idempotent per account
    assert ledger.balance("u0") == 60 * C
    assert ledger.audit().minted == 60 * C


def test_renewal_at_rate_capped(ledger: Ledger) -> None:
    world(ledger)
    ledger.mint("u1", 50 * C, "seed")
    allow = {"u0": Allowance(20 * C, 60 * C), "u1": Allowance(20 * C, 60 * C)}
    r = Renewal()
    assert r.apply(ledger, 1, allow) == {"u0": 20 * C, "u1": 10 * C}
    assert r.apply(ledger, 2, allow) == {"u0": 20 * C}
    assert r.apply(ledger, 3, allow) == {"u0": 20 * C}
    assert r.apply(ledger, 4, allow) == {}
    assert ledger.balances(["u0", "u1"]) == {"u0": 60 * C, "u1": 60 * C}
    assert r.apply(ledger, 3, allow) == {}  # a period re-run never renews twice
    every3 = Renewal(every=3)
    ledger.transfer("u0", "prov", 45 * C, "spend")
    assert every3.apply(ledger, 4, allow) == {}
    assert every3.apply(ledger, 6, allow) == {"u0": 20 * C}
    assert ledger.audit().ok


def test_credit_manager_moves_from_owner_to_application(ledger: Ledger) -> None:
    world(ledger)
    ledger.create_account("vp1", AccountKind.application, owner="u0")
    ledger.create_account("vp2", AccountKind.application, owner="u0")
    ledger.create_account("vp3", AccountKind.application, owner="u1")
    ledger.mint("u0", 25 * C, "seed")
    ledger.mint("u1", 100 * C, "seed")
    allow = {
        "vp1": Allowance(10 * C, 30 * C),
        "vp2": Allowance(20 * C, 30 * C),
        "vp3": Allowance(5 * C, 7 * C),
    }
    cm = CreditManager()
    # u0 has 25 for vp1 (10) then vp2 (20): vp2 gets only the 15 left, never an overdraft.
    assert cm.apply(ledger, 1, allow) == {"vp1": 10 * C, "vp2": 15 * C, "vp3": 5 * C}
    assert ledger.balances(["u0", "u1", "vp3"]) == {"u0": 0, "u1": 95 * C, "vp3": 5 * C}
    assert cm.apply(ledger, 2, allow) == {"vp3": 2 * C}  # capped at 7
    ledger.mint("u0", 1 * C, "more")
    with pytest.raises(IdempotencyConflict):
        cm.apply(ledger, 2, allow)  # same period, different moves now: already applied
    assert ledger.balance("u0") == 1 * C
    assert ledger.audit().ok


def test_charge_by_bid(ledger: Ledger) -> None:
    world(ledger)
    for a in ("vp1", "vp2"):
        ledger.create_account(a, AccountKind.application, owner="u0")
    ledger.mint("vp1", 10 * C, "seed")
    ledger.mint("vp2", 3 * C, "seed")
    bills = [("vp1", 4 * C), ("vp2", 2 * C), ("vp1", 4 * C), ("vp2", 2 * C), ("vp1", 3 * C)]
    result = ChargeByBid("prov").apply(ledger, 7, bills)
    assert result.paid == (0, 1, 2)
    assert result.unpaid == (3, 4)  # vp2 has 1 left, vp1 has 2 left
    assert result.total == 10 * C
    assert ledger.balances(["vp1", "vp2", "prov"]) == {"vp1": 2 * C, "vp2": 1 * C, "prov": 10 * C}
    again = ChargeByBid("prov").apply(ledger, 8, [("vp1", 2 * C)])
    assert again.paid == (0,) and ledger.balance("vp1") == 0
    assert all(t.period in (7, 8) for t in ledger.history("prov"))
    assert ledger.audit().ok


def test_charge_by_use_refunds_unspent_and_boost(ledger: Ledger) -> None:
    world(ledger)
    ledger.create_account("job", AccountKind.application, owner="u0")
    ledger.create_account("job2", AccountKind.application, owner="u0")
    ledger.mint("job", 10 * C, "seed")
    ledger.mint("job2", 1 * C, "seed")
    cbu = ChargeByUse("prov")
    r = cbu.reserve(ledger, 1, [("job", 6 * C), ("job2", 2 * C)])
    assert r.paid == (0,) and r.unpaid == (1,)
    assert ledger.balances(["job", hold_account("job")]) == {"job": 4 * C, "job:hold": 6 * C}
    cbu.reserve(ledger, 2, [("job", 1 * C)])  # boost the running job
    s = cbu.settle(ledger, 3, {"job": 2_500_000, "job2": 0})
    assert s.charged == {"job": 2_500_000}
    assert s.refunded == {"job": 4_500_000}
    assert ledger.balances(["job", "job:hold", "prov"]) == {
        "job": 7_500_000,
        "job:hold": 0,
        "prov": 2_500_000,
    }
    # Use beyond the deposit is charged only up to the deposit.
    cbu.reserve(ledger, 4, [("job", 1 * C)])
    assert cbu.settle(ledger, 5, {"job": 5 * C}).charged == {"job": 1 * C}
    assert ledger.audit().ok


def test_split_equally_keeps_remainder() -> None:
    assert split_equally(10, ["a", "b", "c"]) == (3, 1)
    assert split_equally(2, ["a", "b", "c"]) == (0, 2)
    assert split_equally(7, []) == (0, 7)


def test_virtual_bank_redistributes_every_k_with_carried_remainder(ledger: Ledger) -> None:
    users = world(ledger, users=3)
    ledger.create_account("prov2", AccountKind.provider)
    ledger.mint("prov", 10, "income")
    ledger.mint("prov2", 1, "income")
    vb = VirtualBank(every=2)
    assert vb.apply(ledger, 1) is None
    r = vb.apply(ledger, 2)
    assert r is not None
    assert (r.gathered, r.share, r.users, r.carried) == (11, 3, 3, 2)
    assert ledger.balances([*users, "prov", "prov2", "virtual-bank"]) == {
        "u0": 3,
        "u1": 3,
        "u2": 3,
        "prov": 0,
        "prov2": 0,
        "virtual-bank": 2,
    }
    ledger.mint("prov", 1, "income")
    r2 = vb.apply(ledger, 4)  # the carried 2 plus 1 new: one each
    assert r2 is not None and (r2.gathered, r2.share, r2.carried) == (1, 1, 0)
    assert ledger.balances(users) == {"u0": 4, "u1": 4, "u2": 4}
    assert ledger.audit().ok and ledger.audit().sum_of_balances == 12


def test_idle_tax_goes_back_through_the_virtual_bank(ledger: Ledger) -> None:
    world(ledger, users=2)
    ledger.mint("u0", 100 * C, "seed")
    ledger.mint("u1", 10 * C + 7, "seed")
    tax = IdleTax(rate_ppm=100_000, exempt=5 * C)  # 10 % above 5 credits
    assert tax.apply(ledger, 1) == {"u0": 9_500_000, "u1": 500_000}  # (10.000007-5)*0.1 floored
    assert ledger.balance("virtual-bank") == 10 * C
    VirtualBank().apply(ledger, 1)
    assert ledger.balances(["u0", "u1", "virtual-bank"]) == {
        "u0": 95_500_000,
        "u1": 14_500_007,
        "virtual-bank": 0,
    }
    with pytest.raises(InvalidInput, match="rate_ppm"):
        IdleTax(rate_ppm=2_000_000)
    assert ledger.audit().ok
