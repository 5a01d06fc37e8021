"""Money: an integer number of micro-credits.

Contract: every amount stored or moved by the bank is an ``int`` of micro-credits
(1 credit = 1,000,000 micro-credits). Text amounts follow one grammar, :data:`AMOUNT_TEXT`:
ASCII digits with at most one decimal point and at least one digit on each side of it
(``"12.5"``, ``"3"``, ``"0.000001"``), optionally surrounded by ASCII spaces; they are parsed
exactly with :class:`decimal.Decimal`. Everything else — a sign, an exponent (``1e2``),
underscores (``1_0``), non-ASCII digits (``١٠``), NaN/infinity, more than 6 decimals
(below one micro-credit) — is refused with :class:`~merkat.bank.errors.InvalidInput`
naming the field.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from merkat.bank.errors import InvalidInput
from merkat.defaults import MICRO

MAX_AMOUNT = 2**62
"""Largest amount (micro-credits) the bank accepts in one movement; fits a signed 64-bit column."""

MAX_TOTAL = MAX_AMOUNT
"""Most money (micro-credits) a bank may hold in all: a mint that would raise the sum of all
balances above it is refused before anything is written. Every balance, and every sum of
balances, is then at most 2**62 and fits a signed 64-bit column (SQLite never turns it into a
float, PostgreSQL never overflows)."""

MAX_ID = 2**63 - 1
"""Largest transfer id or period number (a signed 64-bit column)."""

AMOUNT_TEXT = re.compile(r"[0-9]+(?:\.[0-9]+)?\Z", re.ASCII)
"""The grammar of a credit amount in text: ``DIGITS [ "." DIGITS ]``, ASCII only (after the
surrounding ASCII spaces are dropped)."""


def parse_amount(
    text: str | int | Decimal, field: str = "amount", *, allow_zero: bool = False
) -> int:
    """Parse a credit amount (text of the grammar :data:`AMOUNT_TEXT`, an ``int`` of credits
    or a ``Decimal``) into micro-credits, exactly.

    Raises :class:`InvalidInput` (naming ``field``) when the text does not follow the grammar,
    the number is not finite, is negative (or zero unless ``allow_zero``), has more than 6
    decimals, or exceeds :data:`MAX_AMOUNT`.
    """
    if isinstance(text, bool):
        raise InvalidInput(field, f"not a number: {text!r}")
    if isinstance(text, str):
        if len(text) > 100:
            raise InvalidInput(field, f"not a credit amount: {text[:20]!r}... "
                               f"({len(text)} characters)")
        bare = text.strip(" ")
        if not AMOUNT_TEXT.match(bare):
            if bare.startswith("-") and AMOUNT_TEXT.match(bare[1:]):
                raise InvalidInput(field, f"must not be negative: {text}")
            raise InvalidInput(field, f"not a decimal number: {text!r} (digits 0-9 with at "
                               "most one decimal point, e.g. 12.5)")
        text = bare
    try:
        value = Decimal(text)
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
