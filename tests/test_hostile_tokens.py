"""Hostile input against transfer tokens and key files (issue 18, items 3 and 6): a token of
another bank, expiry, the reserved ``broker/token-N`` namespace, private key permissions and
key pairs replaced both-or-neither."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from merkat.bank import tokens
from merkat.bank.errors import InvalidInput, TokenExpired, TokenMismatch
from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.bank.money import MICRO
from merkat.cli import app

runner = CliRunner()
KEY = Ed25519PrivateKey.generate()


def bank(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["bank", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


def _bank() -> tuple[MemoryLedger, int]:
    L = MemoryLedger()
    L.create_account("alice", AccountKind.user)
    L.create_account("broker", AccountKind.user)
    L.register_key("alice", tokens.raw_public(KEY.public_key()))
    L.mint("alice", 100 * MICRO, "budget")
    return L, L.transfer("alice", "broker", 10 * MICRO, "pay").id


def test_token_of_another_bank_is_refused() -> None:
    a, tid_a = _bank()
    b, tid_b = _bank()
    assert tid_a == tid_b  # same transfer ids, same payer key, same amounts
    token = tokens.issue(a, tid_a, "/CN=Alice", KEY)
    with pytest.raises(TokenMismatch, match="another bank"):
        tokens.redeem(b, token)
    assert b.balance("broker") == 10 * MICRO and not b.has_account("broker/token-1")
    assert tokens.redeem(a, token).amount == 10 * MICRO


def test_token_expires() -> None:
    L, tid = _bank()
    token = tokens.issue(L, tid, "/CN=Alice", KEY, ttl=60, now=1000.0)
    with pytest.raises(TokenExpired, match="expired"):
        tokens.redeem(L, token, now=1061.0)
    assert tokens.redeem(L, token, now=1059.0).amount == 10 * MICRO
    for bad in (0, -1, float("nan"), float("inf"), 10**9):
        with pytest.raises(InvalidInput, match="ttl"):
            tokens.issue(L, tid, "/CN=Alice", KEY, ttl=bad)


def test_token_namespace_is_reserved() -> None:
    L, tid = _bank()
    for kind, owner in ((AccountKind.sub, "broker"), (AccountKind.user, None)):
        with pytest.raises(InvalidInput, match="reserved"):
            L.create_account(f"broker/token-{tid}", kind, owner)
    assert tokens.redeem(L, tokens.issue(L, tid, "/CN=Alice", KEY)).sub_account == (
        f"broker/token-{tid}"
    )


def test_reserved_namespace_and_foreign_bank_on_the_cli(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / n}" for n in ("a.db", "b.db")]
    key = tmp_path / "alice.pem"
    assert bank("key", "generate", str(key))[0] == 0
    for url in urls:
        assert bank("init", "--db", url)[0] == 0
        for n in ("alice", "broker"):
            assert bank("account", "create", n, "--kind", "user", "--db", url)[0] == 0
        assert bank("key", "add", "alice", f"{key}.pub", "--db", url)[0] == 0
        assert bank("mint", "alice", "50", "--reason", "r", "--db", url)[0] == 0
        assert bank("transfer", "alice", "broker", "10", "--db", url)[0] == 0
    code, _, err = bank("account", "create", "broker/token-2", "--kind", "user", "--db", urls[0])
    assert code == 2 and "reserved" in err
    code, out, err = bank(
        "token", "issue", "2", "--key", str(key), "--identity", "[bold]/CN=A[/]", "--db", urls[0]
    )
    assert code == 0, err
    token = out.strip()
    code, _, err = bank("token", "redeem", token, "--db", urls[1])
    assert code == 1 and "another bank" in err
    code, out, err = bank("token", "redeem", token, "--db", urls[0])
    assert code == 0 and "[bold]/CN=A[/]" in out  # the identity printed as given
    code, out, _ = bank("account", "list", "--db", urls[0])
    assert code == 0 and "[bold]/CN=A[/]" in out
    code, out, _ = bank("audit", "--db", urls[1], "-o", "json")
    assert json.loads(out)["ok"] is True


def test_key_generate_force_creates_a_private_key_0600(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text("old")
    os.chmod(key, 0o644)
    code, _, err = bank("key", "generate", str(key), "--force")
    assert code == 0, err
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in key.read_bytes()
    assert b"PUBLIC KEY" in Path(f"{key}.pub").read_bytes()


def test_key_pair_replaced_both_or_neither(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    assert bank("key", "generate", str(key))[0] == 0
    old = key.read_bytes()
    pub = Path(f"{key}.pub")
    pub.unlink()
    pub.mkdir()  # the public key cannot be written
    (pub / "x").write_text("x")
    code, _, err = bank("key", "generate", str(key), "--force")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "k.pem.pub" in err
    assert key.read_bytes() == old  # the old private key is still there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.pem", "k.pem.pub"]
