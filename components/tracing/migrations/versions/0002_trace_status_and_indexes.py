"""trace_status (recorded directly, or replayed from the spool) and indexes for the review commands.

`knowledge traces list` orders by created_at and filters on status; `trace_status` tells which
rows reached the database late, through the spool. Rows written before this revision keep a
NULL trace_status.

Revision ID: 0002_trace_status_and_indexes
Revises: 0001_tool_invocation
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_trace_status_and_indexes"
down_revision = "0001_tool_invocation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tool_invocation") as batch:
        batch.add_column(sa.Column("trace_status", sa.String(16), nullable=True))
    op.create_index("ix_tool_invocation_created_at", "tool_invocation", ["created_at"])
    op.create_index("ix_tool_invocation_status", "tool_invocation", ["status"])


def downgrade() -> None:
    op.drop_index("ix_tool_invocation_status", table_name="tool_invocation")
    op.drop_index("ix_tool_invocation_created_at", table_name="tool_invocation")
    with op.batch_alter_table("tool_invocation") as batch:
        batch.drop_column("trace_status")
