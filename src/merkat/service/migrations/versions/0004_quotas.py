"""Per-user quota overrides (``merkat user quota``).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "svc_quotas",
        sa.Column("user", sa.String(128), primary_key=True),
        sa.Column("platforms", sa.Integer),
        sa.Column("vms", sa.Integer),
        sa.Column("vms_per_platform", sa.Integer),
        sa.Column("template_bytes", sa.Integer),
    )


def downgrade() -> None:
    op.drop_table("svc_quotas")
