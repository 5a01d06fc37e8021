"""The SQL ledger's schema: its tables, its schema version and the statements built once.

Tables (all prefixed ``bank_``: the service's store shares the database, see
:mod:`merkat.service.db`):

- ``bank_meta``: key/value facts about the bank (``schema``, the version; ``bank_id``);
- ``bank_accounts``: one row per account, with its balance (``CHECK (balance >= 0)``);
- ``bank_transfers``: the journal, one row per movement (no payer: a mint; no payee: a burn);
- ``bank_idempotency``: ``idempotency key -> fingerprint`` of the operation done under it;
- ``bank_keys``: the users' Ed25519 public keys (Tycoon §3.1's transfer tokens);
- ``bank_redemptions``: which token (the paying transfer) funded which sub-account, once.

:class:`~merkat.bank.sql.SqlLedger` uses these; :func:`merkat.bank.db.open_ledger` creates them
and checks :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
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
    select,
    text,
    update,
)

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

# Statements built once (building SQLAlchemy constructs per call costs more than SQLite itself).
SEL_BAL = select(accounts.c.id, accounts.c.balance).where(
    accounts.c.id.in_(bindparam("ids", expanding=True))
)
SEL_BAL_LOCK = SEL_BAL.order_by(accounts.c.id).with_for_update()
UPD_BAL = (
    update(accounts)
    .where(accounts.c.id == bindparam("i"))
    .values(balance=accounts.c.balance + bindparam("d"))
)
SEL_FP = select(idempotency.c.fingerprint).where(idempotency.c.key == bindparam("key"))
INS_TRANSFER = insert(transfers).returning(transfers.c.id)
INS_KEY = insert(idempotency)
SQLITE_UPD_BAL = "UPDATE bank_accounts SET balance = balance + ? WHERE id = ?"
SEL_MAX_ID = select(func.coalesce(func.max(transfers.c.id), 0))
SQLITE_INSERT = (
    "INSERT INTO bank_transfers (id, kind, payer_id, payee_id, amount, reason, period, "
    "idempotency_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
PG_UPD_BAL = text(
    "UPDATE bank_accounts AS a SET balance = a.balance + v.d "
    "FROM unnest(CAST(:ids AS BIGINT[]), CAST(:ds AS BIGINT[])) AS v(id, d) WHERE a.id = v.id"
)
PG_NEXT_IDS = text(
    "SELECT nextval(pg_get_serial_sequence('bank_transfers', 'id')) "
    "FROM generate_series(1, :n) ORDER BY 1"
)
PG_COPY = (
    "COPY bank_transfers (id, kind, payer_id, payee_id, amount, reason, period, "
    "idempotency_key, created_at) FROM STDIN"
)

# The audit's replay of the journal: how many accounts' balances differ from the sum of their
# movements (summed as whole credits and remainders, so no 64-bit overflow).
MISMATCH_SQL = """
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
