"""The trace database's URLs."""

from components.tracing.trace_database import target_key


def test_target_key_drops_credentials():
    assert target_key("postgresql://user:secret@db:5432/traces") == "postgresql+psycopg://db:5432/traces"
