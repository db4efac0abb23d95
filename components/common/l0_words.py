"""
Word rules of L0 matching: document names written as identifiers, alert names quoted by
notifications, standalone topic words, inflections and CamelCase compounds (see docs/l0.md).
"""

import re

from components.common.text import fold, terms, unique

# A document's name: its file stem or one-word first heading, when written as an identifier of at
# least two CamelCase or snake_case parts, the way alert names are ("KubeQuotaAlmostFull").
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]{4,}")
NAME_PARTS = re.compile(r"[a-z0-9][A-Z]|[A-Z][A-Z][a-z]|[A-Za-z0-9]_[A-Za-z0-9]")
QUERY_TOKEN = re.compile(r"[A-Za-z0-9_]+")
# Where an Alertmanager notification names its alert: the default title ("[FIRING:2] AlertName ...")
# and the alertname label ("alertname=AlertName", "alertname: AlertName").
ALERT_NAME = re.compile(
    r"\[(?:FIRING|RESOLVED)(?::\d+)?\]\s*([A-Za-z_]\w*)|\balertname\s*[=:]\s*[\"']?([A-Za-z_]\w*)",
    re.IGNORECASE,
)
# A Latin-script word of three letters or more standing alone: not part of a label value or
# resource name ("billing/invoice-api", "redis-cache-0", "cluster=logs-es"), an address, a
# versioned name ("ens5") or a contraction ("doesn't"); a full stop or colon may end it.
SURFACE_WORD = re.compile(r"(?<![\w'/.:=@-])[A-Za-z]{3,}(?![\w'/=@-]|[.:][\w/])")


# Suffix -> endings of the base word it may come from ("restarting" -> "restart", "reloaded" -> "reload",
# "scrapeable" -> "scrape").
INFLECTIONS = (("s", ("",)), ("es", ("",)), ("ed", ("", "e")), ("ing", ("", "e")), ("able", ("", "e")))


def word_forms(word: str) -> list[str]:
    """
    The word and the base words it may be an inflection of ("lags" -> "lag"), each also without a
    final "e": the terms of "expires" and "scraped" are "expir" and "scrap", as of "expir(e)".
    """
    forms = [word]
    if len(word) >= 4:
        for suffix, bases in INFLECTIONS:
            if word.endswith(suffix):
                stem = word[: -len(suffix)]
                forms.extend(stem + base for base in bases)
    return unique(forms + [form[:-1] for form in forms if len(form) >= 4 and form.endswith("e")])


# English prefixes that make a word of a word ("relist", "rescheduled", "unreachable"), and the
# least of the word that must remain: "redis" and "redo" are no "re-" words.
PREFIXES = ("re", "un", "pre", "non", "mis", "over", "under")
PREFIXED_MIN_REST = 4


def derived_forms(word: str) -> list[str]:
    """
    `word_forms` of the word and of the word a common English prefix was put before ("relist" ->
    "list", "rescheduled" -> "scheduled", "schedule"): such a word is no name of its own.
    """
    rests = [word[len(p) :] for p in PREFIXES if word.startswith(p) and len(word) - len(p) >= PREFIXED_MIN_REST]
    return unique([form for base in [word, *rests] for form in word_forms(base)])


# A word written in CamelCase ("ReplicaSet", "MySQL", "KubeQuotaAlmostFull").
MIXED_CASE_WORD = re.compile(r"\b[A-Za-z]*(?:[a-z][A-Z]|[A-Z]{2}[a-z])[A-Za-z]*\b")
COMPOUND_MIN_CHARS = 5


def is_compound_word(word: str) -> bool:
    """
    Whether a word is compared whole only: five letters or more, of two CamelCase parts, one of
    them under three letters ("MySQL", "RabbitMQ", "HAProxy"). Its parts say nothing ("my" +
    "sql"); longer identifiers ("DiskOutOfSpace") are compared by their parts when not known whole.
    """
    if len(word) < COMPOUND_MIN_CHARS:
        return False
    parts = fold(word).split()
    return len(parts) == 2 and min(len(part) for part in parts) < 3


def joined_words(text: str) -> set[str]:
    """
    The terms of the text's CamelCase words written joined and lowercased ("ReplicaSets" ->
    "replicaset", "MySQL" -> "mysql"): a query may write them so, while the text's own terms
    hold only their parts ("replica", "set").
    """
    return {term for word in MIXED_CASE_WORD.findall(text) for term in terms(word.casefold())}


def is_identifier_name(text: str) -> bool:
    """Whether a text is written as an identifier of two or more parts (see `IDENTIFIER`)."""
    return bool(IDENTIFIER.fullmatch(text) and NAME_PARTS.search(text))
