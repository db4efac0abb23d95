"""
Alembic environment of the `tool_invocation` schema, run in code by `components.tracing.trace_schema`
(`upgrade_schema`): the caller passes an open connection in `config.attributes["connection"]`.

To add a revision (from the repository root):

    python -c "from components.tracing.trace_schema import alembic_config; from alembic import command; \
command.revision(alembic_config(None), message='what changes')"

then write its `upgrade()`/`downgrade()` and update the table in `components/tracing/trace_schema.py`.
"""

from alembic import context

config = context.config
connection = config.attributes.get("connection")
version_table = config.attributes.get("version_table", "lookup_knowledge_schema_version")

if connection is None:
    raise RuntimeError(
        "the tool_invocation migrations run through components.tracing.trace_schema.upgrade_schema(engine), "
        "which passes the connection; there is no alembic.ini"
    )

context.configure(connection=connection, version_table=version_table, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
