"""The persistent ledger on SQLAlchemy 2: SQLite (default; WAL) or PostgreSQL (psycopg 3).

Every public method is one database transaction (all-or-nothing). Balances are kept in the
``bank_accounts`` row (a ``CHECK (balance >= 0)`` guards them) and every movement is a row of
``bank_transfers``, so the audit can replay the journal against the balances.

Concurrency: on SQLite each transaction starts with ``BEGIN IMMEDIATE`` (one writer at a time,
waiting up to the busy timeout); on PostgreSQL the rows of all accounts a transaction touches
are locked with ``SELECT ... FOR UPDATE`` in id order (no deadlock between two transfers), and
deadlocks, serialization failures and lost idempotency races are retried.
"""

from __future__ import annotations

import fcntl
import os
import random
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    bindparam,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from merkat.bank.errors import (
    BankError,
    DatabaseError,
    IdempotencyConflict,
    InsufficientFunds,
    InvalidInput,
    TokenReplayed,
    UnknownAccount,
    UnknownTransfer,
)
from merkat.bank.ledger import (
    Account,
    AccountKind,
    Audit,
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
    check_new_account,
    check_period,
    check_reason,
    check_total,
    check_transfer_id,
    fingerprint,
    replayed_message,
)
from merkat.bank.money import MICRO

SCHEMA_VERSION = "1"

_Id = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

meta = Table(
    "bank_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(200), nullable=False),
)

accounts = Table(
    "bank_accounts",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("kind", String(16), nullable=False),
    Column("owner_id", _Id, ForeignKey("bank_accounts.id")),
    Column("identity", String(1000)),
    Column("balance", BigInteger, nullable=False),
    CheckConstraint("balance >= 0", name="bank_balance_not_negative"),
)

transfers = Table(
    "bank_transfers",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("kind", String(8), nullable=False),
    Column("payer_id", _Id, ForeignKey("bank_accounts.id")),
    Column("payee_id", _Id, ForeignKey("bank_accounts.id")),
    Column("amount", BigInteger, nullable=False),
    Column("reason", String(200), nullable=False),
    Column("period", BigInteger),
    Column("idempotency_key", String(200)),
    Column("created_at", Float, nullable=False),
    CheckConstraint("amount > 0", name="bank_amount_positive"),
    Index("bank_transfers_payer", "payer_id"),
    Index("bank_transfers_payee", "payee_id"),
    Index("bank_transfers_key", "idempotency_key"),
)

idempotency = Table(
    "bank_idempotency",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
)

keys = Table(
    "bank_keys",
    metadata,
    Column("account_id", _Id, ForeignKey("bank_accounts.id"), primary_key=True),
    Column("public_key", LargeBinary(32), nullable=False),
    Column("added_at", Float, nullable=False),
)

redemptions = Table(
    "bank_redemptions",
    metadata,
    Column("transfer_id", _Id, ForeignKey("bank_transfers.id"), primary_key=True),
    Column("sub_account_id", _Id, ForeignKey("bank_accounts.id"), nullable=False),
    Column("funding_transfer_id", _Id, ForeignKey("bank_transfers.id"), nullable=False),
    Column("redeemed_at", Float, nullable=False),
)

T = TypeVar("T")

# Statements built once (building SQLAlchemy constructs per call costs more than SQLite itself).
_SEL_BAL = select(accounts.c.id, accounts.c.balance).where(
    accounts.c.id.in_(bindparam("ids", expanding=True))
)
_SEL_BAL_LOCK = _SEL_BAL.order_by(accounts.c.id).with_for_update()
_UPD_BAL = (
    update(accounts)
    .where(accounts.c.id == bindparam("i"))
    .values(balance=accounts.c.balance + bindparam("d"))
)
_SEL_FP = select(idempotency.c.fingerprint).where(idempotency.c.key == bindparam("key"))
_INS_TRANSFER = insert(transfers).returning(transfers.c.id)
_INS_KEY = insert(idempotency)
_SQLITE_UPD_BAL = "UPDATE bank_accounts SET balance = balance + ? WHERE id = ?"
_SEL_MAX_ID = select(func.coalesce(func.max(transfers.c.id), 0))
_SQLITE_INSERT = (
    "INSERT INTO bank_transfers (id, kind, payer_id, payee_id, amount, reason, period, "
    "idempotency_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PG_UPD_BAL = text(
    "UPDATE bank_accounts AS a SET balance = a.balance + v.d "
    "FROM unnest(CAST(:ids AS BIGINT[]), CAST(:ds AS BIGINT[])) AS v(id, d) WHERE a.id = v.id"
)
_PG_NEXT_IDS = text(
    "SELECT nextval(pg_get_serial_sequence('bank_transfers', 'id')) "
    "FROM generate_series(1, :n) ORDER BY 1"
)
_PG_COPY = (
    "COPY bank_transfers (id, kind, payer_id, payee_id, amount, reason, period, "
    "idempotency_key, created_at) FROM STDIN"
)

_RETRYABLE_PG = {"40001", "40P01"}  # serialization failure, deadlock detected
_RETRIES = 30
LOCK_WAIT_S = 60.0
"""How long a SQLite writer waits, in all, for a database another process has locked."""


def _retryable(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:  # the server dropped the connection: use a fresh one
        return True
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    if code in _RETRYABLE_PG:
        return True
    msg = str(exc.orig).lower()
    return "database is locked" in msg or "database is busy" in msg


class SqlLedger:
    """A :class:`~merkat.bank.ledger.Ledger` persisted through a SQLAlchemy ``Engine``.

    Build it with :func:`merkat.bank.db.open_ledger` (URL handling, pragmas, schema checks).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pg = engine.dialect.name == "postgresql"
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._lock_path: str | None = None
        self._lock_fd: int | None = None
        db = engine.url.database
        if engine.dialect.name == "sqlite" and db and db != ":memory:":
            self._lock_path = db + ".lock"

    @contextmanager
    def _writer_lock(self) -> Iterator[None]:
        """On a SQLite file, queue writers on an OS file lock (``flock``) around each
        transaction: waiters are woken as soon as the lock is free, instead of sleeping in
        SQLite's busy handler (~1.4x the throughput with 8 processes on 2 cores). Processes
        that do not use it are still serialised by ``BEGIN IMMEDIATE`` and the busy timeout."""
        if self._lock_path is None:
            yield
            return
        if self._lock_fd is None:
            try:
                self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:  # e.g. a read-only directory: rely on SQLite's own locking
                self._lock_path = None
                yield
                return
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # --- plumbing ----------------------------------------------------------------------

    def _tx(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one transaction, retrying transient conflicts; map DB errors."""
        deadline = time.monotonic() + LOCK_WAIT_S
        attempt = 0
        while True:
            try:
                with self._writer_lock(), self.engine.begin() as conn:
                    return fn(conn)
            except BankError:
                raise  # a refusal: rolled back, nothing to retry
            except IntegrityError as exc:
                # A concurrent transaction won a race on a unique key (idempotency key,
                # account name, redemption): retry; the re-read sees the winner.
                self._forget_uncommitted()
                if attempt >= _RETRIES - 1:
                    raise DatabaseError(f"database integrity error: {_first_line(exc)}") from exc
            except DBAPIError as exc:
                self._forget_uncommitted()
                if not _retryable(exc):
                    raise DatabaseError(f"database error: {_first_line(exc)}") from exc
                # SQLite's busy handler waits in short slices: a locked database is retried
                # here, in Python, until LOCK_WAIT_S (a signal is seen between slices)
                locked = "locked" in str(exc.orig).lower() or "busy" in str(exc.orig).lower()
                if (time.monotonic() > deadline) if locked else attempt >= _RETRIES - 1:
                    raise DatabaseError(f"database error: {_first_line(exc)}") from exc
            attempt += 1
            time.sleep(min(0.5, 0.005 * 2 ** min(attempt - 1, 7)) * random.random())

    @staticmethod
    def _total(conn: Connection) -> int:
        """The money in the bank (sum of balances; at most ``MAX_TOTAL``, no overflow)."""
        return int(
            conn.execute(select(func.coalesce(func.sum(accounts.c.balance), 0))).scalar_one()
        )

    def bank_id(self) -> str:
        """This bank's identity: a random id stored with the bank (created on first use)."""

        def run(conn: Connection) -> str:
            value = conn.execute(select(meta.c.value).where(meta.c.key == "bank_id")).scalar()
            if value is None:
                value = secrets.token_hex(16)
                conn.execute(insert(meta).values(key="bank_id", value=value))
            return str(value)

        return self._tx(run)

    def _forget_uncommitted(self) -> None:
        """Drop the name -> id cache after a failed transaction (it may have seen rows that
        were rolled back)."""
        self._ids.clear()
        self._names.clear()

    def _resolve(
        self, conn: Connection, names: Iterable[str], field: str = "account"
    ) -> dict[str, int]:
        """Map account names to ids (cached: accounts are never renamed or deleted)."""
        out: dict[str, int] = {}
        missing: list[str] = []
        for n in names:
            i = self._ids.get(n)
            if i is None:
                missing.append(n)
            else:
                out[n] = i
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            rows = conn.execute(
                select(accounts.c.name, accounts.c.id).where(accounts.c.name.in_(chunk))
            )
            for name, i in rows:
                out[name] = i
                self._ids[name] = i
                self._names[i] = name
        for n in missing:
            if n not in out:
                check_name(n, field)
                raise UnknownAccount(n, field)
        return out

    def _lock_balances(self, conn: Connection, ids: Iterable[int]) -> dict[int, int]:
        """Read (and on PostgreSQL lock, in id order) the balances of accounts ``ids``."""
        out: dict[int, int] = {}
        ordered = sorted(set(ids))
        for start in range(0, len(ordered), 1000):
            chunk = ordered[start : start + 1000]
            q = _SEL_BAL_LOCK if self._pg else _SEL_BAL
            out.update((i, b) for i, b in conn.execute(q, {"ids": chunk}))
        return out

    def _apply(self, conn: Connection, net: dict[int, int], names: dict[int, str]) -> None:
        """Lock the accounts in ``net`` (id order), refuse any overdraft, apply the changes."""
        current = self._lock_balances(conn, net)
        for i, delta in net.items():
            if current[i] + delta < 0:
                raise InsufficientFunds(names[i], current[i], -delta)
        params = [{"i": i, "d": d} for i, d in sorted(net.items()) if d != 0]
        if self._pg and len(params) > 1:
            # One statement for the whole batch (executemany would send one per account).
            conn.execute(
                _PG_UPD_BAL, {"ids": [p["i"] for p in params], "ds": [p["d"] for p in params]}
            )
        elif len(params) > 50 and not self._pg:
            raw: Any = conn.connection.dbapi_connection
            raw.executemany(_SQLITE_UPD_BAL, [(p["d"], p["i"]) for p in params])
        elif params:
            conn.execute(_UPD_BAL, params)

    def _replay(self, conn: Connection, key: str | None, fp: str) -> list[int] | None:
        """Ids of the operation already done under ``key`` (or ``None``); conflict if different."""
        if key is None:
            return None
        old = conn.execute(_SEL_FP, {"key": key}).scalar()
        if old is None:
            return None
        if old != fp:
            raise IdempotencyConflict(key)
        ids = conn.execute(
            select(transfers.c.id)
            .where(transfers.c.idempotency_key == key)
            .order_by(transfers.c.id)
        ).scalars()
        return list(ids)

    def _account_from_row(self, conn: Connection, row: Any) -> Account:
        owner = None
        if row.owner_id is not None:
            owner = conn.execute(
                select(accounts.c.name).where(accounts.c.id == row.owner_id)
            ).scalar_one()
        return Account(row.name, AccountKind(row.kind), owner, row.identity)

    # --- accounts ----------------------------------------------------------------------

    def _lookup(self, conn: Connection, name: str) -> Account | None:
        row = conn.execute(select(accounts).where(accounts.c.name == name)).first()
        return None if row is None else self._account_from_row(conn, row)

    def _create(
        self,
        conn: Connection,
        name: str,
        kind: AccountKind,
        owner: str | None,
        identity: str | None,
        *,
        token: bool = False,
    ) -> int:
        k = check_new_account(name, kind, owner, lambda n: self._lookup(conn, n), token=token)
        owner_id = None if owner is None else self._resolve(conn, [owner], "owner")[owner]
        return int(
            conn.execute(
                insert(accounts)
                .values(name=name, kind=k.value, owner_id=owner_id, identity=identity, balance=0)
                .returning(accounts.c.id)
            ).scalar_one()
        )

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

    def _single(
        self,
        kind: TransferKind,
        payer: str | None,
        payee: str | None,
        amount: int,
        reason: str,
        period: int | None,
        key: str | None,
    ) -> Transfer:
        check_amount(amount)
        check_reason(reason)
        check_period(period)
        check_key(key)
        if payer is not None and payer == payee:
            raise InvalidInput("payee", f"payer and payee are the same account {payer!r}")
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
            tid = conn.execute(_INS_TRANSFER, row).scalar_one()
            if key is not None:
                conn.execute(_INS_KEY, {"key": key, "fingerprint": fp})
            return Transfer(int(tid), kind, payer, payee, amount, reason, period, key)

        return self._tx(run)

    def mint(
        self,
        account: str,
        amount: int,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Transfer:
        return self._single(
            TransferKind.mint, None, account, amount, reason, period, idempotency_key
        )

    def burn(
        self,
        account: str,
        amount: int,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Transfer:
        return self._single(
            TransferKind.burn, account, None, amount, reason, period, idempotency_key
        )

    def transfer(
        self,
        payer: str,
        payee: str,
        amount: int,
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Transfer:
        check_name(payer, "payer")
        check_name(payee, "payee")
        return self._single(
            TransferKind.transfer, payer, payee, amount, reason, period, idempotency_key
        )

    def transfer_many(
        self,
        moves: Sequence[Move],
        reason: str,
        period: int | None = None,
        idempotency_key: str | None = None,
    ) -> Sequence[int]:
        check_reason(reason)
        check_period(period)
        check_key(idempotency_key)
        moves = list(moves)
        check_moves(moves, names=False)
        if not moves:
            return []
        fp = fingerprint("batch", moves) if idempotency_key is not None else ""

        def run(conn: Connection) -> list[int]:
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

    def _write_journal(
        self,
        conn: Connection,
        rows: list[tuple[str, int | None, int | None, int]],
        reason: str,
        period: int | None,
        key: str | None,
        fp: str,
    ) -> list[int]:
        """Append ``(kind, payer_id, payee_id, amount)`` rows to the journal in bulk; return
        their ids in order. SQLite: the driver's ``executemany`` (a C loop), ids assigned after
        the current maximum (the transaction holds the write lock, nobody else can take them).
        PostgreSQL: ids reserved from the sequence, then ``COPY`` (several times faster than a
        multi-row ``INSERT ... RETURNING`` for 10,000 rows)."""
        now = time.time()
        raw: Any = conn.connection.dbapi_connection
        if self._pg:
            new_ids = [int(i) for i in conn.execute(_PG_NEXT_IDS, {"n": len(rows)}).scalars()]
            with raw.cursor() as cur, cur.copy(_PG_COPY) as copy:
                for tid, (kind, src, dst, amount) in zip(new_ids, rows, strict=True):
                    copy.write_row((tid, kind, src, dst, amount, reason, period, key, now))
        else:
            first = int(conn.execute(_SEL_MAX_ID).scalar_one()) + 1
            new_ids = list(range(first, first + len(rows)))
            raw.executemany(
                _SQLITE_INSERT,
                [
                    (tid, kind, src, dst, amount, reason, period, key, now)
                    for tid, (kind, src, dst, amount) in zip(new_ids, rows, strict=True)
                ],
            )
        if key is not None:
            conn.execute(_INS_KEY, {"key": key, "fingerprint": fp})
        return new_ids

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

    def _transfer_query(self) -> Any:
        payer = accounts.alias("payer")
        payee = accounts.alias("payee")
        return (
            select(
                transfers.c.id,
                transfers.c.kind,
                payer.c.name,
                payee.c.name,
                transfers.c.amount,
                transfers.c.reason,
                transfers.c.period,
                transfers.c.idempotency_key,
            )
            .outerjoin(payer, payer.c.id == transfers.c.payer_id)
            .outerjoin(payee, payee.c.id == transfers.c.payee_id)
        )

    @staticmethod
    def _to_transfer(row: Any) -> Transfer:
        tid, kind, payer, payee, amount, reason, period, key = row
        return Transfer(
            int(tid), TransferKind(kind), payer, payee, int(amount), reason,
            None if period is None else int(period), key,
        )  # fmt: skip

    def _get(self, conn: Connection, transfer_id: int) -> Transfer:
        row = conn.execute(self._transfer_query().where(transfers.c.id == transfer_id)).first()
        if row is None:
            raise UnknownTransfer(transfer_id)
        return self._to_transfer(row)

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
            mismatches = conn.execute(text(_MISMATCH_SQL)).scalar_one()
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

    def close(self) -> None:
        self.engine.dispose()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _read(conn: Connection, ids: Iterable[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    ordered = sorted(set(ids))
    for start in range(0, len(ordered), 1000):
        chunk = ordered[start : start + 1000]
        q = select(accounts.c.id, accounts.c.balance).where(accounts.c.id.in_(chunk))
        out.update((i, int(b)) for i, b in conn.execute(q))
    return out


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__


_MISMATCH_SQL = """
SELECT COUNT(*) FROM bank_accounts a
LEFT JOIN (
    SELECT acct, SUM(delta / 1000000) AS whole, SUM(delta % 1000000) AS rest FROM (
        SELECT payee_id AS acct, amount AS delta FROM bank_transfers WHERE payee_id IS NOT NULL
        UNION ALL
        SELECT payer_id AS acct, -amount AS delta FROM bank_transfers WHERE payer_id IS NOT NULL
    ) moves GROUP BY acct
) j ON j.acct = a.id
WHERE a.balance <> COALESCE(j.whole, 0) * 1000000 + COALESCE(j.rest, 0)
"""
