"""The `tool_invocation` table and its Alembic migrations, on a real SQLite file and a real PostgreSQL."""

import subprocess
import sys
import threading

from components.tracing.trace_database import make_engine
from components.tracing.trace_schema import (
    VERSION_TABLE,
    head_revision,
    metadata,
    newest_migration,
    schema_revision,
    upgrade_schema,
)
from tests.helpers import REPO

# How long a worker of the concurrent-migration test may wait on the database (each statement,
# the advisory lock included) and how long the test waits for the workers: far longer than a
# migration takes, so reaching it means a worker is stuck, and the test fails instead of hanging.
GIVE_UP_S = 30.0


def test_table_definition_matches_the_migrations(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(f"sqlite:///{tmp_path}/t.db")
    upgrade_schema(engine)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        diff = [d for d in compare_metadata(context, metadata) if VERSION_TABLE not in str(d)]
    assert diff == []


def test_processes_migrating_one_fresh_postgres_schema_at_once_all_reach_head(pg_schema_url):
    """Serving workers start together: each migrates the fresh schema, none fails on the other's tables."""
    # Engines as the trace store makes them: a statement waiting longer than GIVE_UP_S is cancelled.
    engines = [make_engine(pg_schema_url, connect_timeout=GIVE_UP_S) for _ in range(4)]
    start, failures = threading.Barrier(len(engines)), []

    def migrate(engine) -> None:
        try:
            start.wait(timeout=GIVE_UP_S)
            upgrade_schema(engine)
        except Exception as exc:  # what a worker would have spooled its records for
            failures.append(exc)

    threads = [threading.Thread(target=migrate, args=(engine,), daemon=True) for engine in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=GIVE_UP_S * 2)
    stuck = sum(thread.is_alive() for thread in threads)
    assert not stuck, f"{stuck} worker(s) neither migrated nor failed within {GIVE_UP_S * 2:g} s"
    assert failures == []
    assert schema_revision(engines[0]) == head_revision()
    for engine in engines:
        engine.dispose()


def test_the_newest_migration_file_names_alembics_head():
    """The quick check at start reads the head off the file names; Alembic reads the revisions."""
    assert newest_migration() == head_revision()


def test_a_database_at_head_is_checked_without_alembic(tmp_path):
    """A one-shot lookup pays neither Alembic's import nor its script scan once the schema is there."""
    db_url = f"sqlite:///{tmp_path}/t.db"
    upgrade_schema(make_engine(db_url))
    check = (
        "import sys; from components.tracing.trace_database import make_engine;"
        "from components.tracing.trace_schema import upgrade_schema;"
        f"upgrade_schema(make_engine({db_url!r})); print(sorted(m for m in sys.modules if m.startswith('alembic')))"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"


def test_a_database_behind_head_is_still_migrated(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/t.db")
    upgrade_schema(engine, "0001_tool_invocation")
    assert schema_revision(engine) == "0001_tool_invocation"
    upgrade_schema(engine)
    assert schema_revision(engine) == head_revision()
