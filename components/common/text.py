"""
Language-agnostic text helpers shared by the L0 index, the query transformer and the reranker.

No whitespace-tokenisation assumption: Latin-script text splits into words (CamelCase too),
CJK text into overlapping character bigrams, so matching works for any language of the KB.
"""

import re
import string
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain

# C0/C1 control characters, and lone surrogates (never valid text: they reach us through JSON
# escapes such as "\\ud800", and break the tokenizer and any UTF-8 output).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_SURROGATES = re.compile(r"[\ud800-\udfff]")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Values in alert texts that carry no meaning for retrieval: addresses, ports, hashes, numbers.
_NOISE = re.compile(
    r"\b(?:\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?|[0-9a-f]{8,}|[0-9a-f]{8}-[0-9a-f-]{27,}|\d+(?:[.,]\d+)*%?)\b",
    re.IGNORECASE,
)

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "being",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "for",
        "from",
        "had",
        "has",
        "have",
        "having",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "out",
        "over",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "too",
        "up",
        "us",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "after",
        "before",
        "again",
        "all",
        "any",
        "about",
        "above",
        "below",
        "just",
        "only",
        "own",
        "same",
        "should",
        "more",
        "most",
        "other",
        "off",
        "once",
        "here",
        "each",
        "few",
        "both",
        "nor",
        "now",
        "than",
        "get",
        "got",
        "keep",
        "keeps",
        "kept",
        "still",
        "also",
    ]
)
_SUFFIXES = ("ing", "ies", "es", "ed", "ly", "s")
# Bytes that `_WORD` does not match in ASCII text (everything but letters and digits) -> space.
_ASCII_NON_WORD = bytes(b if chr(b) in string.ascii_letters + string.digits else 0x20 for b in range(256))


def clean(text: str) -> str:
    """NFKC-normalise, drop control characters (and lone surrogates) and collapse whitespace (case is kept)."""
    text = unicodedata.normalize("NFKC", text)
    text = _CONTROL.sub(" ", text)
    # `str.split()` splits on exactly the characters `\s` matches (Unicode whitespace), and
    # is several times faster than a whitespace regex substitution on long texts.
    return " ".join(text.split())


_TEMPLATE_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_TEMPLATE_LABEL = re.compile(r"\$labels\.(\w+)")


def template_actions_as_words(text: str) -> str:
    """
    An alert annotation as its rule writes it, before Prometheus fills it in: each Go template
    action becomes the names of the labels it prints ("{{ $labels.mountpoint }}" -> "mountpoint")
    or nothing ("{{ $value | humanizePercentage }}"), so template syntax is neither embedded nor
    taken for a word the knowledge base lacks.
    """

    def label_names(action: re.Match) -> str:
        return " ".join(name.replace("_", " ") for name in _TEMPLATE_LABEL.findall(action.group(1)))

    return _TEMPLATE_ACTION.sub(label_names, text)


def printable(text: str) -> str:
    """The text with lone surrogates replaced by U+FFFD, so it can be written as UTF-8 (records, output)."""
    return _SURROGATES.sub("\ufffd", text)


def identifier_words(name: str) -> str:
    """An identifier in words, case kept ("KafkaConsumerGroupLag" -> "Kafka Consumer Group Lag")."""
    return " ".join(_CAMEL.sub(" ", name.replace("_", " ")).split())


def fold(text: str) -> str:
    """The comparison form: cleaned, CamelCase split, case-folded."""
    return _CAMEL.sub(" ", clean(text)).casefold()


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x3040 <= code <= 0x30FF  # kana
        or 0x3400 <= code <= 0x4DBF
        or 0x4E00 <= code <= 0x9FFF
        or 0xAC00 <= code <= 0xD7AF  # hangul
        or 0xF900 <= code <= 0xFAFF
    )


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A deliberately light suffix stripper: enough to match 'restarts' with 'restarting'."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            if suffix == "ies":
                word += "y"
            break
    return word


def _cjk_bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str, drop_noise: bool = False) -> list[str]:
    """
    Comparable terms of a text: stemmed words without stopwords, CJK runs as character bigrams.

    With `drop_noise`, addresses, hashes and numbers (typical alert label values) are removed first.
    """
    if not drop_noise:
        words = _ascii_words(text)
        if words is not None:
            return list(chain.from_iterable(map(ascii_word_terms, words)))
    folded = fold(text)
    if drop_noise:
        folded = _NOISE.sub(" ", folded)
    result: list[str] = []
    for word in _WORD.findall(folded):
        cjk_run = ""
        latin_run = ""
        for char in word:
            if is_cjk(char):
                if latin_run:
                    result.extend(_latin_terms(latin_run))
                    latin_run = ""
                cjk_run += char
            else:
                if cjk_run:
                    result.extend(_cjk_bigrams(cjk_run))
                    cjk_run = ""
                latin_run += char
        if cjk_run:
            result.extend(_cjk_bigrams(cjk_run))
        if latin_run:
            result.extend(_latin_terms(latin_run))
    return result


def _ascii_words(text: str) -> list[str] | None:
    """
    The words `_WORD` finds in `clean(text)` when that is ASCII, else None, without the cost of
    `clean` and the regex: control characters and whitespace are non-word characters anyway.

    With these words, `terms` goes word by word and gets the same result as folding the whole
    text first (in ASCII, CamelCase boundaries lie inside words, case-folding is `lower()`, and
    no character is CJK), at a fraction of the cost. It runs on every reranked candidate.
    """
    normalized = unicodedata.normalize("NFKC", text)
    if not normalized.isascii():
        normalized = _CONTROL.sub(" ", normalized)  # C1 controls are not ASCII but become spaces
        if not normalized.isascii():
            return None
    return normalized.encode("ascii").translate(_ASCII_NON_WORD).decode("ascii").split()


@lru_cache(maxsize=65536)
def ascii_word_terms(word: str) -> tuple[str, ...]:
    """
    The terms of one ASCII word as `_WORD` finds it (several when it is CamelCase): what `terms`
    gives for the word alone, without its per-text folding.
    """
    parts = (word,) if word.islower() or word.isdigit() else _CAMEL.sub(" ", word).lower().split()
    return tuple(stem(part) for part in parts if part not in STOPWORDS and (len(part) >= 2 or part.isdigit()))


def _latin_terms(word: str) -> list[str]:
    if word in STOPWORDS or (len(word) < 2 and not word.isdigit()):
        return []
    return [stem(word)]


def contains_phrase(folded_text: str, folded_phrase: str) -> bool:
    """
    Whether a phrase occurs in a text (both already `fold`ed), respecting word boundaries for
    Latin-script edges (so "pg" does not match inside "upgrade") and none for CJK edges.
    """
    if not folded_phrase:
        return False
    start = folded_text.find(folded_phrase)
    while start != -1:
        end = start + len(folded_phrase)
        left_ok = start == 0 or not _is_word_char(folded_text[start - 1]) or is_cjk(folded_phrase[0])
        right_ok = end == len(folded_text) or not _is_word_char(folded_text[end]) or is_cjk(folded_phrase[-1])
        if left_ok and right_ok:
            return True
        start = folded_text.find(folded_phrase, start + 1)
    return False


def _is_word_char(char: str) -> bool:
    return char.isalnum() and not is_cjk(char)


def unique(items: Iterable[str]) -> list[str]:
    """Order-preserving de-duplication."""
    return list(dict.fromkeys(items))
