"""Money: an integer number of micro-credits.

Contract: every amount stored or moved by the bank is an ``int`` of micro-credits
(1 credit = 1,000,000 micro-credits). Text amounts ("12.5") are parsed exactly with
:class:`decimal.Decimal`; more than 6 decimals, negative values, NaN/infinity and garbage
are refused with :class:`~merkat.bank.errors.InvalidInput` naming the field.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from merkat.bank.errors import InvalidInput

MICRO = 1_000_000
"""Micro-credits per credit."""

MAX_AMOUNT = 2**62
"""Largest amount (micro-credits) the bank accepts in one movement; fits a signed 64-bit column."""

MAX_TOTAL = MAX_AMOUNT
"""Most money (micro-credits) a bank may hold in all: a mint that would raise the sum of all
balances above it is refused before anything is written. Every balance, and every sum of
balances, is then at most 2**62 and fits a signed 64-bit column (SQLite never turns it into a
float, PostgreSQL never overflows)."""

MAX_ID = 2**63 - 1
"""Largest transfer id or period number (a signed 64-bit column)."""


def parse_amount(
    text: str | int | Decimal, field: str = "amount", *, allow_zero: bool = False
) -> int:
    """Parse a credit amount (``"12.5"``, ``"3"``, ``Decimal``) into micro-credits, exactly.

    Raises :class:`InvalidInput` (naming ``field``) when the text is not a finite decimal
    number, is negative (or zero unless ``allow_zero``), has more than 6 decimals, or
    exceeds :data:`MAX_AMOUNT`.
    """
    if isinstance(text, bool):
        raise InvalidInput(field, f"not a number: {text!r}")
    if isinstance(text, str) and len(text) > 100:
        raise InvalidInput(field, f"not a credit amount: {text[:20]!r}... ({len(text)} characters)")
    try:
        value = Decimal(text.strip()) if isinstance(text, str) else Decimal(text)
    except (InvalidOperation, ValueError):
        raise InvalidInput(field, f"not a decimal number: {text!r}") from None
    if not value.is_finite():
        raise InvalidInput(field, f"not a finite number: {text!r}")
    if value < 0:
        raise InvalidInput(field, f"must not be negative: {text}")
    if value > Decimal(MAX_AMOUNT) / MICRO:
        raise InvalidInput(field, f"too large: {text} (at most {format_amount(MAX_AMOUNT)})")
    micro = value * MICRO
    if micro != micro.to_integral_value():
        raise InvalidInput(field, f"at most 6 decimals (1 micro-credit): {text}")
    result = int(micro)
    if result == 0 and not allow_zero:
        raise InvalidInput(field, f"must be positive: {text}")
    if result > MAX_AMOUNT:
        raise InvalidInput(field, f"too large: {text}")
    return result


def format_amount(micro: int) -> str:
    """Format micro-credits as an exact decimal string of credits (``12500000`` -> ``"12.5"``)."""
    sign = "-" if micro < 0 else ""
    whole, frac = divmod(abs(micro), MICRO)
    if frac == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{frac:06d}".rstrip("0")
