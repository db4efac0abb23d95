"""
What makes a retrieved chunk evidence: the one rule shared by retrieval (whether an attempt
found enough) and post-processing (which candidates become evidence blocks).
"""

from components.contracts import Candidate


def usable(candidates: list[Candidate], evidence_threshold: float) -> list[Candidate]:
    """Candidates good enough to become evidence (similarity at or above the threshold), in their order."""
    return [c for c in candidates if c.similarity >= evidence_threshold]
