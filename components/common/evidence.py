"""
What makes a retrieved chunk evidence: the one rule shared by retrieval (whether an attempt
found enough) and post-processing (which candidates become evidence blocks).
"""

from dataclasses import dataclass

from components.contracts import Candidate


def usable(candidates: list[Candidate], evidence_threshold: float) -> list[Candidate]:
    """Candidates good enough to become evidence (similarity at or above the threshold), in their order."""
    return [c for c in candidates if c.similarity >= evidence_threshold]


@dataclass(frozen=True)
class EvidenceBar:
    """
    The similarity a candidate needs to be evidence in one lookup, as the retriever decided it and
    hands it on (`FallbackRetriever`'s `evidence_bar` output): `configured` is
    `retrieval.evidence_threshold`; `applied` is the bar used, higher when the query names
    something the knowledge base never mentions (`retrieval.uncovered_evidence_threshold`).
    """

    configured: float
    applied: float

    @property
    def raised(self) -> bool:
        """Whether this lookup needed more than the configured threshold."""
        return self.applied > self.configured
