"""The ledger base shared by the persistent (SQL) and the in-memory implementation.

Contract, for every implementation:

- Money is an ``int`` of micro-credits. Every movement is a double-entry :class:`Transfer`
  (payer debited, payee credited by the same amount) recorded with a reason, an optional
  period and an optional idempotency key. Only :meth:`Ledger.mint` and :meth:`Ledger.burn`
  change the total, and they are journaled too (payer ``None`` for a mint, payee ``None``
  for a burn). Hence at all times ``sum(balances) == minted - burned``.
- No balance is ever negative: a movement that would overdraw is refused with
  :class:`~merkat.bank.errors.InsufficientFunds`, never clipped.
- Each call is all-or-nothing: on any error nothing changed.
- An idempotency key makes a call happen at most once: the same call with the same key
  returns the first result without moving money again; a *different* call with a used key
  raises :class:`~merkat.bank.errors.IdempotencyConflict`.
- :meth:`Ledger.transfer_many` applies a whole batch (e.g. a period's charges) in one
  transaction; overdraft is checked on each account's *net* change over the batch.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from merkat.bank.errors import InvalidInput
from merkat.bank.money import MAX_AMOUNT, MAX_ID, MAX_TOTAL, format_amount


class AccountKind(StrEnum):
    """What an account belongs to."""

    user = "user"
    application = "application"  # a virtual platform; owned by a user
    provider = "provider"  # receives the charges for resources
    bank = "bank"  # the Virtual Bank, which gathers provider income and redistributes it
    sub = "sub"  # a sub-account (from a redeemed token, or an application's hold account)


class TransferKind(StrEnum):
    mint = "mint"
    burn = "burn"
    transfer = "transfer"


@dataclass(frozen=True)
class Account:
    """An account. ``owner`` is the owning account's name (applications, sub-accounts);
    ``identity`` is the identity string a token-funded sub-account is bound to."""

    name: str
    kind: AccountKind
    owner: str | None = None
    identity: str | None = None


@dataclass(frozen=True)
class Transfer:
    """One journal entry. ``payer`` is ``None`` for a mint, ``payee`` ``None`` for a burn."""

    id: int
    kind: TransferKind
    payer: str | None
    payee: str | None
    amount: int
    reason: str
    period: int | None
    idempotency_key: str | None


@dataclass(frozen=True)
class Audit:
    """The books. ``ok`` when ``minted - burned == sum_of_balances``, no balance is negative
    and (persistent ledger) every balance equals the replay of the journal."""

    minted: int
    burned: int
    sum_of_balances: int
    ok: bool
    negative_accounts: int = 0
    journal_mismatches: int = 0


@dataclass(frozen=True)
class Redemption:
    """A redeemed transfer token: which transfer funded which new sub-account."""

    transfer_id: int
    sub_account: str
    identity: str
    amount: int
    funding_transfer_id: int


Move = tuple[str, str, int]
"""One movement of a batch: ``(payer, payee, amount)``."""


class Ledger(ABC):
    """Accounts, balances and a double-entry journal (see the module docstring): the base of
    every ledger. :meth:`mint`, :meth:`burn` and :meth:`transfer` are written here once, as
    one checked movement that each implementation applies in :meth:`_move`."""

    @abstractmethod
    def create_account(
        self,
        name: str,
        kind: AccountKind,
        owner: str | None = None,
        identity: str | None = None,
    ) -> Account:
        """Create an account with a zero balance. Applications need an existing user owner."""

    @abstractmethod
    def get_account(self, name: str) -> Account:
        """The account called ``name``; raises ``UnknownAccount``."""

    @abstractmethod
    def has_account(self, name: str) -> bool:
        """Whether an account called ``name`` exists."""

    @abstractmethod
    def accounts(self, kind: AccountKind | None = None) -> list[Account]:
        """All accounts (of ``kind`` if given), sorted by name."""

    @abstractmethod
    def balance(self, name: str) -> int:
        """The balance of ``name`` in micro-credits; raises ``UnknownAccount``."""

    @abstractmethod
    def balances(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """Balances of ``names`` (all accounts when ``None``)."""

    def mint(
        self,
        account: str,
        amount: int,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Transfer:
        """Create ``amount`` micro-credits on ``account`` (logged; raises the total)."""
        return self._checked_move(TransferKind.mint, None, account, amount, reason, period,
                            idempotency_key)

    def burn(
        self,
        account: str,
        amount: int,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Transfer:
        """Destroy ``amount`` micro-credits from ``account`` (logged; lowers the total)."""
        return self._checked_move(TransferKind.burn, account, None, amount, reason, period,
                            idempotency_key)

    def transfer(
        self,
        payer: str,
        payee: str,
        amount: int,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Transfer:
        """Move ``amount`` from ``payer`` to ``payee``; refused if ``payer`` would overdraw."""
        check_name(payer, "payer")
        check_name(payee, "payee")
        return self._checked_move(TransferKind.transfer, payer, payee, amount, reason, period,
                            idempotency_key)

    def _checked_move(self, kind: TransferKind, payer: str | None, payee: str | None,
                      amount: int, reason: str, period: int | None, key: str | None
                      ) -> Transfer:
        """One movement (a mint has no payer, a burn no payee), its arguments checked."""
        check_amount(amount)
        check_reason(reason)
        check_period(period)
        check_key(key)
        if payer is not None and payer == payee:
            raise InvalidInput("payee", f"payer and payee are the same account {payer!r}")
        return self._move(kind, payer, payee, amount, reason, period, key)

    @abstractmethod
    def _move(self, kind: TransferKind, payer: str | None, payee: str | None, amount: int,
              reason: str, period: int | None, key: str | None) -> Transfer:
        """Apply one checked movement, all or nothing: resolve its accounts
        (``UnknownAccount`` naming ``payer``, ``payee`` or ``account``), replay its
        idempotency key (``IdempotencyConflict`` if it was used for another call), refuse a
        mint above :data:`~merkat.bank.money.MAX_TOTAL` and an overdraft
        (``InsufficientFunds``), journal it."""

    @abstractmethod
    def transfer_many(
        self,
        moves: Sequence[Move],
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> Sequence[int]:
        """Apply all ``moves`` in one transaction (or none); returns their transfer ids.

        ``also(conn)``, when given, runs inside that transaction after the moves (with the SQL
        connection; ``None`` for the in-memory ledger), even when ``moves`` is empty or the key
        replays: what it writes commits with the moves, and if it raises nothing moves (the
        live service ends a platform and returns its budget this way)."""

    def pay_each(
        self,
        bills: Sequence[tuple[str, int]],
        payee: str,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[list[int], list[int], int, Sequence[int]]:
        """Pay each ``(account, amount)`` of ``bills`` to ``payee``, greedily in input order:
        a bill its account still covers (after the bills before it) is paid, the others are
        skipped; all the payments in one transaction (:meth:`transfer_many`, a bill of 0 is
        paid without a move). Returns ``(paid, unpaid, total, ids)``: the indexes of the
        paid and the skipped bills, the micro-credits moved and the transfer ids. Amounts
        must be non-negative ints (``InvalidInput`` naming ``bills[k].amount``).

        This is the reference (the balances read, the choice made, then the batch applied);
        a ledger may do it in one pass with the same result (the in-memory ledger's)."""
        for k, (_, amount) in enumerate(bills):
            if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
                raise InvalidInput(f"bills[{k}].amount",
                                   f"must be a non-negative integer, got {amount!r}")
        paid, unpaid = affordable(bills, self.balances({account for account, _ in bills}))
        moves = [(bills[k][0], payee, bills[k][1]) for k in paid if bills[k][1] > 0]
        ids = self.transfer_many(moves, reason, period, idempotency_key)
        return paid, unpaid, sum([m[2] for m in moves]), ids

    @abstractmethod
    def mint_many(
        self,
        credits: Sequence[tuple[str, int]],
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Sequence[int]:
        """Mint each ``(account, amount)`` in one transaction (or none); returns the ids."""

    @abstractmethod
    def get_transfer(self, transfer_id: int) -> Transfer:
        """The transfer with this id; raises ``UnknownTransfer``."""

    @abstractmethod
    def history(self, account: str, limit: int | None = None) -> list[Transfer]:
        """Transfers touching ``account``, newest first (at most ``limit``)."""

    @abstractmethod
    def audit(self) -> Audit:
        """Check the books (see :class:`Audit`)."""

    @abstractmethod
    def register_key(self, user: str, public_key: bytes) -> None:
        """Register (or replace) the raw 32-byte Ed25519 public key of ``user``."""

    @abstractmethod
    def public_key(self, user: str) -> bytes | None:
        """The registered raw public key of ``user``, or ``None``."""

    @abstractmethod
    def redeem(
        self, transfer_id: int, identity: str, sub_account: str, amount: int, payee: str
    ) -> Redemption:
        """Atomically: refuse with ``TokenReplayed`` if ``transfer_id`` was redeemed before;
        create sub-account ``sub_account`` (owner ``payee``, bound to ``identity``); move
        ``amount`` from ``payee`` to it. Signature checks are done by the caller
        (:mod:`merkat.bank.tokens`)."""

    @abstractmethod
    def bank_id(self) -> str:
        """This bank's identity: a random id stored with the bank, named in the tokens it
        issues (a token of another bank is refused)."""

    @abstractmethod
    def close(self) -> None:
        """Release resources (connections)."""


# --- validation shared by the implementations ----------------------------------------------

_NAME = re.compile(r"^[A-Za-z0-9_.:@/+-]{1,128}$")


def new_name_ok(name: object) -> bool:
    """Whether ``name`` passes a new account's name checks (:func:`check_name`, and not a
    redeemed token's reserved ``/token-N``), as a predicate: for a caller that proves a
    creation would succeed before making it (:mod:`merkat.bank.memory_open`)."""
    return (isinstance(name, str) and _NAME.match(name) is not None
            and TOKEN_ACCOUNT.search(name) is None)


def check_name(name: str, field: str = "account") -> str:
    """Validate an account name: 1-128 characters among letters, digits and ``_.:@/+-``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(field, f"invalid account name {name!r} (1-128 of A-Z a-z 0-9 _.:@/+-)")
    return name


def check_amount(amount: int, field: str = "amount") -> int:
    """Validate a movement amount: a positive ``int`` of micro-credits."""
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise InvalidInput(field, f"must be an integer number of micro-credits, got {amount!r}")
    if amount <= 0:
        raise InvalidInput(field, f"must be positive, got {amount}")
    if amount > MAX_AMOUNT:
        raise InvalidInput(field, f"too large: {amount}")
    return amount


MAX_REASON = 200
"""The longest reason of a movement (its history line)."""


def check_reason(reason: str) -> str:
    """Validate a reason: a non-empty string of at most :data:`MAX_REASON` characters."""
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
        raise InvalidInput("reason", f"must be 1-{MAX_REASON} characters")
    return reason


def check_key(key: str | None) -> str | None:
    """Validate an idempotency key: ``None`` or 1-200 characters."""
    if key is not None and (not isinstance(key, str) or not key or len(key) > 200):
        raise InvalidInput("idempotency_key", "must be 1-200 characters")
    return key


def check_identity(identity: str | None) -> str | None:
    """Validate an account's identity binding: ``None`` or 1-1000 printable characters."""
    if identity is not None and (
        not isinstance(identity, str)
        or not identity.strip()
        or len(identity) > 1000
        or not identity.isprintable()
    ):
        raise InvalidInput("identity", "must be 1-1000 printable characters")
    return identity


def check_period(period: int | None) -> int | None:
    """Validate a period: ``None`` or an ``int`` in ``[0, MAX_ID]``."""
    if period is not None and (
        isinstance(period, bool) or not isinstance(period, int) or not 0 <= period <= MAX_ID
    ):
        raise InvalidInput("period", f"must be an integer in [0, {MAX_ID}], got {period!r}")
    return period


def check_transfer_id(transfer_id: int, field: str = "transfer") -> int:
    """Validate a transfer id: an ``int`` in ``[1, MAX_ID]`` (raises ``InvalidInput``)."""
    if (
        isinstance(transfer_id, bool)
        or not isinstance(transfer_id, int)
        or not 1 <= transfer_id <= MAX_ID
    ):
        raise InvalidInput(field, f"must be an integer in [1, {MAX_ID}], got {transfer_id!r}")
    return transfer_id


def check_total(total: int, added: int) -> None:
    """Refuse (``InvalidInput``) a mint of ``added`` that would raise the money in the bank,
    now ``total``, above :data:`~merkat.bank.money.MAX_TOTAL`."""
    if total + added > MAX_TOTAL:
        raise InvalidInput(
            "amount",
            f"minting {format_amount(added)} would bring the money in the bank to "
            f"{format_amount(total + added)}, above the maximum {format_amount(MAX_TOTAL)}",
        )


TOKEN_ACCOUNT = re.compile(r"/token-[0-9]+$")
"""Names of token-funded sub-accounts (``<payee>/token-<transfer id>``): reserved, only a
redemption creates them."""


def affordable(
    entries: Sequence[tuple[str, int]], balances: Mapping[str, int]
) -> tuple[list[int], list[int]]:
    """Greedy in input order: an entry is paid if its account still covers it (after the
    entries before it). Returns the indexes of the paid and the unpaid entries."""
    left = dict(balances)
    paid: list[int] = []
    unpaid: list[int] = []
    for k, (account, amount) in enumerate(entries):
        if left[account] >= amount:
            left[account] -= amount
            paid.append(k)
        else:
            unpaid.append(k)
    return paid, unpaid


def fingerprint(kind: str, moves: Iterable[tuple[str | None, str | None, int]]) -> str:
    """A digest identifying an operation, to tell a retry from a reuse of its idempotency key."""
    text = "".join([f"\x00{payer}\x01{payee}\x02{amount}" for payer, payee, amount in moves])
    return hashlib.sha256((kind + text).encode()).hexdigest()  # = one update per move


def check_moves(moves: Sequence[Move], *, names: bool = True) -> None:
    """Validate a batch: positive amounts, distinct payer and payee, and (``names``) valid
    account names. Raises ``InvalidInput`` naming the first bad element (``moves[3].amount``).
    Ledgers that look every name up anyway pass ``names=False`` (an unknown name is reported
    by the lookup)."""
    for i, move in enumerate(moves):
        if len(move) != 3:
            raise InvalidInput(f"moves[{i}]", "must be (payer, payee, amount)")
        payer, payee, amount = move
        if amount.__class__ is not int or not 0 < amount <= MAX_AMOUNT:
            check_amount(amount, f"moves[{i}].amount")
        if names or not isinstance(payer, str) or not isinstance(payee, str):
            check_name(payer, f"moves[{i}].payer")
            check_name(payee, f"moves[{i}].payee")
        if payer == payee:
            raise InvalidInput(f"moves[{i}]", f"payer and payee are the same account {payer!r}")


def check_credits(credits: Sequence[tuple[str, int]]) -> None:
    """Validate a batch of mints: ``(account, positive amount)`` pairs."""
    for i, credit in enumerate(credits):
        if len(credit) != 2:
            raise InvalidInput(f"credits[{i}]", "must be (account, amount)")
        check_name(credit[0], f"credits[{i}].account")
        check_amount(credit[1], f"credits[{i}].amount")


def check_new_account(
    name: str,
    kind: AccountKind | str,
    owner: str | None,
    lookup: Callable[[str], Account | None],
    *,
    token: bool = False,
) -> AccountKind:
    """Validate a new account; ``lookup(name)`` returns an existing account or ``None``.

    Returns the parsed kind. Applications and sub-accounts need an existing owner (a user for
    applications); other kinds take none. Raises ``InvalidInput``, ``DuplicateAccount`` or
    ``UnknownAccount``. Names ending in ``/token-N`` are reserved for the sub-accounts that
    token redemptions create (``token=True``).
    """
    from merkat.bank.errors import DuplicateAccount, UnknownAccount

    check_name(name)
    if not token and TOKEN_ACCOUNT.search(name):
        raise InvalidInput(
            "name", f"{name!r}: names ending in /token-N are reserved for redeemed tokens"
        )
    try:
        k = AccountKind(kind)
    except ValueError:
        kinds = ", ".join(k.value for k in AccountKind)
        raise InvalidInput("kind", f"must be one of {kinds}, got {kind!r}") from None
    if owner is not None:
        check_name(owner, "owner")
    if lookup(name) is not None:
        raise DuplicateAccount(name)
    if k in (AccountKind.application, AccountKind.sub):
        if owner is None:
            raise InvalidInput("owner", f"an {k.value} account needs an owner")
        owner_account = lookup(owner)
        if owner_account is None:
            raise UnknownAccount(owner, "owner")
        if k is AccountKind.application and owner_account.kind is not AccountKind.user:
            raise InvalidInput(
                "owner", f"the owner of an application must be a user, {owner!r} is not"
            )
    elif owner is not None:
        raise InvalidInput("owner", f"a {k.value} account has no owner")
    return k


def replayed_message(r: Redemption) -> str:
    """The refusal message for a token whose transfer was already redeemed as ``r``."""
    return (
        f"token already redeemed: transfer {r.transfer_id} already funded sub-account "
        f"{r.sub_account!r} (identity {r.identity!r})"
    )
