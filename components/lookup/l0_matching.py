"""
The matching of a query against the L0 index, for the lookup: the documents and alert names it
quotes and the expansions they give (`QueryTransformer`), the hints it earns (`match`: names,
titles, keywords, entities, domains and the domain rules) and the words of it that the knowledge
base does not cover (`uncovered_terms`; both `L0HintExtractor`). Hints only, never evidence. The
index itself (its entries and the term tables built on load) is `components.stores.l0_index`; the
word rules are `components.common.l0_words`.
"""

from components.common.l0_words import (
    ALERT_NAME,
    QUERY_TOKEN,
    SURFACE_WORD,
    derived_forms,
    is_compound_word,
    is_identifier_name,
)
from components.common.text import contains_phrase, fold, identifier_words, terms, unique
from components.contracts import L0Hints
from components.stores.l0_index import L0Index

NAMED_AS_SUBJECT_ELSEWHERE = "named_as_subject_elsewhere"


def entity_expansions(index: L0Index, query: str) -> list[str]:
    """Canonical entity names for aliases found in the query but not already named in it."""
    folded = fold(query)
    names = []
    for surface, (name, _) in index.alias_rows.items():
        if contains_phrase(folded, surface) and not contains_phrase(folded, fold(name)):
            names.append(name)
    return unique(names)


def name_expansions(index: L0Index, query: str) -> list[str]:
    """
    Titles of the documents whose name the query quotes ("KubeQuotaAlmostFull" -> "Kube Quota
    Almost Full"), then the words of the alert names a notification quotes that no document
    is named after ("[FIRING:1] KubeNodeNotReadyLong" -> "Kube Node Not Ready Long"): an
    identifier embeds poorly, its words far better.
    """
    # Compared without `fold`, which would split the quoted name into the title's words.
    lowered = query.casefold()
    titles = [index.entries[row].title for row in quoted_document_rows(index, query)]
    titles += [identifier_words(name) for name in unknown_alert_names(index, query)]
    return unique(t for t in titles if " " in t.strip() and t.casefold() not in lowered)


def quoted_document_rows(index: L0Index, query: str) -> list[int]:
    """The rows of the documents whose name the query quotes verbatim (`document_names`)."""
    return sorted({row for token in QUERY_TOKEN.findall(query) for row in index.name_rows.get(token.casefold(), ())})


def unknown_alert_names(index: L0Index, query: str) -> list[str]:
    """
    Alert names that a notification quotes ("[FIRING:1] KafkaConsumerGroupLag ...",
    "alertname=KafkaConsumerGroupLag") and that no document is named after: the knowledge base
    has no runbook for that alert. Only identifier-shaped names count, as for document names.
    """
    quoted = (found.group(1) or found.group(2) for found in ALERT_NAME.finditer(query))
    return unique(name for name in quoted if is_identifier_name(name) and name.casefold() not in index.name_rows)


def match(
    index: L0Index,
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
    named_rows = quoted_document_rows(index, query)
    keywords, keyword_rows = _matched_keywords(index, folded, query_terms)
    entities, entity_rows = _matched_entities(index, folded)
    title_rows = _matched_title_rows(index, query_terms, title_min_overlap)
    matched_rows = sorted(set(named_rows) | keyword_rows | entity_rows | set(title_rows))
    domains, domain_rules = _named_domains(index, folded, query_terms, domain_min_precision, subject_elsewhere_margin)
    if domain_from_matches:
        domains.extend(index.entries[row].category for row in matched_rows)

    return L0Hints(
        matched_titles=unique(index.entries[row].title for row in [*named_rows, *title_rows]),
        matched_keywords=unique(keywords),
        domains=unique(d for d in domains if d.strip()),
        entities=unique(entities),
        matched_sources=[index.entries[row].source for row in matched_rows],
        named_sources=[index.entries[row].source for row in named_rows],
        domain_rules=domain_rules,
    )


def _matched_keywords(index: L0Index, folded: str, query_terms: set[str]) -> tuple[list[str], set[int]]:
    """Keywords the query contains as a phrase, or (two terms or more) all of whose terms it has; their rows."""
    keywords, rows = [], set()
    for folded_keyword, (keyword, keyword_terms, keyword_rows) in index.keyword_rows.items():
        phrase_hit = folded_keyword in folded and contains_phrase(folded, folded_keyword)
        terms_hit = len(keyword_terms) >= 2 and keyword_terms <= query_terms
        if phrase_hit or terms_hit:
            keywords.append(keyword)
            rows.update(keyword_rows)
    return keywords, rows


def _matched_entities(index: L0Index, folded: str) -> tuple[list[str], set[int]]:
    """Entity names of the names and aliases the query contains as a phrase; their rows."""
    entities, rows = [], set()
    for surface, (name, surface_rows) in index.alias_rows.items():
        if surface in folded and contains_phrase(folded, surface):
            entities.append(name)
            rows.update(surface_rows)
    return entities, rows


def _matched_title_rows(index: L0Index, query_terms: set[str], title_min_overlap: float) -> list[int]:
    """Rows whose title words (IDF-weighted) mostly occur in the query, in row order."""
    # Only entries sharing at least one term can pass (every rule below needs a shared term):
    # the shared terms' count and weight per entry are summed from the term -> rows lists,
    # and visiting the entries in row order gives the same result as scanning every one.
    shared_count: dict[int, int] = {}
    shared_weight: dict[int, float] = {}
    for term in sorted(query_terms):
        for row in index.title_rows.get(term, ()):
            shared_count[row] = shared_count.get(row, 0) + 1
            shared_weight[row] = shared_weight.get(row, 0.0) + index.title_weights[term]
    rows = []
    for row in sorted(shared_count):
        entry_terms = index.entry_terms[row]
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
    index: L0Index, folded: str, query_terms: set[str], min_precision: float, margin: float
) -> tuple[list[str], list[str]]:
    """The categories the query names that count as domains, and the domain rules that fired."""
    named_categories = [
        category
        for key, category in index.category_names.items()
        # The substring test first: most names are absent, and it spares the boundary checks.
        if key in folded and contains_phrase(folded, key)
    ]
    named_categories, domain_rules = _subjects_of_their_own(index, named_categories, query_terms, margin)
    # A category without a measured precision counts as specific, whatever the minimum.
    precision = index.domain_precision
    if any(c not in precision or precision[c] >= min_precision for c in named_categories):
        # A name every document uses says nothing alone, but beside a specific one it makes the
        # query span two subjects ("prometheus isn't talking to any alertmanager"): no single domain.
        return named_categories, domain_rules
    return [], domain_rules


def _subjects_of_their_own(
    index: L0Index, named_categories: list[str], query_terms: set[str], margin: float
) -> tuple[list[str], list[str]]:
    """The named categories that stay domains, and the `named_as_subject_elsewhere` rules that dropped the others."""
    if margin >= 1.0:
        return named_categories, []
    kept, rules = [], []
    for category in named_categories:
        elsewhere = named_as_subject_elsewhere(index, category, query_terms, margin)
        if elsewhere is None:
            kept.append(category)
        else:
            rules.append(f"{NAMED_AS_SUBJECT_ELSEWHERE}: {category} ({elsewhere})")
    return kept, rules


def named_as_subject_elsewhere(index: L0Index, category: str, query_terms: set[str], margin: float) -> str | None:
    """
    The document of another category that names `category` (all its name's terms) and covers
    the query's other terms (IDF-weighted) better by at least `margin` than any document of
    `category` does; None when there is none. An operator's, a controller's or a client's
    runbook names the product it manages: the product's name alone does not make the query
    about the product's own category.
    """
    name_terms = set(terms(category))
    rest = {term: index.idf(term) for term in query_terms - name_terms}
    total = sum(rest.values())
    if not name_terms or not total:
        return None
    covered: dict[int, float] = {}
    for term, weight in rest.items():
        for row in index.term_rows.get(term, ()):
            covered[row] = covered.get(row, 0.0) + weight
    # Only documents using a query term can cover any of it; the others stay at 0.
    best_inside, best_outside, outside_source = 0.0, 0.0, None
    for row in sorted(covered):
        entry, coverage = index.entries[row], covered[row] / total
        if entry.category == category:
            best_inside = max(best_inside, coverage)
        elif coverage > best_outside and name_terms <= index.entry_terms[row].document_terms:
            best_outside, outside_source = coverage, entry.source
    return outside_source if best_outside - best_inside >= margin - 1e-9 else None


def uncovered_terms(
    index: L0Index, query: str, common_words: frozenset[str] | set[str], passing_mention_df: int = 0
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
        if index.joined_words is not None:
            if _is_known_word(index, whole, common_words, passing_mention_df):
                continue
            if is_compound_word(word):
                uncovered.append(whole)
                continue
        for part in fold(word).split():
            if len(part) < 3:  # "db" of "MongoDBDown": too short to name anything
                continue
            if not _is_known_word(index, part, common_words, passing_mention_df):
                uncovered.append(part)
    return unique(uncovered + [name for name in unknown_alert_names(index, query) if _off_title_name(index, name)])


def _is_known_word(index: L0Index, word: str, common_words: frozenset[str] | set[str], passing_mention_df: int) -> bool:
    """
    A common word, or one whose terms (of the word or a base form of it) the knowledge base uses
    (in more than `passing_mention_df` documents, or in a title, keyword or entity).
    """
    forms = derived_forms(word)
    if any(form in common_words for form in forms):
        return True
    form_terms = [t for form in forms for t in terms(form)]
    joined = index.joined_words or frozenset()
    return not form_terms or any(
        _used_beyond_passing(index, t, passing_mention_df) or t in common_words or t in joined for t in form_terms
    )


def _used_beyond_passing(index: L0Index, term: str, passing_mention_df: int) -> bool:
    # A title's, keyword's or entity's term is the knowledge base's own even where no document's
    # text uses it (an alias listed only in the frontmatter: "mariadb" of MySQL).
    return index.term_df.get(term, 0) > passing_mention_df or term in index.named_terms


def _off_title_name(index: L0Index, name: str) -> bool:
    # A team's own name for a covered alert ("NodeDiskAlmostFull") mostly reuses the words of
    # the titles; an alert of another system ("KafkaConsumerGroupLag") hardly any.
    name_terms = set(terms(name))
    return bool(name_terms) and len(name_terms & index.title_rows.keys()) < 0.5 * len(name_terms)
