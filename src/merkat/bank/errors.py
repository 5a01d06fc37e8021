"""Bank errors. Every refusal is a :class:`BankError` with a one-line message; nothing changed.

Callers (the CLI, the period loop) catch :class:`BankError`; the subclasses let them tell
bad input (:class:`InvalidInput`, exit code 2) from refused operations.

This module imports nothing of merkat (:mod:`merkat.bank.money` raises its errors): an
amount in a message is rendered by :func:`credits`, the same text as
:func:`merkat.bank.money.format_amount`.
"""

from __future__ import annotations

from decimal import Decimal


def credits(micro: int) -> str:
    """Micro-credits as the exact decimal text of credits (``12500000`` -> ``"12.5"``)."""
    return format(Decimal(micro).scaleb(-6).normalize(), "f")


class BankError(Exception):
    """A refused bank operation. The ledger is unchanged when this is raised."""


class InvalidInput(BankError):
    """A malformed argument; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownAccount(BankError):
    """The named account does not exist; ``field`` names the argument that named it."""

    def __init__(self, name: str, field: str = "account") -> None:
        super().__init__(f"{field}: unknown account {name!r}")
        self.name = name
        self.field = field


class DuplicateAccount(BankError):
    """An account with this name already exists."""

    def __init__(self, name: str) -> None:
        super().__init__(f"account already exists: {name!r}")
        self.name = name


class InsufficientFunds(BankError):
    """A movement would make ``account``'s balance negative; it is refused, never clipped."""

    def __init__(self, account: str, balance: int, needed: int) -> None:
        super().__init__(
            f"insufficient funds: {account!r} has {credits(balance)}, needs {credits(needed)}"
        )
        self.account = account
        self.balance = balance
        self.needed = needed


class IdempotencyConflict(BankError):
    """An idempotency key was reused for a different operation."""

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency key {key!r} was already used for a different operation")
        self.key = key


class UnknownTransfer(BankError):
    """No transfer has this id."""

    def __init__(self, transfer_id: int) -> None:
        super().__init__(f"unknown transfer: {transfer_id}")
        self.transfer_id = transfer_id


class DatabaseError(BankError):
    """The database URL is malformed, unreachable or not initialised."""


class BadDatabaseURL(DatabaseError):
    """The database URL is malformed or has an unsupported scheme (bad input)."""


class TokenError(BankError):
    """A transfer token was refused; the subclass says why."""


class MalformedToken(TokenError):
    """The token text cannot be decoded."""


class UnknownKey(TokenError):
    """The token was signed by a key that is not the payer's registered public key."""


class BadSignature(TokenError):
    """The signature does not verify against the payer's registered public key."""


class TokenMismatch(TokenError):
    """The token's fields (amount, payer, payee) differ from the recorded transfer."""


class TokenReplayed(TokenError):
    """The token (or another token for the same transfer) was already redeemed."""


class TokenExpired(TokenError):
    """The token's validity ended before it was redeemed."""
