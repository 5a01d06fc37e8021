"""The service's first schema: users, API keys, platforms, events, prices, state.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "svc_users",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_table(
        "svc_api_keys",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("svc_users.id"), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_table(
        "svc_platforms",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False, index=True),
        sa.Column("template", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("submitted", sa.Float, nullable=False),
        sa.Column("started", sa.Float),
        sa.Column("ended", sa.Float),
        sa.Column("outcome", sa.Text, nullable=False),
    )
    op.create_table(
        "svc_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("platform", sa.String(64), index=True),
        sa.Column("owner", sa.String(64), index=True),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_table(
        "svc_prices",
        sa.Column("period", sa.Integer, primary_key=True),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("cpu", sa.Float, nullable=False),
        sa.Column("memory", sa.Float, nullable=False),
    )
    op.create_table(
        "svc_state",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for t in ("svc_state", "svc_prices", "svc_events", "svc_platforms", "svc_api_keys",
              "svc_users"):
        op.drop_table(t)
