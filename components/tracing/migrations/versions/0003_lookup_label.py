"""lookup_label: reviewers' verdicts on recorded lookups (docs/tracing.md#labels).

Rows are never updated or deleted: a later label of the same invocation supersedes the earlier
one by `created_at`. `invocation_id` links to `tool_invocation.id` without a foreign key, so a
label imported from an eval file (no lookup behind it) and a label replayed from the spool
before its invocation's row both fit.

Revision ID: 0003_lookup_label
Revises: 0002_trace_status_and_indexes
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_lookup_label"
down_revision = "0002_trace_status_and_indexes"
branch_labels = None
depends_on = None

JSON_VARIANT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "lookup_label",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("invocation_id", sa.String(64), nullable=True),
        sa.Column("query", sa.Text, nullable=True),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("sources", JSON_VARIANT, nullable=True),
        sa.Column("reviewer", sa.String(256), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_lookup_label_invocation_id", "lookup_label", ["invocation_id"])
    op.create_index("ix_lookup_label_created_at", "lookup_label", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_lookup_label_created_at", table_name="lookup_label")
    op.drop_index("ix_lookup_label_invocation_id", table_name="lookup_label")
    op.drop_table("lookup_label")
