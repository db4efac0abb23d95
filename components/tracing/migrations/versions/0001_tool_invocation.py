"""The tool_invocation table with the columns of docs/tracing.md.

Revision ID: 0001_tool_invocation
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_tool_invocation"
down_revision = None
branch_labels = None
depends_on = None

JSON_VARIANT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tool_invocation",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tool_name", sa.String(64), nullable=False),
        sa.Column("arguments", JSON_VARIANT, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("found", sa.Boolean, nullable=True),
        sa.Column("retrieval_layer", sa.String(16), nullable=True),
        sa.Column("latency_ms", sa.Float, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("retrieval_details", JSON_VARIANT, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("tool_invocation")
