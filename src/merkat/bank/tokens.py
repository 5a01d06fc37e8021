"""Transfer tokens (Tycoon §3.1): a signed receipt that maps a transfer to an identity.

A user pays a broker (``merkat bank transfer alice broker 10``), then signs a receipt of that
transfer together with an identity string (Tycoon: the user's Grid DN) with her Ed25519 private
key. Whoever holds the token can redeem it once: the bank checks the signature against the
payer's registered public key, that the transfer exists and matches the receipt, and that no
token for that transfer was redeemed before; then it creates a sub-account of the payee bound
to the identity and moves the amount into it, in one transaction.

Token text: ``mkt2.<base64url(receipt JSON)>.<base64url(signature)>``. The receipt holds
``transfer, amount, payer, payee, identity, nonce, key, bank, expires`` (``key``: fingerprint
of the signing public key; ``bank``: the issuing bank's identity, a random id stored with the
bank; ``expires``: Unix time after which the token is refused). Checks, in order, each with its
own error: malformed → :class:`MalformedToken`; issued by another bank → :class:`TokenMismatch`;
payer has no key / token signed by another key → :class:`UnknownKey`; transfer unknown or its
amount/payer/payee differ → :class:`TokenMismatch`; signature invalid → :class:`BadSignature`;
expired → :class:`TokenExpired`; transfer already redeemed → :class:`TokenReplayed`.
Tokens of the first format (``mkt1``, no bank, no expiry) are refused as malformed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from merkat.bank.errors import (
    BadSignature,
    InvalidInput,
    MalformedToken,
    TokenExpired,
    TokenMismatch,
    UnknownAccount,
    UnknownKey,
    UnknownTransfer,
)
from merkat.bank.ledger import Ledger, Redemption, TransferKind
from merkat.bank.ledger import check_identity as ledger_check_identity
from merkat.bank.money import format_amount

PREFIX = "mkt2"

DEFAULT_TTL = 7 * 86400
"""Seconds a token stays redeemable by default (one week)."""

MAX_TTL = 366 * 86400
"""Longest validity a token can be given (a year and a day)."""


@dataclass(frozen=True)
class Receipt:
    """The signed content of a token."""

    transfer: int
    amount: int
    payer: str
    payee: str
    identity: str
    nonce: str
    key: str
    bank: str
    expires: int

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()


# --- keys ---------------------------------------------------------------------------------


def generate_key() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as ``(private PEM (PKCS#8), public PEM (SubjectPublicKeyInfo))``."""
    private = Ed25519PrivateKey.generate()
    return (
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(raw: bytes) -> str:
    """A short fingerprint of a raw public key: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(raw).hexdigest()[:16]


def load_public_key(data: bytes, field: str = "public_key") -> bytes:
    """Parse a PEM Ed25519 public key; return its raw 32 bytes. Raises ``InvalidInput``."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise InvalidInput(field, "not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidInput(field, "not an Ed25519 public key")
    return raw_public(key)


def load_private_key(data: bytes, field: str = "key") -> Ed25519PrivateKey:
    """Parse an unencrypted PEM Ed25519 private key. Raises ``InvalidInput``."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise InvalidInput(field, "not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidInput(field, "not an Ed25519 private key")
    return key


def read_file(path: str | Path, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(field, f"cannot read {path}: {exc.strerror}") from None


# --- tokens -------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode(receipt_bytes: bytes, signature: bytes) -> str:
    return f"{PREFIX}.{_b64(receipt_bytes)}.{_b64(signature)}"


def decode(token: str) -> tuple[Receipt, bytes, bytes]:
    """Split a token into ``(receipt, receipt bytes as signed, signature)``; ``MalformedToken``."""
    if len(token) > 20_000:
        raise MalformedToken(f"malformed token: {len(token)} characters (a token has < 5,000)")
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise MalformedToken(f"malformed token: expected {PREFIX}.<receipt>.<signature>")
    try:
        body, sig = _unb64(parts[1]), _unb64(parts[2])
        data = json.loads(body)
        receipt = Receipt(**data)
    except (binascii.Error, ValueError, TypeError):
        raise MalformedToken("malformed token: the receipt cannot be decoded") from None
    if not (
        isinstance(receipt.transfer, int)
        and isinstance(receipt.amount, int)
        and isinstance(receipt.expires, int)
        and all(
            isinstance(v, str)
            for v in (
                receipt.payer,
                receipt.payee,
                receipt.identity,
                receipt.nonce,
                receipt.key,
                receipt.bank,
            )
        )
    ):
        raise MalformedToken("malformed token: receipt fields have the wrong types")
    return receipt, body, sig


def check_identity(identity: str) -> str:
    """A token's identity: 1-1000 printable characters (raises ``InvalidInput``)."""
    if identity is None:
        raise InvalidInput("identity", "must be 1-1000 printable characters")
    ledger_check_identity(identity)
    return identity


def issue(
    ledger: Ledger,
    transfer_id: int,
    identity: str,
    private_key: Ed25519PrivateKey,
    nonce: str | None = None,
    ttl: float = DEFAULT_TTL,
    now: float | None = None,
) -> str:
    """Sign a receipt of transfer ``transfer_id`` for ``identity``, redeemable at this bank
    only and for ``ttl`` seconds (``now``: the issue time, default the clock); return the
    token text.

    Refuses (``InvalidInput``) when the transfer is not a plain transfer, when the key is not
    the payer's registered key (a token nobody could redeem) or when ``ttl`` is not in
    ``(0, MAX_TTL]``.
    """
    check_identity(identity)
    if not 0 < ttl <= MAX_TTL:  # NaN fails too
        raise InvalidInput("ttl", f"must be in (0, {MAX_TTL}] seconds, got {ttl!r}")
    try:
        t = ledger.get_transfer(transfer_id)
    except UnknownTransfer:
        raise InvalidInput("transfer", f"unknown transfer: {transfer_id}") from None
    if t.kind is not TransferKind.transfer or t.payer is None or t.payee is None:
        raise InvalidInput(
            "transfer", f"transfer {transfer_id} is a {t.kind.value}, not a transfer"
        )
    raw = raw_public(private_key.public_key())
    registered = ledger.public_key(t.payer)
    if registered != raw:
        raise InvalidInput("key", f"this key is not the registered public key of payer {t.payer!r}")
    receipt = Receipt(
        transfer=t.id,
        amount=t.amount,
        payer=t.payer,
        payee=t.payee,
        identity=identity,
        nonce=nonce or secrets.token_hex(16),
        key=key_id(raw),
        bank=ledger.bank_id(),
        expires=int((time.time() if now is None else now) + ttl),
    )
    body = receipt.to_bytes()
    return encode(body, private_key.sign(body))


def sub_account_name(receipt: Receipt) -> str:
    """The sub-account a token funds: ``<payee>/token-<transfer id>``."""
    return f"{receipt.payee}/token-{receipt.transfer}"


def verify(ledger: Ledger, token: str, now: float | None = None) -> Receipt:
    """Run every check except replay (see the module docstring); return the receipt."""
    receipt, body, sig = decode(token)
    if receipt.bank != ledger.bank_id():
        raise TokenMismatch(
            f"token issued by another bank ({receipt.bank[:16]!r}), not this one "
            f"({ledger.bank_id()[:16]!r})"
        )
    try:
        registered = ledger.public_key(receipt.payer)
    except (UnknownAccount, InvalidInput):
        raise UnknownKey(
            f"unknown key: payer {receipt.payer!r} is not an account of this bank"
        ) from None
    if registered is None:
        raise UnknownKey(f"unknown key: payer {receipt.payer!r} has no registered public key")
    if key_id(registered) != receipt.key:
        raise UnknownKey(
            f"unknown key: token signed by key {receipt.key}, not the registered key "
            f"{key_id(registered)} of payer {receipt.payer!r}"
        )
    try:
        t = ledger.get_transfer(receipt.transfer)
    except UnknownTransfer:
        raise TokenMismatch(f"token refers to unknown transfer {receipt.transfer}") from None
    if t.kind is not TransferKind.transfer:
        raise TokenMismatch(f"token refers to transfer {t.id}, which is a {t.kind.value}")
    if receipt.amount != t.amount:
        raise TokenMismatch(
            f"altered token: amount {format_amount(receipt.amount)} does not match "
            f"transfer {t.id} ({format_amount(t.amount)})"
        )
    for name, claimed, actual in (
        ("payer", receipt.payer, t.payer),
        ("payee", receipt.payee, t.payee),
    ):
        if claimed != actual:
            raise TokenMismatch(
                f"altered token: {name} {claimed!r} does not match transfer {t.id} ({actual!r})"
            )
    try:
        Ed25519PublicKey.from_public_bytes(registered).verify(sig, body)
    except InvalidSignature:
        raise BadSignature(
            f"bad signature: the token is not signed by payer {receipt.payer!r}'s registered key"
        ) from None
    if (time.time() if now is None else now) > receipt.expires:
        raise TokenExpired(
            f"token expired at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(receipt.expires))}"
        )
    return receipt


def redeem(ledger: Ledger, token: str, now: float | None = None) -> Redemption:
    """Verify ``token`` and, once only, fund a new sub-account of the payee bound to the identity."""
    receipt = verify(ledger, token, now)
    return ledger.redeem(
        receipt.transfer, receipt.identity, sub_account_name(receipt), receipt.amount, receipt.payee
    )
