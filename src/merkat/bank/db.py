"""Opening the bank's database: URL resolution, engine set-up, schema creation and checks.

URL resolution (:func:`resolve_url`): an explicit URL, else the ``MERKAT_DB`` environment
variable, else ``sqlite:///<user data dir>/merkat/bank.db`` (platformdirs).
Accepted schemes: ``sqlite:///PATH`` (``sqlite://`` alone is a private in-memory database) and
``postgresql://`` / ``postgres://`` (driven by psycopg 3). Anything else is refused with a
one-line :class:`~merkat.bank.errors.DatabaseError`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import platformdirs
from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from merkat.bank.errors import BadDatabaseURL, DatabaseError
from merkat.bank.money import MAX_TOTAL
from merkat.bank.schema import SCHEMA_VERSION, meta, metadata
from merkat.bank.sql import SqlLedger

ENV_VAR = "MERKAT_DB"
T = TypeVar("T")
BUSY_SLICE_MS = 250
"""How long SQLite's own busy handler waits for the write lock at a time: short, so that the
wait goes back to Python between slices (Ctrl-C and SIGTERM are seen at once) while
:meth:`~merkat.bank.sqlcore.SqlCore._tx` retries until :data:`merkat.bank.sqlcore.LOCK_WAIT_S`."""


def _waiting(engine: Engine, fn: Callable[[], T]) -> T:
    """``fn()``, retried while a SQLite database is locked by another process (SQLite's busy
    handler waits only :data:`BUSY_SLICE_MS` at a time; here the wait is in Python, so a
    signal is seen at once) until :data:`merkat.bank.sqlcore.LOCK_WAIT_S`."""
    import time

    from merkat.bank.sqlcore import LOCK_WAIT_S

    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return fn()
        except DBAPIError as exc:
            text_ = str(exc.orig).lower()
            if ("locked" not in text_ and "busy" not in text_) or time.monotonic() > deadline:
                raise
            engine.dispose()
            time.sleep(0.1)


def _begin_immediate(conn: Any) -> None:
    """``BEGIN IMMEDIATE`` on ``conn``, retried while the database is locked (see
    :data:`BUSY_SLICE_MS`) until :data:`merkat.bank.sqlcore.LOCK_WAIT_S`."""
    import time

    from merkat.bank.sqlcore import LOCK_WAIT_S

    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            return
        except DBAPIError as exc:
            text_ = str(exc.orig).lower()
            if ("locked" not in text_ and "busy" not in text_) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def default_url() -> str:
    """``sqlite:///`` + a ``bank.db`` file under the user's data directory."""
    path = Path(platformdirs.user_data_dir("merkat")) / "bank.db"
    return f"sqlite:///{path}"


def resolve_url(db: str | None = None) -> str:
    """The URL to use: ``db`` if given, else ``$MERKAT_DB``, else :func:`default_url`."""
    if db:
        return db
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    return default_url()


def parse_url(url: str) -> URL:
    """Parse and normalise a database URL (PostgreSQL -> psycopg 3); raise ``DatabaseError``."""
    try:
        u = make_url(url)
        _ = u.port  # a non-numeric port fails here (ValueError), not at connect time
    except (ArgumentError, ValueError):
        raise BadDatabaseURL(
            f"malformed database URL {url!r} (expected sqlite:///PATH or "
            "postgresql://USER:PASSWORD@HOST:PORT/DBNAME)"
        ) from None
    driver = u.drivername
    if driver in ("postgresql", "postgres", "postgresql+psycopg"):
        return u.set(drivername="postgresql+psycopg")
    if driver in ("sqlite", "sqlite+pysqlite"):
        return u.set(drivername="sqlite")
    raise BadDatabaseURL(
        f"unsupported database URL scheme {driver!r} in {_safe(u)} (use sqlite:/// or postgresql://)"
    )


def _safe(u: URL) -> str:
    return u.render_as_string(hide_password=True)


def make_engine(url: str, schema: str | None = None, *, readonly: bool = False) -> Engine:
    """An ``Engine`` for ``url``, with the bank's settings (SQLite: WAL, busy timeout,
    ``BEGIN IMMEDIATE``, foreign keys; PostgreSQL: psycopg 3, 10 s connect timeout, and the
    tables looked up in ``schema`` when given — tests and benchmarks use a scratch schema).
    ``readonly``: a SQLite file opened read-only (a directory we cannot write: no journal
    files created, writes refused)."""
    u = parse_url(url)
    if u.drivername == "sqlite":
        memory = u.database in (None, "", ":memory:")
        kwargs: dict[str, Any] = {"connect_args": {"timeout": BUSY_SLICE_MS / 1000}}
        if readonly and not memory:
            import sqlite3
            from urllib.parse import quote

            ro = f"file:{quote(str(u.database))}?mode=ro&immutable=1"
            kwargs["creator"] = lambda: sqlite3.connect(
                ro, uri=True, timeout=BUSY_SLICE_MS / 1000, check_same_thread=False
            )
        if memory:
            kwargs["poolclass"] = StaticPool
            kwargs["connect_args"]["check_same_thread"] = False
        engine = create_engine(u, **kwargs)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            if not memory and not readonly:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={BUSY_SLICE_MS}")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Every transaction takes the write lock here. SQLite's busy handler waits only
            # BUSY_SLICE_MS at a time; the wait continues here, in Python (a signal is seen
            # between slices), until LOCK_WAIT_S -- for every caller (bank, service store),
            # not only those that retry whole transactions.
            _begin_immediate(conn)

        return engine
    try:
        connect_args: dict[str, Any] = {"connect_timeout": 10}
        if schema is not None:
            connect_args["options"] = f"-csearch_path={schema}"
        return create_engine(u, connect_args=connect_args)
    except (NoSuchModuleError, ImportError) as exc:
        raise DatabaseError("PostgreSQL needs psycopg 3: pip install 'merkat[postgres]'") from exc


def open_ledger(
    db: str | None = None, *, create: bool = False, schema: str | None = None
) -> SqlLedger:
    """Open the SQL ledger at ``db`` (resolved by :func:`resolve_url`).

    ``create=True`` creates the schema if missing (``merkat bank init``); otherwise a database
    without the bank's schema is refused ("not initialised"). Unreachable servers and
    unopenable files raise :class:`DatabaseError` with a one-line reason.
    """
    url = resolve_url(db)
    u = parse_url(url)
    if url == default_url() and u.database and create:
        # The default file under the user's data directory: create the directory on first use.
        Path(u.database).parent.mkdir(parents=True, exist_ok=True)
    readonly = False
    if u.drivername == "sqlite" and u.database not in (None, "", ":memory:") and not create:
        path = Path(str(u.database))
        if not path.is_file():  # never create an empty database file as a side effect
            raise DatabaseError(
                f"the bank is not initialised in {_safe(u)} (no such file); "
                "run: merkat bank init --db URL"
            )
        readonly = not os.access(path.parent, os.W_OK) or not os.access(path, os.W_OK)
    engine = make_engine(url, schema, readonly=readonly)
    try:
        if schema is not None and create and engine.dialect.name == "postgresql":
            with engine.begin() as conn:
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))

        def probe() -> bool:
            with engine.connect() as conn:
                found = inspect(conn).has_table(meta.name)
                if not found and not create:
                    raise DatabaseError(
                        f"the bank is not initialised in {_safe(u)}; run: merkat bank init "
                        "--db URL"
                    )
                if found:
                    check_schema(conn, _safe(u))
                conn.rollback()
            return found

        _waiting(engine, probe)

        def init() -> None:
            with engine.begin() as conn:
                metadata.create_all(conn)
                version = conn.execute(select(meta.c.value).where(meta.c.key == "schema")).scalar()
                if version is None:
                    conn.execute(meta.insert().values(key="schema", value=SCHEMA_VERSION))
                    conn.execute(meta.insert().values(key="bank_id", value=secrets.token_hex(16)))

        if create:
            _waiting(engine, init)
    except DBAPIError as exc:
        engine.dispose()
        raise DatabaseError(f"cannot use database {_safe(u)}: {_first_line(exc)}") from None
    except DatabaseError:
        engine.dispose()
        raise
    ledger = SqlLedger(engine)
    if readonly:
        ledger._lock_path = None  # no lock file beside a database we must not write
    return ledger


def check_schema(conn: Connection, where: str) -> None:
    """Refuse a database of another schema version, or whose balances were tampered with (a
    text, fractional, negative or out-of-range balance: SQLite does not enforce column types).
    Raises :class:`DatabaseError`."""
    version = conn.execute(select(meta.c.value).where(meta.c.key == "schema")).scalar()
    if version != SCHEMA_VERSION:
        raise DatabaseError(
            f"{where}: bank schema version {version!r}, this merkat reads version "
            f"{SCHEMA_VERSION!r}"
        )
    if conn.dialect.name != "sqlite":
        return  # PostgreSQL enforces BIGINT and the CHECK constraint
    bad = conn.execute(
        text(
            "SELECT name, balance FROM bank_accounts WHERE typeof(balance) <> 'integer' "
            "OR balance < 0 OR balance > :most LIMIT 1"
        ),
        {"most": MAX_TOTAL},
    ).first()
    if bad is not None:
        raise DatabaseError(
            f"{where}: corrupt bank: account {bad[0]!r} has balance {bad[1]!r}, not an integer "
            f"number of micro-credits in [0, {MAX_TOTAL}]"
        )


def _first_line(exc: DBAPIError) -> str:
    text = str(exc.orig).strip()
    return text.splitlines()[0] if text else type(exc.orig).__name__
