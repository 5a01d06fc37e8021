"""Exact micro-credit amounts, and database URL resolution."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from merkat.bank.db import default_url, parse_url, resolve_url
from merkat.bank.errors import BadDatabaseURL, InsufficientFunds, InvalidInput, credits
from merkat.bank.money import MAX_AMOUNT, format_amount, parse_amount


@pytest.mark.parametrize(
    ("text", "micro"),
    [
        ("12.5", 12_500_000),
        ("3", 3_000_000),
        ("0.000001", 1),
        (" 7.250000 ", 7_250_000),
        ("0.1", 100_000),  # exact, unlike float 0.1
        (Decimal("2.000001"), 2_000_001),
        (4, 4_000_000),
    ],
)
def test_parse_amount_exact(text: str, micro: int) -> None:
    assert parse_amount(text) == micro


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.1234567", "amount: at most 6 decimals"),
        ("-1", "amount: must not be negative"),
        ("0", "amount: must be positive"),
        ("abc", "amount: not a decimal number"),
        ("", "amount: not a decimal number"),
        ("inf", "amount: not a decimal number"),
        ("1e2", "amount: not a decimal number"),
        ("1_0", "amount: not a decimal number"),
        ("\u0661\u0660", "amount: not a decimal number"),  # Arabic-Indic 10
        ("\uff11", "amount: not a decimal number"),  # fullwidth 1
        ("+1", "amount: not a decimal number"),
        (".5", "amount: not a decimal number"),
        ("5.", "amount: not a decimal number"),
        ("1.2.3", "amount: not a decimal number"),
        ("\u00a05", "amount: not a decimal number"),  # no-break space
        ("9" * 20, "amount: too large"),
    ],
)
def test_parse_amount_refusals_name_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_amount(text)
    assert str(err.value).startswith(message)
    assert err.value.field == "amount"


def test_zero_allowed_when_asked() -> None:
    assert parse_amount("0", "cap", allow_zero=True) == 0
    with pytest.raises(InvalidInput, match=r"^cap: "):
        parse_amount("x", "cap")


@pytest.mark.parametrize(
    ("micro", "text"),
    [(12_500_000, "12.5"), (1, "0.000001"), (0, "0"), (-1_500_000, "-1.5"), (10**12, "1000000")],
)
def test_format_amount(micro: int, text: str) -> None:
    assert format_amount(micro) == text
    assert credits(micro) == text


@given(st.integers(min_value=-MAX_AMOUNT, max_value=MAX_AMOUNT))
def test_errors_render_amounts_as_format_amount_does(micro: int) -> None:
    # bank/errors imports nothing of merkat (no cycle with bank/money): its own rendering
    assert credits(micro) == format_amount(micro)
    assert str(InsufficientFunds("a", micro, 1_500_000)) == (
        f"insufficient funds: 'a' has {format_amount(micro)}, needs 1.5")


@given(st.integers(min_value=1, max_value=MAX_AMOUNT))
def test_format_parse_round_trip(micro: int) -> None:
    assert parse_amount(format_amount(micro)) == micro


def test_url_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERKAT_DB", "sqlite:////tmp/env.db")
    assert resolve_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert resolve_url(None) == "sqlite:////tmp/env.db"
    monkeypatch.delenv("MERKAT_DB")
    assert resolve_url(None) == default_url()
    assert default_url().startswith("sqlite:///") and default_url().endswith("/merkat/bank.db")
    assert parse_url("postgresql://u:secret@h:5433/db").drivername == "postgresql+psycopg"
    assert parse_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert parse_url("sqlite:///rel.db").database == "rel.db"
    with pytest.raises(BadDatabaseURL, match="malformed database URL 'nonsense'"):
        parse_url("nonsense")
    with pytest.raises(BadDatabaseURL, match="unsupported database URL scheme 'mysql'"):
        parse_url("mysql://u:secret@h/db")
    try:
        parse_url("mysql://u:secret@h/db")
    except BadDatabaseURL as exc:
        assert "secret" not in str(exc)  # passwords never printed


_GRAMMAR = __import__("re").compile(r" *[0-9]+(\.[0-9]+)? *\Z")


@given(st.text(alphabet=st.sampled_from("0123456789.-+e_ \u0661\u06f1\uff11\u00a0x"),
               max_size=12) | st.text(max_size=12))
def test_amount_text_is_exactly_the_documented_grammar(text: str) -> None:
    """Accepted iff ASCII digits with at most one inner decimal point (surrounding ASCII
    spaces aside), a positive value of at most 6 decimals; then exactly Decimal(text)."""
    try:
        micro = parse_amount(text)
    except InvalidInput as exc:
        assert exc.field == "amount" and "\n" not in str(exc)
        ok = _GRAMMAR.match(text) is not None
        if ok:  # refused for its value, never for its form
            value = Decimal(text.strip(" "))
            assert value == 0 or value * 10**6 != int(value * 10**6) or value > 2**62 / 10**6
        return
    assert _GRAMMAR.match(text) is not None
    assert micro == Decimal(text.strip(" ")) * 10**6 and micro > 0
