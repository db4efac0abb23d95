import functools
import logging
from typing import Any

from haystack import component

from components.common.choices import check_at_least, check_flags, check_named_or_none, check_unit_interval
from components.common.embedding_models import DEFAULT_MODEL, load_tokenizer
from components.common.text import ascii_word_terms
from components.contracts import L0Hints
from components.lookup.l0_matching import match, uncovered_terms
from components.stores.l0_index import L0Index

logger = logging.getLogger(__name__)


@component
class L0HintExtractor:
    """
    Matches the query against the L0 index and returns hint data only: documents it names,
    matched titles, keywords, domains (categories) and entities (aliases map to their entity), and
    the words it uses that the knowledge base never does (`uncovered_terms`: no document uses them
    and, with `tokenizer_model` set, they are no whole word of that model's vocabulary either; an
    alert name that a notification quotes counts too when no document has it and it shares fewer
    than half its words with the titles: "[FIRING:1] KafkaConsumerGroupLag").

    Hints steer retrieval (an unambiguous domain becomes a category filter), boost reranking and
    explain results; they are never evidence. Matching needs no whitespace tokenisation, so CJK
    knowledge bases work as well as Latin-script ones.

    Usage example:

    ```python
    >>> from components.contracts import EntityRef
    >>> from components.stores.l0_index import L0Entry, L0Index
    >>> pg = EntityRef("PostgreSQL", aliases=["postgres"])
    >>> index = L0Index([L0Entry("database/replica-lag.md", "Replica Lag", "database", entities=[pg])])
    >>> extractor = L0HintExtractor()
    >>> hints = extractor.run(query="postgres replica is lagging", l0_index=index)["hints"]
    >>> hints.entities, hints.single_domain
    (['PostgreSQL'], 'database')

    ```
    """

    def __init__(
        self,
        title_min_overlap: float = 0.6,
        domain_from_matches: bool = True,
        domain_min_precision: float = 0.5,
        tokenizer_model: str | None = DEFAULT_MODEL,
        subject_elsewhere_margin: float = 0.15,
        passing_mention_df: int = 1,
    ) -> None:
        """
        :param title_min_overlap: IDF-weighted share of a title's words that must occur in the query.
        :param domain_from_matches: Also take domains from the categories of matched entries.
        :param domain_min_precision: A category named in the query is a domain only when at least this
            share of the documents naming it belong to it.
        :param tokenizer_model: The embedding model, whose vocabulary tells common words from names
            (`uncovered_terms`); None leaves `uncovered_terms` empty.
        :param subject_elsewhere_margin: A category named in the query is no domain when a document of
            another category names it and covers the query's other words better by this much
            (`named_as_subject_elsewhere` in `hints.domain_rules`); 1 turns the rule off.
        :param passing_mention_df: A word that at most this many documents use, and no title,
            keyword or entity, is uncovered too (mentioned in passing); 0 turns the rule off.
        """
        check_named_or_none(tokenizer_model=tokenizer_model)
        check_flags(domain_from_matches=domain_from_matches)
        check_unit_interval(
            title_min_overlap=title_min_overlap,
            domain_min_precision=domain_min_precision,
            subject_elsewhere_margin=subject_elsewhere_margin,
        )
        check_at_least(0, passing_mention_df=passing_mention_df)
        self.title_min_overlap = title_min_overlap
        self.domain_from_matches = domain_from_matches
        self.domain_min_precision = domain_min_precision
        self.tokenizer_model = tokenizer_model
        self.subject_elsewhere_margin = subject_elsewhere_margin
        self.passing_mention_df = passing_mention_df
        self._common_words: frozenset[str] | None = None

    def warm_up(self) -> None:
        if self._common_words is None and self.tokenizer_model:
            self._common_words = common_words(self.tokenizer_model)

    @component.output_types(hints=L0Hints)
    def run(self, query: str, l0_index: L0Index) -> dict[str, Any]:
        """
        :param query: The normalised query.
        :param l0_index: The L0 index the lookup read (`QueryTransformer`'s `l0_index`).
        :returns: `hints`, an `L0Hints`.
        """
        hints = match(
            l0_index,
            query,
            self.title_min_overlap,
            self.domain_from_matches,
            self.domain_min_precision,
            self.subject_elsewhere_margin,
        )
        if self.tokenizer_model:
            self.warm_up()
            hints.uncovered_terms = uncovered_terms(
                l0_index, query, self._common_words or frozenset(), self.passing_mention_df
            )
        logger.debug("L0 hints for %r: %s", query, hints)
        return {"hints": hints}


@functools.lru_cache(maxsize=4)
def common_words(tokenizer_model: str) -> frozenset[str]:
    """
    Whole alphabetic words of a model's vocabulary (no word pieces), lowercased, with their terms
    (stems), so that an inflected form of a common word counts as common too ("lags": "lag").
    Cached per model like the tokenizer: the set is immutable, and every pipeline built in a
    process (one per `knowledge eval` system, per test) would otherwise stem the vocabulary again.
    """
    vocabulary = load_tokenizer(tokenizer_model).get_vocab()
    words = {token.lower() for token in vocabulary if token.isascii() and token.isalpha()}
    # One lowercase ASCII word each: `terms`' per-text folding would change nothing and, over
    # ~20,000 words, cost every process start a tenth of a second or more.
    return frozenset(words.union(*map(ascii_word_terms, words)))
