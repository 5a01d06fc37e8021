"""Shared fixtures for the bank tests (imported by the test_bank_* modules; holds no tests).

``ledger`` runs a test against each implementation: the in-memory ledger, SQLite (a file) and
PostgreSQL (a scratch schema in $MERKAT_TEST_POSTGRES_URL; skipped locally without it, a
failure when CI=true).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from merkat.bank.db import open_ledger
from merkat.bank.ledger import Ledger
from merkat.bank.memory import MemoryLedger
from merkat.bank.sql import SqlLedger

PG_ENV = "MERKAT_TEST_POSTGRES_URL"


def postgres_url() -> str:
    """The test server's URL; skips (locally) or fails (CI=true) when there is none."""
    url = os.environ.get(PG_ENV)
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {PG_ENV} is unset: run the tests through `make test`")
        pytest.skip(f"no PostgreSQL: set {PG_ENV} (e.g. to the URL printed by scripts/postgres.sh)")
    return url


def drop_schema(url: str, schema: str) -> None:
    ledger = open_ledger(url, create=True, schema=schema)
    with ledger.engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    ledger.close()


LedgerFactory = Callable[[], Ledger]


@pytest.fixture(
    name="make_ledger",
    params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def make_ledger_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LedgerFactory]:
    """A factory of fresh, empty ledgers of one implementation."""
    made: list[Ledger] = []
    schemas: list[str] = []
    url = postgres_url() if request.param == "postgresql" else ""

    def factory() -> Ledger:
        ledger: Ledger
        if request.param == "memory":
            ledger = MemoryLedger()
        elif request.param == "sqlite":
            ledger = open_ledger(f"sqlite:///{tmp_path / f'bank{len(made)}.db'}", create=True)
        else:
            schema = f"t_{secrets.token_hex(6)}"
            schemas.append(schema)
            ledger = open_ledger(url, create=True, schema=schema)
        made.append(ledger)
        return ledger

    yield factory
    for ledger in made:
        ledger.close()
    for schema in schemas:
        drop_schema(url, schema)


@pytest.fixture(name="ledger")
def ledger_fixture(make_ledger: LedgerFactory) -> Ledger:
    """A fresh, empty ledger of each implementation."""
    return make_ledger()


def is_sql(ledger: Ledger) -> bool:
    return isinstance(ledger, SqlLedger)
