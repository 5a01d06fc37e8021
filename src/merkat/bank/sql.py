"""The persistent ledger on SQLAlchemy 2: SQLite (default; WAL) or PostgreSQL (psycopg 3).

Every public method is one database transaction (all-or-nothing). Balances are kept in the
``bank_accounts`` row (a ``CHECK (balance >= 0)`` guards them) and every movement is a row of
``bank_transfers``, so the audit can replay the journal against the balances.

Concurrency: on SQLite each transaction starts with ``BEGIN IMMEDIATE`` (one writer at a time,
waiting up to the busy timeout); on PostgreSQL the rows of all accounts a transaction touches
are locked with ``SELECT ... FOR UPDATE`` in id order (no deadlock between two transfers), and
deadlocks, serialization failures and lost idempotency races are retried.

Where things are: this module holds :class:`SqlLedger`'s public operations (accounts, movements,
the journal and the audit, Tycoon's keys and token redemptions); :mod:`merkat.bank.sqlcore` its
machinery (transactions, retries, locks, the steps the operations share);
:mod:`merkat.bank.schema` the tables and the statements built once. The names other modules
import from here (``SCHEMA_VERSION``, ``metadata``, the tables, ``LOCK_WAIT_S``) are re-exported.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, or_, select, text, update

from merkat.bank.errors import InvalidInput, TokenReplayed, UnknownAccount
from merkat.bank.ledger import (
    Account,
    AccountKind,
    Audit,
    Ledger,
    Move,
    Redemption,
    Transfer,
    TransferKind,
    check_amount,
    check_credits,
    check_identity,
    check_key,
    check_moves,
    check_name,
    check_period,
    check_reason,
    check_total,
    check_transfer_id,
    fingerprint,
    replayed_message,
)
from merkat.bank.schema import (
    INS_KEY,
    INS_TRANSFER,
    MISMATCH_SQL,
    SCHEMA_VERSION,
    accounts,
    idempotency,
    keys,
    meta,
    metadata,
    redemptions,
    transfers,
)
from merkat.bank.sqlcore import LOCK_WAIT_S, SqlCore
from merkat.defaults import MICRO

__all__ = [
    "LOCK_WAIT_S",
    "SCHEMA_VERSION",
    "SqlLedger",
    "accounts",
    "idempotency",
    "keys",
    "meta",
    "metadata",
    "redemptions",
    "transfers",
]


class SqlLedger(SqlCore, Ledger):
    """A :class:`~merkat.bank.ledger.Ledger` persisted through a SQLAlchemy ``Engine``.

    Build it with :func:`merkat.bank.db.open_ledger` (URL handling, pragmas, schema checks).
    """

    def bank_id(self) -> str:
        """This bank's identity: a random id stored with the bank (created on first use)."""

        def run(conn: Connection) -> str:
            value = conn.execute(select(meta.c.value).where(meta.c.key == "bank_id")).scalar()
            if value is None:
                value = secrets.token_hex(16)
                conn.execute(insert(meta).values(key="bank_id", value=value))
            return str(value)

        return self._tx(run)

    # --- accounts ----------------------------------------------------------------------

    def create_account(
        self,
        name: str,
        kind: AccountKind,
        owner: str | None = None,
        identity: str | None = None,
    ) -> Account:
        check_identity(identity)

        def run(conn: Connection) -> Account:
            self._create(conn, name, kind, owner, identity)
            return Account(name, AccountKind(kind), owner, identity)

        return self._tx(run)

    def get_account(self, name: str) -> Account:
        def run(conn: Connection) -> Account:
            account = self._lookup(conn, name)
            if account is None:
                check_name(name)
                raise UnknownAccount(name)
            return account

        return self._tx(run)

    def has_account(self, name: str) -> bool:
        return self._tx(lambda conn: self._lookup(conn, name) is not None)

    def accounts(self, kind: AccountKind | None = None) -> list[Account]:
        def run(conn: Connection) -> list[Account]:
            owner = accounts.alias("owner")
            q = select(
                accounts.c.name, accounts.c.kind, owner.c.name, accounts.c.identity
            ).outerjoin(owner, owner.c.id == accounts.c.owner_id)
            if kind is not None:
                q = q.where(accounts.c.kind == AccountKind(kind).value)
            return [
                Account(n, AccountKind(k), o, i)
                for n, k, o, i in conn.execute(q.order_by(accounts.c.name))
            ]

        return self._tx(run)

    def balance(self, name: str) -> int:
        return self.balances([name])[name]

    def balances(self, names: Iterable[str] | None = None) -> dict[str, int]:
        wanted = None if names is None else list(names)

        def run(conn: Connection) -> dict[str, int]:
            if wanted is None:
                return {
                    n: int(b) for n, b in conn.execute(select(accounts.c.name, accounts.c.balance))
                }
            ids = self._resolve(conn, wanted)
            rows = _read(conn, ids.values())
            return {n: rows[ids[n]] for n in wanted}

        return self._tx(run)

    # --- movements ---------------------------------------------------------------------

    def _move(
        self,
        kind: TransferKind,
        payer: str | None,
        payee: str | None,
        amount: int,
        reason: str,
        period: int | None,
        key: str | None,
    ) -> Transfer:
        fp = fingerprint(kind.value, [(payer, payee, amount)])

        def run(conn: Connection) -> Transfer:
            both = payer is not None and payee is not None
            ids: dict[str, int] = {}
            if payer is not None:
                ids.update(self._resolve(conn, [payer], "payer" if both else "account"))
            if payee is not None:
                ids.update(self._resolve(conn, [payee], "payee" if both else "account"))
            old = self._replay(conn, key, fp)
            if old is not None:
                return self._get(conn, old[0])
            if kind is TransferKind.mint:
                check_total(self._total(conn), amount)
            net: dict[int, int] = {}
            if payer is not None:
                net[ids[payer]] = -amount
            if payee is not None:
                net[ids[payee]] = amount
            self._apply(conn, net, {i: n for n, i in ids.items()})
            row = {
                "kind": kind.value,
                "payer_id": None if payer is None else ids[payer],
                "payee_id": None if payee is None else ids[payee],
                "amount": amount,
                "reason": reason,
                "period": period,
                "idempotency_key": key,
                "created_at": time.time(),
            }
            tid = conn.execute(INS_TRANSFER, row).scalar_one()
            if key is not None:
                conn.execute(INS_KEY, {"key": key, "fingerprint": fp})
            return Transfer(int(tid), kind, payer, payee, amount, reason, period, key)

        return self._tx(run)

    def transfer_many(
        self,
        moves: Sequence[Move],
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
        also: Callable[[Any], None] | None = None,
    ) -> Sequence[int]:
        check_reason(reason)
        check_period(period)
        check_key(idempotency_key)
        moves = list(moves)
        check_moves(moves, names=False)
        if not moves:
            if also is not None:
                self._tx(also)
            return []
        fp = fingerprint("batch", moves) if idempotency_key is not None else ""

        def run(conn: Connection) -> list[int]:
            out = moved(conn)
            if also is not None:
                also(conn)
            return out

        def moved(conn: Connection) -> list[int]:
            names = {n for payer, payee, _ in moves for n in (payer, payee)}
            ids = self._resolve(conn, names)
            old = self._replay(conn, idempotency_key, fp)
            if old is not None:
                return old
            net: dict[int, int] = {}
            for payer, payee, amount in moves:
                i, j = ids[payer], ids[payee]
                net[i] = net.get(i, 0) - amount
                net[j] = net.get(j, 0) + amount
            self._apply(conn, net, {i: n for n, i in ids.items()})
            rows: list[tuple[str, int | None, int | None, int]] = [
                ("transfer", ids[payer], ids[payee], amount) for payer, payee, amount in moves
            ]
            return self._write_journal(conn, rows, reason, period, idempotency_key, fp)

        return self._tx(run)

    def mint_many(
        self,
        credits: Sequence[tuple[str, int]],
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Sequence[int]:
        check_reason(reason)
        check_period(period)
        check_key(idempotency_key)
        credits = list(credits)
        check_credits(credits)
        if not credits:
            return []
        fp = fingerprint("mint-batch", [(None, a, x) for a, x in credits])

        def run(conn: Connection) -> list[int]:
            ids = self._resolve(conn, {a for a, _ in credits})
            old = self._replay(conn, idempotency_key, fp)
            if old is not None:
                return old
            check_total(self._total(conn), sum(x for _, x in credits))
            net: dict[int, int] = {}
            for account, amount in credits:
                net[ids[account]] = net.get(ids[account], 0) + amount
            self._apply(conn, net, {i: n for n, i in ids.items()})
            rows: list[tuple[str, int | None, int | None, int]] = [
                ("mint", None, ids[a], x) for a, x in credits
            ]
            return self._write_journal(conn, rows, reason, period, idempotency_key, fp)

        return self._tx(run)

    # --- journal -----------------------------------------------------------------------

    def get_transfer(self, transfer_id: int) -> Transfer:
        check_transfer_id(transfer_id)
        return self._tx(lambda conn: self._get(conn, transfer_id))

    def history(self, account: str, limit: int | None = None) -> list[Transfer]:
        def run(conn: Connection) -> list[Transfer]:
            i = self._resolve(conn, [account])[account]
            q = (
                self._transfer_query()
                .where(or_(transfers.c.payer_id == i, transfers.c.payee_id == i))
                .order_by(transfers.c.id.desc())
            )
            if limit is not None:
                q = q.limit(limit)
            return [self._to_transfer(r) for r in conn.execute(q)]

        return self._tx(run)

    def audit(self) -> Audit:
        def run(conn: Connection) -> Audit:
            # Sums of the journal can exceed 64 bits (mint and burn cycles): summed as whole
            # credits and remainders separately, each far from overflow, then combined exactly.
            sums = []
            for kind in ("mint", "burn"):
                amount = transfers.c.amount
                whole, rest = conn.execute(
                    select(
                        func.coalesce(
                            func.sum(amount // MICRO).filter(transfers.c.kind == kind), 0
                        ),
                        func.coalesce(func.sum(amount % MICRO).filter(transfers.c.kind == kind), 0),
                    )
                ).one()
                sums.append(int(whole) * MICRO + int(rest))
            minted, burned = sums
            total, negative = conn.execute(
                select(
                    func.coalesce(func.sum(accounts.c.balance), 0),
                    func.count().filter(accounts.c.balance < 0),
                )
            ).one()
            mismatches = conn.execute(text(MISMATCH_SQL)).scalar_one()
            minted, burned, total = int(minted), int(burned), int(total)
            ok = minted - burned == total and negative == 0 and mismatches == 0
            return Audit(minted, burned, total, ok, int(negative), int(mismatches))

        return self._tx(run)

    # --- keys and tokens ---------------------------------------------------------------

    def register_key(self, user: str, public_key: bytes) -> None:
        if len(public_key) != 32:
            raise InvalidInput("public_key", "an Ed25519 public key has 32 bytes")

        def run(conn: Connection) -> None:
            account = self._lookup(conn, user)
            if account is None:
                check_name(user, "user")
                raise UnknownAccount(user, "user")
            if account.kind is not AccountKind.user:
                raise InvalidInput(
                    "user", f"{user!r} is a {account.kind.value} account, not a user"
                )
            i = self._resolve(conn, [user])[user]
            conn.execute(keys.delete().where(keys.c.account_id == i))
            conn.execute(
                insert(keys).values(
                    account_id=i, public_key=bytes(public_key), added_at=time.time()
                )
            )

        self._tx(run)

    def public_key(self, user: str) -> bytes | None:
        def run(conn: Connection) -> bytes | None:
            i = self._resolve(conn, [user], "user")[user]
            k = conn.execute(select(keys.c.public_key).where(keys.c.account_id == i)).scalar()
            return None if k is None else bytes(k)

        return self._tx(run)

    def redeem(
        self, transfer_id: int, identity: str, sub_account: str, amount: int, payee: str
    ) -> Redemption:
        check_amount(amount)

        def run(conn: Connection) -> Redemption:
            old = conn.execute(
                select(redemptions.c.transfer_id, accounts.c.name, accounts.c.identity)
                .join(accounts, accounts.c.id == redemptions.c.sub_account_id)
                .where(redemptions.c.transfer_id == transfer_id)
            ).first()
            if old is not None:
                raise TokenReplayed(
                    replayed_message(Redemption(transfer_id, old[1], old[2] or "", amount, 0))
                )
            payee_id = self._resolve(conn, [payee], "payee")[payee]
            self._apply(conn, {payee_id: -amount}, {payee_id: payee})
            sub_id = self._create(conn, sub_account, AccountKind.sub, payee, identity, token=True)
            conn.execute(update(accounts).where(accounts.c.id == sub_id).values(balance=amount))
            reason = f"token redemption of transfer {transfer_id}"
            fid = conn.execute(
                insert(transfers)
                .values(
                    kind="transfer", payer_id=payee_id, payee_id=sub_id, amount=amount,
                    reason=reason, period=None, idempotency_key=None, created_at=time.time(),
                )
                .returning(transfers.c.id)
            ).scalar_one()  # fmt: skip
            conn.execute(
                insert(redemptions).values(
                    transfer_id=transfer_id, sub_account_id=sub_id, funding_transfer_id=fid,
                    redeemed_at=time.time(),
                )
            )  # fmt: skip
            return Redemption(transfer_id, sub_account, identity, amount, int(fid))

        return self._tx(run)


def _read(conn: Connection, ids: Iterable[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    ordered = sorted(set(ids))
    for start in range(0, len(ordered), 1000):
        chunk = ordered[start : start + 1000]
        q = select(accounts.c.id, accounts.c.balance).where(accounts.c.id.in_(chunk))
        out.update((i, int(b)) for i, b in conn.execute(q))
    return out
