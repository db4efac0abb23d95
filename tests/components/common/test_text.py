"""Text helpers: cleaning, folding, terms in Latin and CJK script, phrase matching."""

import pytest

from components.common.text import (
    STOPWORDS,
    clean,
    contains_phrase,
    fold,
    identifier_words,
    is_cjk,
    printable,
    stem,
    template_actions_as_words,
    terms,
    unique,
)


def test_clean_drops_control_characters_and_surrogates_and_collapses_whitespace():
    assert clean(" a\x00b\t\n  c\ud800 ") == "a b c"
    assert clean("ＡＢＣ １２") == "ABC 12"  # NFKC: full-width forms become ASCII


def test_printable_replaces_lone_surrogates_only():
    assert printable("x\ud800y") == "x\ufffdy"
    assert printable("磁盘 ok") == "磁盘 ok"
    printable("\udfff").encode("utf-8")  # no UnicodeEncodeError


def test_identifier_words_split_camel_and_snake_case_keeping_case():
    assert identifier_words("KafkaConsumerGroupLag") == "Kafka Consumer Group Lag"
    assert identifier_words("disk_full_HTTPServer") == "disk full HTTP Server"


def test_fold_is_the_comparison_form():
    assert fold("KubePodCrashLooping  ＡＢＣ") == "kube pod crash looping abc"


def test_is_cjk_covers_han_kana_and_hangul_but_not_latin():
    assert all(is_cjk(char) for char in "磁カ한")
    assert not any(is_cjk(char) for char in "aé1-")


@pytest.mark.parametrize(
    ("word", "expected"),
    [("restarts", "restart"), ("restarting", "restart"), ("policies", "policy"), ("runs", "runs"), ("is", "is")],
)
def test_stem_strips_one_suffix_from_words_long_enough(word, expected):
    assert stem(word) == expected


def test_terms_drop_stopwords_and_single_letters_but_keep_numbers():
    assert terms("The pods keep Restarting") == ["pods", "restart"]
    assert terms("a I x 7") == ["7"]
    assert not STOPWORDS & set(terms("what is the disk doing when it is full"))


def test_terms_drop_noise_removes_addresses_hashes_and_numbers():
    text = "Restarting node 10.0.0.1:9100 at 95% after deadbeef42 failed 3 times"
    assert terms(text, drop_noise=True) == ["restart", "node", "fail", "time"]
    assert "10" in terms(text)


def test_terms_split_cjk_runs_into_bigrams_and_keep_latin_words():
    assert terms("磁盘空间满了") == ["磁盘", "盘空", "空间", "间满", "满了"]
    assert terms("磁") == ["磁"]
    assert terms("KafkaLag 磁盘") == ["kafka", "lag", "磁盘"]
    assert terms("café résumé") == ["café", "résumé"]


def test_the_ascii_fast_path_gives_the_terms_of_the_general_path():
    ascii_text = "KubeQuotaAlmostFull: the HTTPServer keeps restarting, see runbook_v2 (node-7)"
    # A one-letter non-ASCII word adds no term but sends the text down the general path.
    assert terms(ascii_text) == terms(ascii_text + " é")


def test_contains_phrase_respects_latin_word_boundaries_only():
    assert contains_phrase("upgrade the pg cluster", "pg")
    assert not contains_phrase("upgrade", "pg")
    assert contains_phrase("磁盘空间", "磁盘")  # CJK has no word boundaries
    assert contains_phrase("pg pgbouncer", "pg")
    assert not contains_phrase("anything", "")


def test_unique_keeps_the_first_occurrence_in_order():
    assert unique(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]


def test_template_actions_become_the_labels_they_print():
    text = "{{ $value | humanizePercentage }} of {{ $labels.job }}/{{$labels.service}} targets are down"
    assert template_actions_as_words(text) == " of job/service targets are down"
    assert template_actions_as_words('{{ $labels.max_pods }} pods, {{ printf "%.0f" $value }}') == "max pods pods, "
    assert template_actions_as_words("no template {here}") == "no template {here}"
