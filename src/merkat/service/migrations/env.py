"""Alembic environment of the service's tables: run by :func:`merkat.service.db.migrate`
with the connection in ``config.attributes["connection"]`` (never from the alembic CLI)."""

from __future__ import annotations

from alembic import context

from merkat.service.schema import metadata

VERSION_TABLE = "svc_alembic_version"

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  version_table=VERSION_TABLE, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
