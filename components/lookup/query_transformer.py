from typing import Any

from haystack import component

from components.common.choices import OnOverlong, check_at_least, check_choice, check_flags, check_named
from components.common.text import clean, printable, template_actions_as_words
from components.contracts import InvalidQueryError, QueryTransform
from components.lookup.l0_matching import entity_expansions, name_expansions
from components.lookup.query_intents import needed_section_kinds
from components.stores.l0_index import L0Index
from components.stores.l0_index_file import L0IndexHandle


@component
class QueryTransformer:
    """
    Normalises the raw query and adds variants: the first step of `lookup_knowledge`.

    Whitespace and control characters are cleaned (NFKC), and the Go template actions of an alert
    annotation quoted before Prometheus filled it in become the label names they print
    (`template_actions_as_words`: "{{ $labels.instance }}" -> "instance"); a query over `max_chars` is truncated
    at a word boundary and the truncation recorded (or rejected with `on_overlong="error"`).
    When `expand_entities` is on, aliases of L0 entities found in the query add a variant that
    names the canonical entity ("pg lag" -> "pg lag (PostgreSQL)"), and so does a document name
    quoted verbatim, with the document's title ("KubeQuotaAlmostFull firing" -> "KubeQuotaAlmostFull
    firing (Kube Quota Almost Full)"), and an alert name that a notification quotes but no
    document has, in words ("[FIRING:1] ContainerCpuThrottled" -> "... (Container Cpu Throttled)");
    the variant is embedded for the first attempt, while an unfiltered retry uses the plain
    normalised query. The section kinds the query needs of its leading document (a fix, a
    diagnosis, ...; `needed_section_kinds`) are decided here, once, in `needed_sections`.

    It is the one component of `lookup_knowledge` that reads the L0 index file: once per run (one
    `stat`, a reload only when the file changed), passing the loaded index on as `l0_index` so that
    every later component of the lookup sees the same version of it.

    Usage example:

    ```python
    >>> import tempfile
    >>> from components.contracts import EntityRef
    >>> from components.stores.l0_index import L0Entry, L0Index
    >>> from components.stores.l0_index_file import save_l0_index
    >>> path = f"{tempfile.mkdtemp()}/kb.l0.json"
    >>> pg = EntityRef("PostgreSQL", aliases=["pg"])
    >>> save_l0_index(L0Index([L0Entry("database/replica-lag.md", "Replica Lag", "database", entities=[pg])]), path)
    >>> transformer = QueryTransformer(l0_index_path=path)
    >>> result = transformer.run(query="  pg   replica lag\\x07 ")
    >>> result["query_transform"].normalized
    'pg replica lag'
    >>> result["expanded_query"]
    'pg replica lag (PostgreSQL)'
    >>> sorted(result["query_transform"].needed_sections)  # an alert or a symptom needs its fix
    ['mitigation']
    >>> result["l0_index"].entries[0].title
    'Replica Lag'

    ```
    """

    def __init__(
        self,
        l0_index_path: str,
        max_chars: int = 2000,
        on_overlong: str = "truncate",
        expand_entities: bool = True,
    ) -> None:
        """
        :param l0_index_path: The L0 index file, read once per run and passed on (`l0_index`).
        :param max_chars: Longest query accepted as is.
        :param on_overlong: "truncate" (recorded in query_transform) or "error".
        :param expand_entities: Add a variant naming the canonical entities of aliases in the query
            and the titles of documents it names.
        """
        check_named(l0_index_path=l0_index_path)
        check_at_least(1, max_chars=max_chars)
        check_choice("on_overlong", on_overlong, OnOverlong.values())
        check_flags(expand_entities=expand_entities)
        self.l0_index_path = l0_index_path
        self.max_chars = max_chars
        self.on_overlong = on_overlong
        self.expand_entities = expand_entities
        self._l0 = L0IndexHandle(l0_index_path)

    def warm_up(self) -> None:
        """Read the L0 index now: a knowledge base not indexed yet fails here, not in the first lookup."""
        # Haystack warms every component up at each run: once read, the run's own stat suffices.
        if not self._l0.loaded:
            self._l0.get()

    @component.output_types(query_transform=QueryTransform, query=str, expanded_query=str | None, l0_index=L0Index)
    def run(self, query: str) -> dict[str, Any]:
        """
        :param query: The agent's query, as given.
        :returns: `query_transform` (the record), `query` (the normalised query),
            `expanded_query` (the query with its entity and name expansions; None without any) and
            `l0_index` (the L0 index as this run read it, for the components after this one).
        :raises InvalidQueryError: Empty or whitespace-only query, or over-long with `on_overlong="error"`.
        """
        if not isinstance(query, str):
            raise InvalidQueryError(f"query must be a string, not {type(query).__name__}")
        cleaned = clean(query)
        normalized = clean(template_actions_as_words(cleaned)) or cleaned  # a bare "{{ $value }}" stays as is
        if not normalized:
            raise InvalidQueryError("query is empty: give the question or alert text to look up")
        truncated = False
        if len(normalized) > self.max_chars:
            if self.on_overlong == "error":
                raise InvalidQueryError(
                    f"query is {len(normalized)} characters long; the limit is {self.max_chars} (query.max_chars)"
                )
            normalized = _truncate_at_word(normalized, self.max_chars)
            truncated = True
        index = self._l0.get()
        expansions = (
            entity_expansions(index, normalized) + name_expansions(index, normalized) if self.expand_entities else []
        )
        variants = [normalized]
        if expansions:
            variants.append(f"{normalized} ({', '.join(expansions)})")
        transform = QueryTransform(
            raw=printable(query),
            normalized=normalized,
            variants=variants,
            expansions=expansions,
            truncated=truncated,
            original_chars=len(query),
            needed_sections=needed_section_kinds(normalized),
        )
        expanded = variants[-1] if expansions else None
        return {"query_transform": transform, "query": normalized, "expanded_query": expanded, "l0_index": index}


def _truncate_at_word(text: str, limit: int) -> str:
    cut = text[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit * 0.8 else cut).rstrip()
