"""
The L0 index: titles, keywords, categories and entities (with aliases) of every document, and
the matching of a query against them. It only ever produces hints (`L0Hints`), never evidence.
Persistence is in `components.stores.l0_index_file`; the word rules in `components.common.l0_words`.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from components.common.l0_words import (
    ALERT_NAME,
    QUERY_TOKEN,
    SURFACE_WORD,
    derived_forms,
    is_compound_word,
    is_identifier_name,
)
from components.common.text import contains_phrase, fold, identifier_words, terms, unique
from components.contracts import EntityRef, L0Hints

NAMED_AS_SUBJECT_ELSEWHERE = "named_as_subject_elsewhere"


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
class _EntryTerms:
    """Precomputed comparison forms of one entry."""

    title_terms: set[str]
    document_terms: frozenset[str]
    title_weight: float = 0.0
    # Terms of the entry's category name that its title contains ("alertmanager").
    category_terms: frozenset[str] = frozenset()


class L0Index:
    """
    Matching of a query against the L0 entries; see `match`. Never changed once built: one lookup
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
        self._entry_terms: list[_EntryTerms] = []
        # term -> rows whose document terms contain it: only those can cover a query term.
        self._term_rows: dict[str, list[int]] = {}
        # term -> rows whose title terms contain it: a title can only match a query sharing a term.
        self._title_rows: dict[str, list[int]] = {}
        # Title term weights are fixed once the index is loaded; matching sums them per query.
        self._title_weights: dict[str, float] = {}
        self._keywords: dict[str, tuple[str, set[str], list[int]]] = {}
        self._aliases: dict[str, tuple[str, list[int]]] = {}
        self._categories: dict[str, str] = {}
        self._names: dict[str, list[int]] = {}
        for row, entry in enumerate(self.entries):
            for name in document_names(entry):
                self._names.setdefault(name, []).append(row)
            self._entry_terms.append(self._prepare_terms(row, entry))
            self._prepare_tags(row, entry)
            if entry.category.strip():
                self._categories.setdefault(fold(entry.category), entry.category)
        # Terms a document is named or tagged by: never a mention in passing.
        self._named_terms = set(self._title_rows).union(
            *(terms(keyword) for keyword, _, _ in self._keywords.values()),
            *(terms(surface) for surface in self._aliases),
        )

    def _prepare_terms(self, row: int, entry: L0Entry) -> _EntryTerms:
        """The entry's title and document terms, filed under each term for the row lookups."""
        title_terms = set()
        for form in unique([entry.title] + entry.headings[:1]):
            title_terms.update(terms(form))
        for term in title_terms:
            self._title_rows.setdefault(term, []).append(row)
            if term not in self._title_weights:
                self._title_weights[term] = self._title_weight(term)
        document_terms = frozenset(entry.terms) | title_terms
        for term in document_terms:
            self._term_rows.setdefault(term, []).append(row)
        return _EntryTerms(
            title_terms=title_terms,
            document_terms=document_terms,
            title_weight=sum(self._title_weights[t] for t in title_terms),
            category_terms=frozenset(terms(entry.category)) & title_terms,
        )

    def _prepare_tags(self, row: int, entry: L0Entry) -> None:
        """The entry's keywords and entity names and aliases, folded, each with the rows that carry it."""
        for keyword in entry.keywords:
            folded = fold(keyword)
            if folded:
                _, _, rows = self._keywords.setdefault(folded, (keyword, set(terms(keyword)), []))
                rows.append(row)
        for entity in entry.entities:
            for surface in [entity.name, *entity.aliases]:
                folded = fold(surface)
                if folded:
                    _, rows = self._aliases.setdefault(folded, (entity.name, []))
                    rows.append(row)

    @property
    def vocabulary(self) -> frozenset[str]:
        """Every term the knowledge base uses: its documents' words, titles, keywords and entity names."""
        return frozenset(self.term_df) | frozenset(self._term_rows) | frozenset(self._named_terms)

    @property
    def categories(self) -> list[str]:
        return sorted(self._categories.values())

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
        entry_terms = self._entry_terms[row]
        total = entry_terms.title_weight
        return sum(self._title_weights[t] for t in entry_terms.title_terms & query_terms) / total if total else 0.0

    def document_terms(self, source: str) -> frozenset[str]:
        row = self._row_of_source.get(source)
        return frozenset() if row is None else self._entry_terms[row].document_terms

    def summary_vector(self, source: str) -> np.ndarray | None:
        row = self._row_of_source.get(source)
        if row is None or self.summary_vectors is None:
            return None
        return self.summary_vectors[row]

    def entity_expansions(self, query: str) -> list[str]:
        """Canonical entity names for aliases found in the query but not already named in it."""
        folded = fold(query)
        names = []
        for surface, (name, _) in self._aliases.items():
            if contains_phrase(folded, surface) and not contains_phrase(folded, fold(name)):
                names.append(name)
        return unique(names)

    def _named_rows(self, query: str) -> list[int]:
        return sorted({row for token in QUERY_TOKEN.findall(query) for row in self._names.get(token.casefold(), ())})

    def unknown_alert_names(self, query: str) -> list[str]:
        """
        Alert names that a notification quotes ("[FIRING:1] KafkaConsumerGroupLag ...",
        "alertname=KafkaConsumerGroupLag") and that no document is named after: the knowledge base
        has no runbook for that alert. Only identifier-shaped names count, as for document names.
        """
        quoted = (match.group(1) or match.group(2) for match in ALERT_NAME.finditer(query))
        return unique(name for name in quoted if is_identifier_name(name) and name.casefold() not in self._names)

    def uncovered_terms(
        self, query: str, common_words: frozenset[str] | set[str], passing_mention_df: int = 0
    ) -> list[str]:
        """
        Words of the query that no document uses (none of their terms occurs in the knowledge
        base) and that are no common word (neither the word, lowercased, nor one of its terms is
        in `common_words`): names of things the knowledge base does not cover ("redis"),
        lowercased, in query order; then the `unknown_alert_names`, as quoted. CamelCase parts are
        compared apart ("CassandraCompaction": "cassandra", "compaction") unless the word is known
        whole ("replicasets" of a KB writing "ReplicaSets"), and compound words only whole
        (`is_compound_word`: "MySQL" is "mysql", not "my" and "sql"). With `passing_mention_df`, a
        word that at most that many documents use, and no title, keyword or entity, is uncovered
        too: the knowledge base mentions it in passing ("kafka" in a list of stateful workloads),
        it has no runbook about it.
        """
        uncovered = []
        for word in SURFACE_WORD.findall(query):
            whole = word.casefold()
            if self.joined_words is not None:
                if self._is_known_word(whole, common_words, passing_mention_df):
                    continue
                if is_compound_word(word):
                    uncovered.append(whole)
                    continue
            for part in fold(word).split():
                if len(part) < 3:  # "db" of "MongoDBDown": too short to name anything
                    continue
                if not self._is_known_word(part, common_words, passing_mention_df):
                    uncovered.append(part)
        return unique(uncovered + [name for name in self.unknown_alert_names(query) if self._off_title_name(name)])

    def _is_known_word(self, word: str, common_words: frozenset[str] | set[str], passing_mention_df: int = 0) -> bool:
        """
        A common word, or one whose terms (of the word or a base form of it) the knowledge base uses
        (in more than `passing_mention_df` documents, or in a title, keyword or entity).
        """
        forms = derived_forms(word)
        if any(form in common_words for form in forms):
            return True
        form_terms = [t for form in forms for t in terms(form)]
        joined = self.joined_words or frozenset()
        return not form_terms or any(
            self._used_beyond_passing(t, passing_mention_df) or t in common_words or t in joined for t in form_terms
        )

    def _used_beyond_passing(self, term: str, passing_mention_df: int) -> bool:
        df = self.term_df.get(term, 0)
        return df > passing_mention_df or (df > 0 and term in self._named_terms)

    def _off_title_name(self, name: str) -> bool:
        # A team's own name for a covered alert ("NodeDiskAlmostFull") mostly reuses the words of
        # the titles; an alert of another system ("KafkaConsumerGroupLag") hardly any.
        name_terms = set(terms(name))
        return bool(name_terms) and len(name_terms & self._title_rows.keys()) < 0.5 * len(name_terms)

    def name_expansions(self, query: str) -> list[str]:
        """
        Titles of the documents whose name the query quotes ("KubeQuotaAlmostFull" -> "Kube Quota
        Almost Full"), then the words of the alert names a notification quotes that no document
        is named after ("[FIRING:1] KubeNodeNotReadyLong" -> "Kube Node Not Ready Long"): an
        identifier embeds poorly, its words far better.
        """
        # Compared without `fold`, which would split the quoted name into the title's words.
        lowered = query.casefold()
        titles = [self.entries[row].title for row in self._named_rows(query)]
        titles += [identifier_words(name) for name in self.unknown_alert_names(query)]
        return unique(t for t in titles if " " in t.strip() and t.casefold() not in lowered)

    def match(
        self,
        query: str,
        title_min_overlap: float = 0.6,
        domain_from_matches: bool = True,
        domain_min_precision: float = 0.5,
        subject_elsewhere_margin: float = 0.15,
    ) -> L0Hints:
        """
        Hints for a query: documents whose name it quotes verbatim (an alert name in a
        notification), titles whose words (IDF-weighted) mostly occur in it, keywords and entity
        names or aliases it contains, and the domains (categories) it names, when the name is
        specific to its category, or that its matches belong to.

        A title that contains its category's name matches only when the query names it too. A
        category whose name is not specific counts as a domain only beside a specific one (the
        query then spans two domains, and no single-domain filter applies). A named category is
        no domain when a document of another category names it too and fits the rest of the query
        better by `subject_elsewhere_margin` (`named_as_subject_elsewhere`: "controller alertmanager
        fails to reconcile" is about the operator that manages Alertmanager, not about Alertmanager).
        """
        folded = fold(query)
        query_terms = set(terms(query, drop_noise=True))
        named_rows = self._named_rows(query)
        keywords, keyword_rows = self._matched_keywords(folded, query_terms)
        entities, entity_rows = self._matched_entities(folded)
        title_rows = self._matched_title_rows(query_terms, title_min_overlap)
        matched_rows = sorted(set(named_rows) | keyword_rows | entity_rows | set(title_rows))
        domains, domain_rules = self._named_domains(folded, query_terms, domain_min_precision, subject_elsewhere_margin)
        if domain_from_matches:
            domains.extend(self.entries[row].category for row in matched_rows)

        return L0Hints(
            matched_titles=unique(self.entries[row].title for row in [*named_rows, *title_rows]),
            matched_keywords=unique(keywords),
            domains=unique(d for d in domains if d.strip()),
            entities=unique(entities),
            matched_sources=[self.entries[row].source for row in matched_rows],
            named_sources=[self.entries[row].source for row in named_rows],
            domain_rules=domain_rules,
        )

    def _matched_keywords(self, folded: str, query_terms: set[str]) -> tuple[list[str], set[int]]:
        """Keywords the query contains as a phrase, or (two terms or more) all of whose terms it has; their rows."""
        keywords, rows = [], set()
        for folded_keyword, (keyword, keyword_terms, keyword_rows) in self._keywords.items():
            phrase_hit = folded_keyword in folded and contains_phrase(folded, folded_keyword)
            terms_hit = len(keyword_terms) >= 2 and keyword_terms <= query_terms
            if phrase_hit or terms_hit:
                keywords.append(keyword)
                rows.update(keyword_rows)
        return keywords, rows

    def _matched_entities(self, folded: str) -> tuple[list[str], set[int]]:
        """Entity names of the names and aliases the query contains as a phrase; their rows."""
        entities, rows = [], set()
        for surface, (name, surface_rows) in self._aliases.items():
            if surface in folded and contains_phrase(folded, surface):
                entities.append(name)
                rows.update(surface_rows)
        return entities, rows

    def _matched_title_rows(self, query_terms: set[str], title_min_overlap: float) -> list[int]:
        """Rows whose title words (IDF-weighted) mostly occur in the query, in row order."""
        # Only entries sharing at least one term can pass (every rule below needs a shared term):
        # the shared terms' count and weight per entry are summed from the term -> rows lists,
        # and visiting the entries in row order gives the same result as scanning every one.
        shared_count: dict[int, int] = {}
        shared_weight: dict[int, float] = {}
        for term in sorted(query_terms):
            for row in self._title_rows.get(term, ()):
                shared_count[row] = shared_count.get(row, 0) + 1
                shared_weight[row] = shared_weight.get(row, 0.0) + self._title_weights[term]
        rows = []
        for row in sorted(shared_count):
            entry_terms = self._entry_terms[row]
            if shared_count[row] < min(2, len(entry_terms.title_terms)):
                continue
            # A title naming its own category ("Alertmanager Cluster Down") is about that subject:
            # without the name, its other words ("cluster ... went down") describe another one.
            if not entry_terms.category_terms <= query_terms:
                continue
            if shared_weight[row] >= title_min_overlap * entry_terms.title_weight:
                rows.append(row)
        return rows

    def _named_domains(
        self, folded: str, query_terms: set[str], min_precision: float, margin: float
    ) -> tuple[list[str], list[str]]:
        """The categories the query names that count as domains, and the domain rules that fired."""
        named_categories = [
            category
            for key, category in self._categories.items()
            # The substring test first: most names are absent, and it spares the boundary checks.
            if key in folded and contains_phrase(folded, key)
        ]
        named_categories, domain_rules = self._subjects_of_their_own(named_categories, query_terms, margin)
        if any(self.domain_precision.get(c, 1.0) >= min_precision for c in named_categories):
            # A name every document uses says nothing alone, but beside a specific one it makes the
            # query span two subjects ("prometheus isn't talking to any alertmanager"): no single domain.
            return named_categories, domain_rules
        return [], domain_rules

    def _subjects_of_their_own(
        self, named_categories: list[str], query_terms: set[str], margin: float
    ) -> tuple[list[str], list[str]]:
        """The named categories that stay domains, and the `named_as_subject_elsewhere` rules that dropped the others."""
        if margin >= 1.0:
            return named_categories, []
        kept, rules = [], []
        for category in named_categories:
            elsewhere = self.named_as_subject_elsewhere(category, query_terms, margin)
            if elsewhere is None:
                kept.append(category)
            else:
                rules.append(f"{NAMED_AS_SUBJECT_ELSEWHERE}: {category} ({elsewhere})")
        return kept, rules

    def named_as_subject_elsewhere(self, category: str, query_terms: set[str], margin: float) -> str | None:
        """
        The document of another category that names `category` (all its name's terms) and covers
        the query's other terms (IDF-weighted) better by at least `margin` than any document of
        `category` does; None when there is none. An operator's, a controller's or a client's
        runbook names the product it manages: the product's name alone does not make the query
        about the product's own category.
        """
        name_terms = set(terms(category))
        rest = {term: weight for term in query_terms - name_terms if (weight := self.idf(term)) > 0}
        total = sum(rest.values())
        if not name_terms or not total:
            return None
        covered: dict[int, float] = {}
        for term, weight in rest.items():
            for row in self._term_rows.get(term, ()):
                covered[row] = covered.get(row, 0.0) + weight
        # Only documents using a query term can cover any of it; the others stay at 0.
        best_inside, best_outside, outside_source = 0.0, 0.0, None
        for row in sorted(covered):
            entry, coverage = self.entries[row], covered[row] / total
            if entry.category == category:
                best_inside = max(best_inside, coverage)
            elif coverage > best_outside and name_terms <= self._entry_terms[row].document_terms:
                best_outside, outside_source = coverage, entry.source
        return outside_source if best_outside - best_inside >= margin - 1e-9 else None
