"""Money policies only the bank's tests use (they test the ledger's mint and ``mint_many``
paths through them): a once-only initial budget and a capped renewal minted into accounts.
The service and the simulator fund applications through :mod:`merkat.runtime.economy`
(``initial budget`` and ``allowance/<p>`` mints, :class:`~merkat.bank.policies.Allowance`).
Imported by test_bank_*; holds no tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from merkat.bank.errors import IdempotencyConflict
from merkat.bank.ledger import Ledger, Transfer
from merkat.bank.policies import Allowance, _digest, _due, _positive


@dataclass(frozen=True)
class InitialBudget:
    """Mint ``amount`` micro-credits into a new account, once (key ``initial-budget/ACCOUNT``)."""

    amount: int

    def __post_init__(self) -> None:
        _positive(self.amount, "amount")

    def apply(self, ledger: Ledger, account: str, period: int | None = None) -> Transfer:
        return ledger.mint(
            account,
            self.amount,
            "initial budget",
            period,
            idempotency_key=f"initial-budget/{account}",
        )


@dataclass(frozen=True)
class Renewal:
    """Mint each account's allowance every ``every`` periods (Themis: budgets renewed at a
    rate, the accumulated budget capped), all accounts in one transaction. Returns
    ``{account: minted}``; a second call for the same period and accounts mints nothing."""

    every: int = 1

    def __post_init__(self) -> None:
        _positive(self.every, "every")

    @staticmethod
    def plan(balances: Mapping[str, int], allowances: Mapping[str, Allowance]) -> dict[str, int]:
        out = {a: allowances[a].due(balances[a]) for a in sorted(allowances)}
        return {a: x for a, x in out.items() if x > 0}

    def apply(
        self, ledger: Ledger, period: int, allowances: Mapping[str, Allowance]
    ) -> dict[str, int]:
        if not _due(period, self.every) or not allowances:
            return {}
        plan = self.plan(ledger.balances(allowances), allowances)
        if not plan:
            return {}
        key = f"renewal/{period}/{_digest(sorted(allowances))}"
        try:
            ledger.mint_many(list(plan.items()), "renewal", period, key)
        except IdempotencyConflict:
            return {}  # these accounts were already renewed in this period: never twice
        return plan
