"""Transfer tokens: issue -> redeem, and each refusal with its own message."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from merkat.bank import tokens
from merkat.bank.errors import (
    BadSignature,
    InvalidInput,
    MalformedToken,
    TokenMismatch,
    TokenReplayed,
    UnknownKey,
)
from merkat.bank.ledger import AccountKind, Ledger
from merkat.bank.money import MICRO
from test_bank_support import ledger_fixture, make_ledger_fixture  # noqa: F401

DN = "/O=Grid/O=NorduGrid/CN=Alice"


def setup(ledger: Ledger) -> tuple[Ed25519PrivateKey, int]:
    ledger.create_account("alice", AccountKind.user)
    ledger.create_account("broker", AccountKind.user)
    ledger.mint("alice", 50 * MICRO, "seed")
    private_pem, public_pem = tokens.generate_key()
    ledger.register_key("alice", tokens.load_public_key(public_pem))
    t = ledger.transfer("alice", "broker", 20 * MICRO, "for the broker")
    return tokens.load_private_key(private_pem), t.id


def reencode(token: str, **changes: object) -> str:
    _, body, sig = tokens.decode(token)
    data = json.loads(body)
    data.update(changes)
    return tokens.encode(json.dumps(data, sort_keys=True, separators=(",", ":")).encode(), sig)


def test_issue_then_redeem_funds_a_sub_account(ledger: Ledger) -> None:
    key, tid = setup(ledger)
    token = tokens.issue(ledger, tid, DN, key)
    r = tokens.redeem(ledger, token)
    assert (r.transfer_id, r.sub_account, r.identity, r.amount) == (
        tid,
        f"broker/token-{tid}",
        DN,
        20 * MICRO,
    )
    sub = ledger.get_account(r.sub_account)
    assert (sub.kind, sub.owner, sub.identity) == (AccountKind.sub, "broker", DN)
    assert ledger.balances(["broker", r.sub_account]) == {"broker": 0, r.sub_account: 20 * MICRO}
    assert ledger.audit().ok


def test_redeem_twice_is_a_replay(ledger: Ledger) -> None:
    key, tid = setup(ledger)
    token = tokens.issue(ledger, tid, DN, key)
    tokens.redeem(ledger, token)
    before = ledger.balances()
    with pytest.raises(TokenReplayed, match="already redeemed"):
        tokens.redeem(ledger, token)
    # A second token for the same transfer (new nonce, other identity) is a replay too.
    other = tokens.issue(ledger, tid, "/CN=Mallory", key)
    with pytest.raises(TokenReplayed, match="already redeemed"):
        tokens.redeem(ledger, other)
    assert ledger.balances() == before


def test_flipped_signature_byte(ledger: Ledger) -> None:
    key, tid = setup(ledger)
    token = tokens.issue(ledger, tid, DN, key)
    _, body, sig = tokens.decode(token)
    bad = tokens.encode(body, bytes([sig[0] ^ 0x01]) + sig[1:])
    with pytest.raises(BadSignature, match="bad signature"):
        tokens.redeem(ledger, bad)
    with pytest.raises(BadSignature):  # an altered identity breaks the signature too
        tokens.redeem(ledger, reencode(token, identity="/CN=Mallory"))
    assert ledger.balance("broker") == 20 * MICRO
    tokens.redeem(ledger, token)  # the genuine token still works


def test_changed_amount(ledger: Ledger) -> None:
    key, tid = setup(ledger)
    token = tokens.issue(ledger, tid, DN, key)
    with pytest.raises(
        TokenMismatch, match=r"altered token: amount 40 does not match transfer \d+ \(20\)"
    ):
        tokens.redeem(ledger, reencode(token, amount=40 * MICRO))
    with pytest.raises(TokenMismatch, match="unknown transfer 999"):
        tokens.redeem(ledger, reencode(token, transfer=999))
    assert ledger.balance("broker") == 20 * MICRO


def test_unknown_key(ledger: Ledger) -> None:
    key, tid = setup(ledger)
    ledger.create_account("carol", AccountKind.user)
    ledger.mint("carol", 5 * MICRO, "seed")
    t = ledger.transfer("carol", "broker", 5 * MICRO, "x")
    carol_key = tokens.load_private_key(tokens.generate_key()[0])
    with pytest.raises(InvalidInput, match="not the registered public key"):
        tokens.issue(ledger, t.id, DN, carol_key)
    # Forge a token for carol's transfer signed with a key the bank does not know.
    forged = tokens.Receipt(
        t.id,
        t.amount,
        "carol",
        "broker",
        DN,
        "n",
        tokens.key_id(b"x" * 32),
        ledger.bank_id(),
        2**40,
    )
    body = forged.to_bytes()
    with pytest.raises(UnknownKey, match="'carol' has no registered public key"):
        tokens.redeem(ledger, tokens.encode(body, carol_key.sign(body)))
    # alice's token re-signed by another key: unknown key, not a bad signature.
    good = tokens.issue(ledger, tid, DN, key)
    other_id = tokens.key_id(tokens.raw_public(carol_key.public_key()))
    with pytest.raises(UnknownKey, match=f"signed by key {other_id}"):
        tokens.redeem(ledger, reencode(good, key=other_id))
    assert ledger.balance("broker") == 25 * MICRO


def test_malformed_token(ledger: Ledger) -> None:
    setup(ledger)
    for text in ("", "hello", "mkt1.!!!.???", "mkt1.e30.AA"):
        with pytest.raises(MalformedToken, match="malformed token"):
            tokens.redeem(ledger, text)


def test_redeem_needs_the_broker_to_still_hold_the_funds(ledger: Ledger) -> None:
    key, tid = setup(ledger)
    token = tokens.issue(ledger, tid, DN, key)
    ledger.create_account("prov", AccountKind.provider)
    ledger.transfer("broker", "prov", 15 * MICRO, "spent")
    from merkat.bank.errors import InsufficientFunds

    with pytest.raises(InsufficientFunds):
        tokens.redeem(ledger, token)
    assert not ledger.has_account(f"broker/token-{tid}")
    ledger.transfer("prov", "broker", 15 * MICRO, "back")
    assert tokens.redeem(ledger, token).amount == 20 * MICRO


def test_the_docs_describe_the_token_as_issued() -> None:
    """docs/bank.md described the first format (``mkt1``, no ``bank``, no ``expires``, no
    --ttl), which redeem refuses as malformed."""
    import dataclasses
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "bank.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Transfer tokens"):doc.index("## Persistence")]
    assert f"`{tokens.PREFIX}.<base64url(receipt JSON)>" in section
    fields = section[section.index("the receipt holds `") + 19:].split("`")[0]
    assert fields.replace("\n", " ").split(", ") == [f.name for f in dataclasses.fields(tokens.Receipt)]
    assert "--ttl" in section and "token expired at" in section
