"""
Language-agnostic text helpers shared by the L0 index, the query transformer and the reranker.

No whitespace-tokenisation assumption: Latin-script text splits into words (CamelCase too),
CJK text into overlapping character bigrams, so matching works for any language of the KB.
"""

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SPACES = re.compile(r"\s+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Values in alert texts that carry no meaning for retrieval: addresses, ports, hashes, numbers.
_NOISE = re.compile(
    r"\b(?:\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?|[0-9a-f]{8,}|[0-9a-f]{8}-[0-9a-f-]{27,}|\d+(?:[.,]\d+)*%?)\b",
    re.IGNORECASE,
)

STOPWORDS = frozenset(
    """a an and are as at be been being but by can could did do does doing for from had has have having how
    i if in into is it its me my no not of on or our out over so some such than that the their them then
    there these they this those to too up us very was we were what when where which while who why will
    with would you your after before again all any about above below just only own same should more most
    other off once here each few both nor now than get got keep keeps kept still also""".split()
)
_SUFFIXES = ("ing", "ies", "es", "ed", "ly", "s")
# What `_WORD` matches in ASCII text.
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")


def clean(text: str) -> str:
    """NFKC-normalise, drop control characters and collapse whitespace (case is kept)."""
    text = unicodedata.normalize("NFKC", text)
    text = _CONTROL.sub(" ", text)
    # `str.split()` splits on exactly the characters `\s` matches (Unicode whitespace), and
    # is several times faster than `_SPACES.sub(" ", text).strip()` on long texts.
    return " ".join(text.split())


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
        cleaned = clean(text)
        if cleaned.isascii():
            return _ascii_terms(cleaned)
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


def _ascii_terms(cleaned: str) -> list[str]:
    """
    `terms` of an already cleaned ASCII text, word by word: the same result as folding the whole
    text first (in ASCII, CamelCase boundaries lie inside words, case-folding is `lower()`, and
    no character is CJK), at a fraction of the cost. It runs on every reranked candidate.
    """
    result: list[str] = []
    for word in _ASCII_WORD.findall(cleaned):
        if word.islower() or word.isdigit():
            parts = (word,)
        else:
            parts = _CAMEL.sub(" ", word).lower().split()
        for part in parts:
            if part not in STOPWORDS and (len(part) >= 2 or part.isdigit()):
                result.append(stem(part))
    return result


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
