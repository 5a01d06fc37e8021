"""Each platform's deadline and bank account, recorded at admission (status views; a name
used again after ``merkat platform delete`` gets an account of its own).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("svc_platforms") as batch:
        batch.add_column(sa.Column("deadline", sa.Float))
        batch.add_column(sa.Column("account", sa.String(160)))


def downgrade() -> None:
    with op.batch_alter_table("svc_platforms") as batch:
        batch.drop_column("account")
        batch.drop_column("deadline")
