"""The one masking of URL passwords: in free text, and in log records before any handler writes them."""

import logging

import pytest

from components.common.masking import MaskingFilter, masked


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://user:s3cret@127.0.0.1:19530", "http://user:***@127.0.0.1:19530"),
        (
            "at postgresql+psycopg://ops:p@ss@db/test?x=1: refused",
            "at postgresql+psycopg://ops:***@db/test?x=1: refused",
        ),
        ("(uri='https://:tok@h:1', user='a@b')", "(uri='https://:***@h:1', user='a@b')"),
        ("a http://u:one@h1 and http://v:two@h2", "a http://u:***@h1 and http://v:***@h2"),
        ("http://host:19530 and user@example.org", "http://host:19530 and user@example.org"),
        ("sqlite:///tmp/traces.db", "sqlite:///tmp/traces.db"),
    ],
)
def test_the_password_of_every_url_in_a_text_is_masked(text, expected):
    assert masked(text) == expected


def test_a_log_record_is_masked_in_its_arguments_and_its_traceback():
    try:
        raise ConnectionError("cannot open http://u:tb-secret@h:1")
    except ConnectionError as exc:
        record = logging.LogRecord(
            "x",
            logging.ERROR,
            __file__,
            1,
            "failed at %s",
            ("http://u:arg-secret@h:1",),
            (type(exc), exc, exc.__traceback__),
        )
    assert MaskingFilter().filter(record)
    written = logging.Formatter().format(record)
    assert "secret" not in written
    assert "failed at http://u:***@h:1" in written and "cannot open http://u:***@h:1" in written
