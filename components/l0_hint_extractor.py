import logging
from typing import Any

from haystack import component

from components.contracts import L0Hints
from components.l0_index import L0IndexHandle

logger = logging.getLogger(__name__)


@component
class L0HintExtractor:
    """
    Matches the query against the L0 index and returns hint data only: matched titles, keywords,
    domains (categories) and entities (aliases map to their entity).

    Hints steer retrieval (an unambiguous domain becomes a category filter), boost reranking and
    explain results; they are never evidence. Matching needs no whitespace tokenisation, so CJK
    knowledge bases work as well as Latin-script ones.

    Usage example:

    ```python
    extractor = L0HintExtractor(l0_index_path=".knowledge/knowledge.l0.json")
    extractor.run(query="postgres replica is lagging")["hints"].entities  # ["PostgreSQL"]
    ```
    """

    def __init__(
        self,
        l0_index_path: str,
        title_min_overlap: float = 0.6,
        domain_from_matches: bool = True,
        domain_min_precision: float = 0.5,
    ) -> None:
        """
        :param l0_index_path: The L0 index written by `knowledge index`.
        :param title_min_overlap: IDF-weighted share of a title's words that must occur in the query.
        :param domain_from_matches: Also take domains from the categories of matched entries.
        :param domain_min_precision: A category named in the query is a domain only when at least this
            share of the documents naming it belong to it.
        """
        self.l0_index_path = l0_index_path
        self.title_min_overlap = title_min_overlap
        self.domain_from_matches = domain_from_matches
        self.domain_min_precision = domain_min_precision
        self._l0 = L0IndexHandle(l0_index_path)

    @component.output_types(hints=L0Hints)
    def run(self, query: str) -> dict[str, Any]:
        """
        :param query: The normalised query.
        :returns: `hints`, an `L0Hints`.
        """
        hints = self._l0.get().match(
            query, self.title_min_overlap, self.domain_from_matches, self.domain_min_precision
        )
        logger.debug("L0 hints for %r: %s", query, hints)
        return {"hints": hints}
