"""The VMs of the active platforms (re-adopted after a restart).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "svc_vms",
        sa.Column("id", sa.String(160), primary_key=True),
        sa.Column("platform", sa.String(64), nullable=False, index=True),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("node", sa.String(64)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("bid", sa.Text, nullable=False),
        sa.Column("alloc", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("svc_vms")
