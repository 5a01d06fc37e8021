"""The bank: accounts, budgets, renewal, charging, redistribution and signed transfer tokens.

- :mod:`merkat.bank.ledger` — the :class:`Ledger` protocol and its records;
- :mod:`merkat.bank.memory` — :class:`MemoryLedger` (simulator);
- :mod:`merkat.bank.sql` / :mod:`merkat.bank.db` — :class:`SqlLedger` on SQLite/PostgreSQL
  (its machinery in :mod:`merkat.bank.sqlcore`, its tables in :mod:`merkat.bank.schema`);
- :mod:`merkat.bank.policies` — initial budget, renewal, credit manager, charging,
  Virtual Bank, idle tax;
- :mod:`merkat.bank.tokens` — Ed25519 transfer tokens;
- :mod:`merkat.bank.money` — micro-credit amounts.
"""

from typing import TYPE_CHECKING, Any

from merkat.bank.errors import BankError, InsufficientFunds, InvalidInput
from merkat.bank.ledger import Account, AccountKind, Audit, Ledger, Move, Transfer, TransferKind
from merkat.bank.money import format_amount, parse_amount
from merkat.defaults import MICRO

if TYPE_CHECKING:
    from merkat.bank.memory import MemoryLedger


def __getattr__(name: str) -> Any:
    # MemoryLedger is the simulator's: the bank's commands (SQL) do not pay for its import.
    if name == "MemoryLedger":
        from merkat.bank.memory import MemoryLedger

        return MemoryLedger
    raise AttributeError(f"module 'merkat.bank' has no attribute {name!r}")

__all__ = [
    "MICRO",
    "Account",
    "AccountKind",
    "Audit",
    "BankError",
    "InsufficientFunds",
    "InvalidInput",
    "Ledger",
    "MemoryLedger",
    "Move",
    "Transfer",
    "TransferKind",
    "format_amount",
    "parse_amount",
]
