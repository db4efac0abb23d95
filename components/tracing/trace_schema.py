"""
The `tool_invocation` and `lookup_label` tables and their schema migrations.

The schema is created and migrated with Alembic (`components/tracing/migrations`), run in code;
the revision is recorded in the `lookup_knowledge_schema_version` table (a name of its own, so
the trace table may share a database with MLflow's store, which has its own `alembic_version`).
`retrieval_details` is JSON, JSONB on PostgreSQL.
"""

from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Engine

from components.common.masking import masked
from components.errors import BadInputError

TABLE_NAME = "tool_invocation"
VERSION_TABLE = "lookup_knowledge_schema_version"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

JSON_VARIANT = JSON().with_variant(postgresql.JSONB(), "postgresql")

metadata = MetaData()
tool_invocation = Table(
    TABLE_NAME,
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tool_name", String(64), nullable=False),
    Column("arguments", JSON_VARIANT, nullable=True),
    Column("status", String(16), nullable=False),
    Column("found", Boolean, nullable=True),
    Column("retrieval_layer", String(16), nullable=True),
    Column("latency_ms", Float, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("error", Text, nullable=True),
    Column("retrieval_details", JSON_VARIANT, nullable=True),
    Column("trace_status", String(16), nullable=True),
    Index("ix_tool_invocation_created_at", "created_at"),
    Index("ix_tool_invocation_status", "status"),
)
COLUMNS = [c.name for c in tool_invocation.columns]

LABEL_TABLE_NAME = "lookup_label"
lookup_label = Table(
    LABEL_TABLE_NAME,
    metadata,
    Column("id", String(128), primary_key=True),
    Column("invocation_id", String(64), nullable=True),
    Column("query", Text, nullable=True),
    Column("verdict", String(16), nullable=False),
    Column("sources", JSON_VARIANT, nullable=True),
    Column("reviewer", String(256), nullable=False),
    Column("origin", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_lookup_label_invocation_id", "invocation_id"),
    Index("ix_lookup_label_created_at", "created_at"),
)
LABEL_COLUMNS = [c.name for c in lookup_label.columns]


def alembic_config(connection) -> "Any":
    """An Alembic Config built in code (no alembic.ini): our script folder, our version table."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    config.attributes["version_table"] = VERSION_TABLE
    return config


class TraceSchemaError(BadInputError):
    """A trace database this code must not migrate or read: written by a newer version, or damaged."""


def upgrade_schema(engine: Engine, revision: str = "head") -> None:
    """
    Create or migrate the trace schema to `revision` (idempotent). A database already
    at the head is told by plain queries, without Alembic, whose import and script scan would
    otherwise weigh on every one-shot lookup's start.

    :raises TraceSchemaError: The database is newer than this code or damaged (`schema_revision`).
    """
    if revision == "head" and schema_revision(engine) == newest_migration():
        return
    from alembic import command

    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Workers starting together would each create the tables (a duplicate-type error in one of
            # them): the first migrates, the others wait for its commit and find the schema at head.
            connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('lookup-knowledge schema'))"))
        command.upgrade(alembic_config(connection), revision)


def check_readable(engine: Engine) -> None:
    """
    Refuse, in one line, a database the read-only commands cannot read as it is: they never
    migrate (a read must not write), so anything but this code's head revision is refused.
    """
    revision = schema_revision(engine)
    if revision != newest_migration():
        raise TraceSchemaError(
            f"the trace database {_shown(engine)} is at revision {revision or 'none (no trace table)'}, this "
            f"lookup-knowledge reads {newest_migration()}: reading never migrates; a lookup or `knowledge traces "
            "replay` migrates it"
        )


def schema_revision(engine: Engine) -> str | None:
    """
    The revision recorded in the database (None before the first migration), read with plain SQL:
    the start-up check runs it on every process start, where Alembic's import would cost more.

    :raises TraceSchemaError: A revision newer than this code's, or a damaged version table (none
        beside the trace table, or other than one row), named with what to do.
    """
    with engine.connect() as connection:
        inspector = inspect(connection)
        has_trace_table = inspector.has_table(TABLE_NAME)
        if not inspector.has_table(VERSION_TABLE):
            revisions = None
        else:
            revisions = [row[0] for row in connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]
    if not revisions:
        if has_trace_table:
            what = f"its {TABLE_NAME} table has " + ("an empty" if revisions == [] else "no")
            raise _damaged(engine, f"{what} {VERSION_TABLE} table beside it")
        return None
    if len(revisions) > 1:
        raise _damaged(engine, f"{VERSION_TABLE} holds {len(revisions)} revisions ({', '.join(revisions)}), not one")
    [revision] = revisions
    if revision not in migration_revisions():
        if revision > newest_migration():
            raise TraceSchemaError(
                f"the trace database {_shown(engine)} was written by a newer lookup-knowledge, revision {revision} "
                f"(this one knows up to {newest_migration()}): upgrade lookup-knowledge or use another trace "
                "database (trace.db_url)"
            )
        raise _damaged(engine, f"{VERSION_TABLE} records revision {revision}, which no lookup-knowledge has")
    return revision


def _damaged(engine: Engine, what: str) -> TraceSchemaError:
    return TraceSchemaError(
        f"the trace database {_shown(engine)} is damaged: {what}; recover by leaving one row in {VERSION_TABLE} "
        f"with the revision its tables are at (this lookup-knowledge's newest: {newest_migration()}), or move the "
        "database aside or set trace.db_url to another one (a new database is created on the next lookup)"
    )


def _shown(engine: Engine) -> str:
    return masked(engine.url.render_as_string(hide_password=False))


def migration_revisions() -> list[str]:
    """The revisions of the migrations shipped with this code, oldest first (named by their files)."""
    return sorted(path.stem for path in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"))


def newest_migration() -> str:
    """
    The head revision as the migration files name it: each file is named after its revision, and
    revisions are numbered in order (a test holds both to Alembic's own reading of the folder).
    """
    return max(migration_revisions(), default="")


def head_revision() -> str:
    """The newest revision of the migrations shipped with this code."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(None)).get_current_head()  # type: ignore[return-value]
