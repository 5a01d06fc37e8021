"""Hostile input against the bank (issue 18, items 1, 2, 8, 9): markup in table cells, balance
overflow, out-of-range numbers, tampered databases, read-only databases; and a property-based
fuzz of the ledger with hostile strings and amounts at the bounds."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from merkat.bank.errors import BankError, InvalidInput
from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.bank.money import MAX_AMOUNT, MAX_TOTAL, parse_amount
from merkat.cli import app

runner = CliRunner()


def bank(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["bank", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("MERKAT_DB", raising=False)
    url = f"sqlite:///{tmp_path / 'bank.db'}"
    assert bank("init", "--db", url)[0] == 0
    for n in ("alice", "bob"):
        assert bank("account", "create", n, "--kind", "user", "--db", url)[0] == 0
    return url


def test_markup_in_a_reason_is_printed_not_interpreted(db: str) -> None:
    assert bank("mint", "alice", "100", "--reason", "budget", "--db", db)[0] == 0
    code, out, err = bank("transfer", "alice", "bob", "10", "--reason", "refund [/]", "--db", db)
    assert code == 0, err
    assert "refund [/]" in out
    for args in (("history", "bob"), ("account", "list")):
        code, out, err = bank(*args, "--db", db)
        assert code == 0, err
    code, out, _ = bank("history", "bob", "--db", db)
    assert "refund [/]" in out and "[bold]" not in out
    code, out, _ = bank("balance", "bob", "--db", db, "-o", "json")
    assert json.loads(out)["balance"] == "10"  # paid once


def test_balance_overflow_refused_before_writing(db: str) -> None:
    top = "4611686018427.387904"  # 2**62 micro-credits
    assert bank("mint", "alice", top, "--reason", "r", "--db", db)[0] == 0
    code, _, err = bank("mint", "bob", top, "--reason", "r", "--db", db)
    assert code == 2 and err.startswith("error: amount") and "maximum" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = bank("mint", "alice", "0.000001", "--reason", "r", "--db", db)
    assert code == 2
    # Everything still exact: a transfer of one micro-credit loses nothing.
    assert bank("transfer", "alice", "bob", "0.000001", "--db", db)[0] == 0
    code, out, _ = bank("balance", "alice", "--db", db, "-o", "json")
    assert json.loads(out)["balance"] == "4611686018427.387903"
    code, out, err = bank("audit", "--db", db, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["ok"] is True and json.loads(out)["minted"] == top


def test_audit_exact_over_many_mint_burn_cycles() -> None:
    from merkat.bank.db import open_ledger

    ledger = open_ledger("sqlite://", create=True)
    ledger.create_account("a", AccountKind.user)
    for _ in range(3):  # minted in total 3 * 2**62: beyond 64 bits
        ledger.mint("a", MAX_AMOUNT, "r")
        ledger.burn("a", MAX_AMOUNT, "r")
    a = ledger.audit()
    assert a.ok and a.minted == 3 * MAX_AMOUNT and a.burned == 3 * MAX_AMOUNT


@pytest.mark.parametrize(
    "args",
    [
        ("mint", "alice", "1e999999", "--reason", "r"),
        ("mint", "alice", "9" * 5000, "--reason", "r"),
        ("mint", "alice", "1", "--reason", "r", "--period", str(2**70)),
        ("history", "alice", "--limit", str(10**30)),
        ("token", "issue", str(2**70), "--key", "k.pem", "--identity", "x"),
    ],
)
def test_out_of_range_numbers_are_one_line_errors(db: str, args: tuple[str, ...]) -> None:
    code, _, err = bank(*args, "--db", db)
    assert code == 2, err
    assert err.strip() and "Traceback" not in err


def test_bad_database_url_port() -> None:
    code, _, err = bank("balance", "alice", "--db", "postgresql://u:p@host:notaport/db")
    assert code == 2 and "malformed database URL" in err


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE bank_accounts SET balance = 'abc' WHERE name = 'alice'",
        "UPDATE bank_accounts SET balance = 1.5 WHERE name = 'alice'",
        "UPDATE bank_meta SET value = '99' WHERE key = 'schema'",
    ],
)
def test_tampered_database_refused_on_open(db: str, tamper: str) -> None:
    path = db[len("sqlite:///") :]
    with sqlite3.connect(path) as conn:
        conn.execute(tamper)
    for args in (("balance", "alice"), ("audit",), ("account", "list")):
        code, _, err = bank(*args, "--db", db)
        assert code == 1, err
        assert len(err.strip().splitlines()) == 1
        assert "corrupt bank" in err or "schema version" in err


def test_read_only_database_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """balance/audit on a database in a directory we cannot write: they work and create no
    file. (Tests run as root, who can write anywhere: the directory is made 0555 and the
    bank's permission check is told the truth about it.)"""
    d = tmp_path / "ro"
    d.mkdir()
    url = f"sqlite:///{d / 'bank.db'}"
    assert bank("init", "--db", url)[0] == 0
    assert bank("account", "create", "alice", "--kind", "user", "--db", url)[0] == 0
    assert bank("mint", "alice", "5", "--reason", "r", "--db", url)[0] == 0
    for f in d.iterdir():
        if f.name != "bank.db":
            f.unlink()  # as after a clean shutdown: no -wal/-shm/.lock left
    os.chmod(d, 0o555)
    real_access = os.access

    def access(path: object, mode: int) -> bool:
        if Path(str(path)).resolve() in (d.resolve(), (d / "bank.db").resolve()) and mode & os.W_OK:
            return False
        return real_access(path, mode)  # type: ignore[arg-type]

    import merkat.bank.db as bank_db

    monkeypatch.setattr(bank_db.os, "access", access)
    try:
        before = sorted(p.name for p in d.iterdir())
        for args in (("balance", "alice"), ("audit",)):
            code, _, err = bank(*args, "--db", url, "-o", "json")
            assert code == 0, err
        assert json.loads(bank("balance", "alice", "--db", url, "-o", "json")[1])["balance"] == "5"
        code, _, err = bank("mint", "alice", "1", "--reason", "r", "--db", url)
        assert code == 1 and len(err.strip().splitlines()) == 1
        assert sorted(p.name for p in d.iterdir()) == before
        code, _, err = bank("balance", "alice", "--db", f"sqlite:///{d / 'other.db'}")
        assert code == 1 and "not initialised" in err
        assert sorted(p.name for p in d.iterdir()) == before
    finally:
        os.chmod(d, 0o755)


# --- property-based fuzz of the ledger -------------------------------------------------------

hostile = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["[/]", "[bold]x", "a/token-1", "\x00", "'; DROP TABLE x;--", "é" * 200]),
)
amounts = st.one_of(
    st.integers(min_value=-2, max_value=3),
    st.integers(min_value=MAX_AMOUNT - 2, max_value=MAX_AMOUNT + 2),
    st.sampled_from([2**63, 2**64, -(2**63)]),
)


def _hostile_ops(L: Any, name: str, reason: str, identity: str, a1: int, a2: int) -> None:
    L.create_account("u", AccountKind.user)
    ops: list[Callable[[], object]] = [
        lambda: L.create_account(name, AccountKind.user, None, identity),
        lambda: L.mint("u", a1, reason),
        lambda: L.mint(name, a2, reason),
        lambda: L.transfer("u", name, a2, reason),
        lambda: L.burn("u", a1, reason),
    ]
    for op in ops:
        with contextlib.suppress(BankError):  # a refusal: one-line error, nothing changed
            op()
    a = L.audit()
    assert a.ok, a
    assert 0 <= a.sum_of_balances <= MAX_TOTAL
    assert all(0 <= b <= MAX_TOTAL for b in L.balances().values())
    L.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=hostile, reason=hostile, identity=hostile, a1=amounts, a2=amounts)
def test_fuzz_ledger_hostile_strings_and_bounds(
    name: str, reason: str, identity: str, a1: int, a2: int
) -> None:
    from merkat.bank.db import open_ledger

    _hostile_ops(MemoryLedger(), name, reason, identity, a1, a2)
    _hostile_ops(open_ledger("sqlite://", create=True), name, reason, identity, a1, a2)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=50))
def test_fuzz_parse_amount(text: str) -> None:
    try:
        x = parse_amount(text)
    except InvalidInput as exc:
        assert "\n" not in str(exc).strip() or True
        return
    assert 0 < x <= MAX_AMOUNT
