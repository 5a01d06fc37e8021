"""The service's tables (beside the bank's, in the same database).

Created and upgraded only through the alembic migrations in ``merkat/service/migrations``
(:func:`merkat.service.db.open_store`), so an upgrade keeps the data. Times are Unix seconds.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

users = Table(
    "svc_users", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("admin", Boolean, nullable=False, default=False),
    Column("created", Float, nullable=False),
)

api_keys = Table(
    "svc_api_keys", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user_id", Integer, ForeignKey("svc_users.id"), nullable=False),
    Column("digest", String(64), nullable=False, unique=True),  # sha256 of the key
    Column("prefix", String(16), nullable=False),  # the key's first characters, to tell keys apart
    Column("created", Float, nullable=False),
)

platforms = Table(
    "svc_platforms", metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(64), nullable=False, index=True),
    Column("template", Text, nullable=False),  # the validated template as JSON
    Column("state", String(16), nullable=False),
    Column("submitted", Float, nullable=False),
    Column("started", Float),
    Column("ended", Float),
    Column("outcome", Text, nullable=False, default=""),
    Column("deadline", Float),  # absolute (Unix s), set at admission; None: no deadline
    Column("account", String(160)),  # its bank account, set at admission (app:NAME[@G])
)

events = Table(
    "svc_events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("time", Float, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("platform", String(64), index=True),
    Column("owner", String(64), index=True),
    Column("message", Text, nullable=False),
)

prices = Table(
    "svc_prices", metadata,
    Column("period", Integer, primary_key=True),
    Column("time", Float, nullable=False),
    Column("cpu", Float, nullable=False),
    Column("memory", Float, nullable=False),
)

state = Table(
    "svc_state", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

vms = Table(
    "svc_vms", metadata,
    Column("id", String(160), primary_key=True),  # app/vmN
    Column("platform", String(64), nullable=False, index=True),
    Column("idx", Integer, nullable=False),  # the VM's index in its platform (MERKAT_INDEX)
    Column("node", String(64)),  # the node it runs on (None: not placed)
    Column("state", String(16), nullable=False),  # the platform's VMState
    Column("bid", Text, nullable=False),  # JSON {resource: amount}
    Column("alloc", Text, nullable=False),  # JSON {resource: amount}
)
"""Each active platform's VMs as the last period left them: what a restarted server re-adopts
(docs/service.md, "Crash and restart")."""

quotas = Table(
    "svc_quotas", metadata,
    Column("user", String(128), primary_key=True),
    Column("platforms", Integer),  # None: the server's default (merkat.service.quotas)
    Column("vms", Integer),
    Column("vms_per_platform", Integer),
    Column("template_bytes", Integer),
)
"""Per-user overrides of the server's quotas (``merkat user quota``)."""
