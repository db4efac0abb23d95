"""
The L0 index: titles, keywords, categories and entities (with aliases) of every document, and the
term tables built from them on load. The lookup matches a query against them in
`components.lookup.l0_matching` (hints only, never evidence); persistence is in
`components.stores.l0_index_file`, the word rules in `components.common.l0_words`.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from components.common.l0_words import (
    is_identifier_name,
)
from components.common.text import fold, terms, unique
from components.contracts import EntityRef


def document_names(entry: "L0Entry") -> list[str]:
    """The identifier forms of a document's name (see `IDENTIFIER`), casefolded."""
    forms = [PurePosixPath(entry.source).stem, *entry.headings[:1]]
    return unique(f.strip().casefold() for f in forms if is_identifier_name(f.strip()))


@dataclass
class L0Entry:
    """What L0 knows of one document."""

    source: str
    title: str
    category: str
    keywords: list[str] = field(default_factory=list)
    entities: list[EntityRef] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)
    doc_hash: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> "L0Entry":
        entities = [EntityRef(**e) for e in data.get("entities", [])]
        return cls(**{**data, "entities": entities})


@dataclass
class EntryTerms:
    """Precomputed comparison forms of one entry."""

    title_terms: set[str]
    document_terms: frozenset[str]
    title_weight: float = 0.0
    # Terms of the entry's category name that its title contains ("alertmanager").
    category_terms: frozenset[str] = frozenset()


class L0Index:
    """
    The L0 entries and the term tables the lookup matches a query against
    (`components.lookup.l0_matching`). Never changed once built: one lookup
    passes one index from component to component, and Haystack's copy of a component input is the
    index itself (a deep copy would cost as much as a load).
    """

    def __init__(
        self,
        entries: list[L0Entry],
        summary_vectors: np.ndarray | None = None,
        model: str = "",
        term_df: dict[str, int] | None = None,
        domain_precision: dict[str, float] | None = None,
        joined_words: set[str] | list[str] | None = None,
        path: str | Path | None = None,
    ) -> None:
        """
        :param entries: One entry per document.
        :param summary_vectors: Embeddings of each document's title and opening section, one row per
            entry (for the reranker's document-similarity signal).
        :param model: The embedding model of the summary vectors.
        :param term_df: Document frequency of each term over the knowledge base (for IDF weights).
        :param domain_precision: Per category, the share of the documents naming it that belong to it.
            A category named in a query is a domain hint only when this is high enough: a name that
            every document uses ("prometheus" in a Prometheus runbook collection) says nothing.
        :param joined_words: The knowledge base's CamelCase words, joined (see `joined_words`);
            None (an index written before they were kept) compares every word by its parts.
        :param path: The file it was read from, named in errors (None: built in memory).
        """
        self.entries = entries
        self.model = model
        self.summary_vectors = summary_vectors
        self.term_df = dict(term_df or {})
        self.domain_precision = dict(domain_precision or {})
        self.joined_words = None if joined_words is None else frozenset(joined_words)
        self.path = None if path is None else Path(path)
        self._row_of_source = {entry.source: row for row, entry in enumerate(entries)}
        self._prepare()

    def __copy__(self) -> "L0Index":
        return self

    def __deepcopy__(self, memo: dict) -> "L0Index":
        return self

    def _prepare(self) -> None:
        self.entry_terms: list[EntryTerms] = []
        # term -> rows whose document terms contain it: only those can cover a query term.
        self.term_rows: dict[str, list[int]] = {}
        # term -> rows whose title terms contain it: a title can only match a query sharing a term.
        self.title_rows: dict[str, list[int]] = {}
        # Title term weights are fixed once the index is loaded; matching sums them per query.
        self.title_weights: dict[str, float] = {}
        self.keyword_rows: dict[str, tuple[str, set[str], list[int]]] = {}
        self.alias_rows: dict[str, tuple[str, list[int]]] = {}
        self.category_names: dict[str, str] = {}
        self.name_rows: dict[str, list[int]] = {}
        for row, entry in enumerate(self.entries):
            for name in document_names(entry):
                self.name_rows.setdefault(name, []).append(row)
            self.entry_terms.append(self._prepare_terms(row, entry))
            self._prepare_tags(row, entry)
            if entry.category.strip():
                self.category_names.setdefault(fold(entry.category), entry.category)
        # Terms a document is named or tagged by: never a mention in passing.
        self.named_terms = set(self.title_rows).union(
            *(terms(keyword) for keyword, _, _ in self.keyword_rows.values()),
            *(terms(surface) for surface in self.alias_rows),
        )

    def _prepare_terms(self, row: int, entry: L0Entry) -> EntryTerms:
        """The entry's title and document terms, filed under each term for the row lookups."""
        title_terms = set()
        for form in unique([entry.title] + entry.headings[:1]):
            title_terms.update(terms(form))
        for term in title_terms:
            self.title_rows.setdefault(term, []).append(row)
            if term not in self.title_weights:
                self.title_weights[term] = self._title_weight(term)
        document_terms = frozenset(entry.terms) | title_terms
        for term in document_terms:
            self.term_rows.setdefault(term, []).append(row)
        return EntryTerms(
            title_terms=title_terms,
            document_terms=document_terms,
            title_weight=sum(self.title_weights[t] for t in title_terms),
            category_terms=frozenset(terms(entry.category)) & title_terms,
        )

    def _prepare_tags(self, row: int, entry: L0Entry) -> None:
        """The entry's keywords and entity names and aliases, folded, each with the rows that carry it."""
        for keyword in entry.keywords:
            folded = fold(keyword)
            if folded:
                _, _, rows = self.keyword_rows.setdefault(folded, (keyword, set(terms(keyword)), []))
                rows.append(row)
        for entity in entry.entities:
            for surface in [entity.name, *entity.aliases]:
                folded = fold(surface)
                if folded:
                    _, rows = self.alias_rows.setdefault(folded, (entity.name, []))
                    rows.append(row)

    @property
    def vocabulary(self) -> frozenset[str]:
        """Every term the knowledge base uses: its documents' words, titles, keywords and entity names."""
        return frozenset(self.term_df) | frozenset(self.term_rows) | frozenset(self.named_terms)

    @property
    def categories(self) -> list[str]:
        return sorted(self.category_names.values())

    def idf(self, term: str) -> float:
        """BM25-style inverse document frequency; 0 for a term the knowledge base never uses."""
        df = self.term_df.get(term, 0)
        if df == 0:
            return 0.0
        total = max(len(self.entries), df)
        return math.log(1.0 + (total - df + 0.5) / (df + 0.5))

    def _title_weight(self, term: str) -> float:
        # Terms the KB never uses outside titles still count, as rare ones.
        return self.idf(term) or math.log(1.0 + len(self.entries))

    def entry(self, source: str) -> L0Entry | None:
        row = self._row_of_source.get(source)
        return None if row is None else self.entries[row]

    def title_overlap(self, source: str, query_terms: set[str]) -> float:
        """IDF-weighted share of the document title's terms that occur in the query."""
        row = self._row_of_source.get(source)
        if row is None:
            return 0.0
        entry_terms = self.entry_terms[row]
        total = entry_terms.title_weight
        return sum(self.title_weights[t] for t in entry_terms.title_terms & query_terms) / total if total else 0.0

    def document_terms(self, source: str) -> frozenset[str]:
        row = self._row_of_source.get(source)
        return frozenset() if row is None else self.entry_terms[row].document_terms

    def summary_vector(self, source: str) -> np.ndarray | None:
        row = self._row_of_source.get(source)
        if row is None or self.summary_vectors is None:
            return None
        return self.summary_vectors[row]
