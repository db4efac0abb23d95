"""Word rules of L0 matching: inflections, compounds, joined CamelCase words, identifier names, alert names."""

import pytest

from components.common.l0_words import (
    ALERT_NAME,
    QUERY_TOKEN,
    SURFACE_WORD,
    derived_forms,
    is_compound_word,
    is_identifier_name,
    joined_words,
    word_forms,
)


@pytest.mark.parametrize(
    ("word", "forms"),
    [
        ("lags", ["lags", "lag"]),
        ("expires", ["expires", "expire", "expir"]),
        ("scraped", ["scraped", "scrap", "scrape"]),
        ("gas", ["gas"]),  # too short to be an inflection
    ],
)
def test_word_forms_are_the_word_and_its_possible_bases(word, forms):
    assert word_forms(word) == forms


@pytest.mark.parametrize(
    ("word", "base"),
    [("relist", "list"), ("rescheduled", "schedule"), ("unassigned", "assign"), ("overcommits", "commit")],
)
def test_a_prefixed_word_derives_from_the_word_after_its_prefix(word, base):
    assert derived_forms(word)[0] == word and base in derived_forms(word)


@pytest.mark.parametrize("word", ["redis", "redo", "undo", "mysql"])
def test_too_little_after_a_prefix_is_no_derived_word(word):
    assert derived_forms(word) == word_forms(word)


def test_word_forms_start_with_the_word_and_have_no_duplicates():
    for word in ["restarting", "scrapeable", "reloaded", "disk"]:
        forms = word_forms(word)
        assert forms[0] == word and len(forms) == len(set(forms))
    assert "restart" in word_forms("restarting") and "reload" in word_forms("reloaded")


@pytest.mark.parametrize(("word", "compound"), [("MySQL", True), ("RabbitMQ", True), ("HAProxy", True)])
def test_short_part_camel_case_words_are_compounds(word, compound):
    assert is_compound_word(word) is compound


@pytest.mark.parametrize("word", ["DiskOutOfSpace", "ReplicaSet", "IoT", "disk"])
def test_long_part_or_short_words_are_no_compounds(word):
    assert is_compound_word(word) is False


def test_joined_words_are_the_camel_case_words_lowercased_whole():
    text = "ReplicaSets of MySQL and plain words, KubeQuotaAlmostFull"
    assert joined_words(text) == {"replicaset", "mysql", "kubequotaalmostfull"}
    assert joined_words("only plain words here") == set()


@pytest.mark.parametrize(
    ("text", "is_name"),
    [
        ("KubeQuotaAlmostFull", True),
        ("disk_full", True),
        ("Disk Full", False),
        ("Kube", False),
        ("kubernetes", False),
    ],
)
def test_identifier_names_have_two_parts_or_more(text, is_name):
    assert is_identifier_name(text) is is_name


def test_alert_names_are_found_in_titles_and_alertname_labels():
    text = '[FIRING:2] KubeQuotaAlmostFull (ns) alertname="NodeDown" alertname: Foo'
    names = [title or label for title, label in (m.groups() for m in ALERT_NAME.finditer(text))]
    assert names == ["KubeQuotaAlmostFull", "NodeDown", "Foo"]


def test_surface_words_leave_out_label_values_resource_names_and_contractions():
    text = "redis is down on billing/invoice-api and redis-cache-0 cluster=logs-es ens5 doesn't work. Now: restart"
    assert SURFACE_WORD.findall(text) == ["redis", "down", "and", "work", "Now", "restart"]


def test_query_tokens_keep_underscores():
    assert QUERY_TOKEN.findall("Kube_Quota-x 12") == ["Kube_Quota", "x", "12"]
