"""End-to-end runs of ``merkat bank ...`` and ``merkat bench bank`` (CliRunner, real SQLite)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from merkat.cli import app

runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("MERKAT_DB", raising=False)
    url = f"sqlite:///{tmp_path / 'bank.db'}"
    assert bank("init", "--db", url)[0] == 0
    return url


def bank(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["bank", *args])
    return r.exit_code, r.stdout, r.stderr


def ok_json(*args: str) -> Any:
    code, out, err = bank(*args, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def users(db: str, *names: str) -> None:
    for n in names:
        assert bank("account", "create", n, "--kind", "user", "--db", db)[0] == 0


def test_mint_transfer_balance_history_audit(db: str) -> None:
    users(db, "alice", "bob")
    assert (
        bank("account", "create", "vp", "--kind", "application", "--owner", "alice", "--db", db)[0]
        == 0
    )
    m = ok_json("mint", "alice", "100.5", "--reason", "budget", "--db", db)
    assert m["amount"] == "100.5" and m["kind"] == "mint" and m["reason"] == "budget"
    t1 = ok_json("transfer", "alice", "bob", "12.25", "--idempotency-key", "k1", "--db", db)
    t2 = ok_json("transfer", "alice", "bob", "12.25", "--idempotency-key", "k1", "--db", db)
    assert t1 == t2  # same key: moved once
    ok_json("transfer", "alice", "vp", "0.000001", "--period", "4", "--db", db)
    assert ok_json("balance", "alice", "--db", db) == {"account": "alice", "balance": "88.249999"}
    assert ok_json("balance", "bob", "--db", db) == {"account": "bob", "balance": "12.25"}
    hist = ok_json("history", "alice", "--db", db)["items"]
    assert [(h["kind"], h["amount"], h["period"]) for h in hist] == [
        ("transfer", "0.000001", 4),
        ("transfer", "12.25", None),
        ("mint", "100.5", None),
    ]
    assert ok_json("audit", "--db", db) == {
        "minted": "100.5",
        "burned": "0",
        "sum_of_balances": "100.5",
        "ok": True,
        "negative_accounts": 0,
        "journal_mismatches": 0,
    }
    listed = ok_json("account", "list", "--db", db)["items"]
    assert [(a["name"], a["kind"], a["owner"], a["balance"]) for a in listed] == [
        ("alice", "user", None, "88.249999"),
        ("bob", "user", None, "12.25"),
        ("vp", "application", "alice", "0.000001"),
    ]
    code, out, _ = bank("balance", "alice", "--db", db)  # a table by default
    assert code == 0 and "88.249999" in out and "{" not in out
    burnt = ok_json("burn", "bob", "0.25", "--reason", "expiry", "--db", db)
    assert burnt["kind"] == "burn" and burnt["payer"] == "bob" and burnt["amount"] == "0.25"
    assert ok_json("audit", "--db", db)["sum_of_balances"] == "100.25"
    # -o json: a list is {"items": [...]} (it was a bare list), one transfer an object (it
    # was a list of one), as every other command prints them
    assert set(ok_json("history", "bob", "--db", db)) == {"items"}
    assert set(ok_json("account", "list", "--db", db)) == {"items"}
    assert t1["kind"] == "transfer" and t1["payee"] == "bob"


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        ("1.1234567", "amount: at most 6 decimals"),
        ("abc", "amount: not a decimal number"),
        ("-5", "amount: must not be negative"),
        ("0", "amount: must be positive"),
        ("NaN", "amount: not a decimal number"),
        ("1_0", "amount: not a decimal number"),
    ],
)
def test_bad_amount_is_refused_with_exit_2_and_no_change(
    db: str, amount: str, message: str
) -> None:
    users(db, "alice", "bob")
    ok_json("mint", "alice", "10", "--reason", "seed", "--db", db)
    code, _, err = bank("transfer", "--db", db, "alice", "bob", "--", amount)
    assert code == 2
    assert err.strip() == f"error: {message}" or err.startswith(f"error: {message}")
    assert len(err.strip().splitlines()) == 1
    assert ok_json("balance", "alice", "--db", db)["balance"] == "10"


def test_refusals_and_errors(db: str, tmp_path: Path) -> None:
    users(db, "alice", "bob")
    ok_json("mint", "alice", "10", "--reason", "seed", "--db", db)
    code, _, err = bank("transfer", "alice", "bob", "10.000001", "--db", db)
    assert (code, err.strip()) == (1, "error: insufficient funds: 'alice' has 10, needs 10.000001")
    code, _, err = bank("transfer", "alice", "carol", "1", "--db", db)
    assert (code, err.strip()) == (2, "error: payee: unknown account 'carol'")
    code, _, err = bank("account", "create", "x", "--kind", "bogus", "--db", db)
    assert code == 2 and "kind" in err
    code, _, err = bank("transfer", "alice", "bob", "1", "--idempotency-key", "k", "--db", db)
    code, _, err = bank("transfer", "alice", "bob", "2", "--idempotency-key", "k", "--db", db)
    assert code == 1 and "idempotency key 'k'" in err
    code, _, err = bank("balance", "alice", "--db", "not a url")
    assert code == 2 and err.startswith("error: malformed database URL")
    code, _, err = bank("balance", "alice", "--db", "mysql://h/db")
    assert code == 2 and "unsupported database URL scheme" in err
    code, _, err = bank("balance", "alice", "--db", "postgresql://nobody@127.0.0.1:1/none")
    assert (
        code == 1
        and err.startswith("error: cannot use database")
        and len(err.strip().splitlines()) == 1
    )
    code, _, err = bank("balance", "alice", "--db", f"sqlite:///{tmp_path / 'empty.db'}")
    assert code == 1 and "not initialised" in err
    code, _, err = bank("balance", "alice", "--db", f"sqlite:///{tmp_path / 'no' / 'dir.db'}")
    assert code == 1 and "not initialised" in err  # and no file created
    assert ok_json("balance", "alice", "--db", db)["balance"] == "9"


def test_db_from_environment_then_user_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("MERKAT_DB", url)
    assert bank("init")[0] == 0
    users(url, "alice")
    assert ok_json("account", "list")["items"][0]["name"] == "alice"
    monkeypatch.delenv("MERKAT_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert ok_json("init")["db"] == f"sqlite:///{tmp_path / 'data' / 'merkat' / 'bank.db'}"
    assert (tmp_path / "data" / "merkat" / "bank.db").exists()
    assert ok_json("account", "list") == {"items": []}


def test_audit_exits_non_zero_when_books_do_not_balance(db: str, tmp_path: Path) -> None:
    users(db, "alice")
    ok_json("mint", "alice", "5", "--reason", "seed", "--db", db)
    con = sqlite3.connect(tmp_path / "bank.db")
    con.execute("UPDATE bank_accounts SET balance = balance + 1 WHERE name = 'alice'")  # tampering
    con.commit()
    con.close()
    code, out, err = bank("audit", "--db", db, "-o", "json")
    assert code == 1
    assert json.loads(out) == {
        "minted": "5",
        "burned": "0",
        "sum_of_balances": "5.000001",
        "ok": False,
        "negative_accounts": 0,
        "journal_mismatches": 1,
    }
    assert "do not balance" in err


def test_keys_and_tokens(db: str, tmp_path: Path) -> None:
    users(db, "alice", "broker")
    ok_json("mint", "alice", "30", "--reason", "seed", "--db", db)
    key = tmp_path / "alice.key"
    gen = ok_json("key", "generate", str(key))
    assert (tmp_path / "alice.key.pub").exists() and (key.stat().st_mode & 0o777) == 0o600
    assert bank("key", "generate", str(key))[0] == 2  # no silent overwrite
    added = ok_json("key", "add", "alice", str(tmp_path / "alice.key.pub"), "--db", db)
    assert added == {"user": "alice", "key_id": gen["key_id"]}
    t = ok_json("transfer", "alice", "broker", "20", "--db", db)
    token = ok_json(
        "token", "issue", str(t["id"]), "--key", str(key), "--identity", "/CN=Alice", "--db", db
    )["token"]
    redeemed = ok_json("token", "redeem", token, "--db", db)
    assert redeemed == {
        "transfer": t["id"],
        "sub_account": f"broker/token-{t['id']}",
        "identity": "/CN=Alice",
        "amount": "20",
        "funding_transfer": t["id"] + 1,
    }
    code, _, err = bank("token", "redeem", token, "--db", db)
    assert code == 1 and err.startswith("error: token already redeemed")
    r = runner.invoke(app, ["bank", "token", "redeem", "-", "--db", db], input=token + "\n")
    assert r.exit_code == 1 and r.stderr.startswith("error: token already redeemed")
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    code, _, err = bank("token", "redeem", flipped, "--db", db)
    assert code == 1 and err.startswith("error: bad signature")
    code, _, err = bank("token", "redeem", "garbage", "--db", db)
    assert code == 2 and err.startswith("error: malformed token")
    code, _, err = bank(
        "token",
        "issue",
        str(t["id"]),
        "--key",
        str(tmp_path / "none"),
        "--identity",
        "x",
        "--db",
        db,
    )
    assert code == 2 and err.startswith("error: key: cannot read")
    assert ok_json("balance", f"broker/token-{t['id']}", "--db", db)["balance"] == "20"
    assert ok_json("audit", "--db", db)["ok"] is True


def test_bench_bank_prints_json() -> None:
    r = runner.invoke(app, ["bench", "bank", "--transfers", "50", "--vms", "400"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    for backend in ("sqlite", "memory"):
        assert doc[backend]["charged_vms"] == 400
        assert doc[backend]["audit_ok"] is True
        assert doc[backend]["transfers_per_s"] > 0 and doc[backend]["charge_s"] > 0
    assert "postgresql" not in doc
