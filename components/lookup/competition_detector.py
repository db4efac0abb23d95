import re
from pathlib import PurePosixPath
from typing import Any

import numpy as np
from haystack import component

from components.common.choices import check_at_least, check_flags, check_unit_interval
from components.common.evidence import EvidenceBar, usable
from components.common.text import identifier_words
from components.contracts import Candidate, Competition
from components.stores.l0_index import L0Index

# Two document names sharing this many leading words are one family ("NodeFilesystem...").
_FAMILY_PREFIX_WORDS = 2
_NAME_BREAKS = re.compile(r"[-_\s]+")


def name_words(source: str) -> list[str]:
    """The words of a document's file name, case kept: `NodeFilesystemSpaceFillingUp.md` -> Node, Filesystem, ..."""
    stem = PurePosixPath(source).stem
    return [word for part in _NAME_BREAKS.split(stem) for word in identifier_words(part).split()]


def shared_name_stem(leader: str, competitor: str) -> str | None:
    """
    The name stem two documents share when they are one family: at least two leading words in
    common, e.g. `NodeFilesystem…FillingUp` for NodeFilesystemSpaceFillingUp and
    NodeFilesystemFilesFillingUp. None otherwise.
    """
    words = name_words(leader)
    first, second = [w.casefold() for w in words], [w.casefold() for w in name_words(competitor)]
    shortest = min(len(first), len(second))
    prefix = 0
    while prefix < shortest and first[prefix] == second[prefix]:
        prefix += 1
    if prefix < _FAMILY_PREFIX_WORDS:
        return None
    suffix = 0
    while suffix < shortest - prefix and first[-1 - suffix] == second[-1 - suffix]:
        suffix += 1
    joiner = "-" if _NAME_BREAKS.search(PurePosixPath(leader).stem) else ""
    head, tail = joiner.join(words[:prefix]), joiner.join(words[len(words) - suffix :])
    return head if prefix == len(words) else f"{head}…{tail}"


def names_document(text: str, source: str) -> bool:
    """Whether `text` names the document `source` by its file name (`NodeFilesystemSpaceFillingUp`), as a whole word."""
    stem = PurePosixPath(source).stem
    return bool(stem) and re.search(rf"(?<![\w-]){re.escape(stem)}(?![\w-])", text, re.IGNORECASE) is not None


def document_scores(candidates: list[Candidate]) -> dict[str, tuple[float, Candidate]]:
    """
    Each document's best candidate and its score, in rank order: the rerank score, or the
    similarity when nothing reranked the candidates (`pipeline.rerank=false`).
    """
    reranked = any(c.final_score for c in candidates)
    best: dict[str, tuple[float, Candidate]] = {}
    for candidate in candidates:
        value = candidate.final_score if reranked else candidate.similarity
        if candidate.source not in best or value > best[candidate.source][0]:
            best[candidate.source] = (value, candidate)
    return dict(sorted(best.items(), key=lambda item: -item[1][0]))


def similarity_leader(candidates: list[Candidate]) -> str | None:
    """The document of the candidate with the highest vector similarity (the first one on a tie)."""
    best = max(candidates, key=lambda c: c.similarity, default=None)
    return best.source if best else None


@component
class CompetitionDetector:
    """
    Says when another document competes with the best one, so that the result is not presented
    as sure when it may name the wrong sibling (docs/architecture.md, "Competing documents").

    The runner-up document (by its best usable candidate) competes with the leader when its score
    is within `margin` of the leader's, or within `sibling_margin` when the two are siblings: their
    names share a stem (`NodeFilesystem…FillingUp`) or their summary vectors have a cosine of at
    least `sibling_similarity`; with `cross_reference`, the best runner-up document (second or further
    down) that the leader's best block names competes at any margin ("similar to the
    NodeFilesystemSpaceFillingUp alert, but ..."): the text that put the leader first is partly about it. The result then names both, packs both
    and is not `high`; how far behind the runner-up is, competing or not, is `runner_up_margin`,
    which `relevanceLevel` reads too, with `similarity_agrees`: whether the leader is also first by
    vector similarity alone (two rankings that agree on the leader are a confidence signal; when the
    rerank signals overturn the similarity order, the leader is less sure).

    Usage example:

    ```python
    >>> from components.common.evidence import EvidenceBar
    >>> from components.contracts import Candidate
    >>> from components.stores.l0_index import L0Index
    >>> index = L0Index([])  # no summary vectors: siblings by name only
    >>> def chunk(source, score):
    ...     return Candidate(f"{source}#0", source, "text", score, 2 - 2 * score, "l2", "sdk", final_score=score)
    >>> ranked = [chunk("node/NodeFilesystemSpaceFillingUp.md", 0.8), chunk("node/NodeFilesystemFilesFillingUp.md", 0.7)]
    >>> detector = CompetitionDetector()
    >>> out = detector.run(candidates=ranked, evidence_bar=EvidenceBar(configured=0.35, applied=0.35), l0_index=index)
    >>> out["competition"].competitor, out["runner_up_margin"]
    ('node/NodeFilesystemFilesFillingUp.md', 0.1)
    >>> out["competition"].reasons  # siblings by name: within sibling_margin
    ['score margin 0.100 < 0.2', 'shared name stem NodeFilesystem…FillingUp']

    ```
    """

    def __init__(
        self,
        margin: float = 0.05,
        sibling_margin: float = 0.2,
        sibling_similarity: float = 0.85,
        cross_reference: bool = True,
    ) -> None:
        """
        :param margin: A runner-up within this rerank-score margin of the leader competes.
        :param sibling_margin: A sibling runner-up within this margin competes.
        :param sibling_similarity: Summary-vector cosine at or above which two documents are siblings.
        :param cross_reference: A runner-up that the leader's best block names competes at any margin.
        """
        check_at_least(0, margin=margin, sibling_margin=sibling_margin)
        check_unit_interval(sibling_similarity=sibling_similarity)
        check_flags(cross_reference=cross_reference)
        self.margin = margin
        self.sibling_margin = sibling_margin
        self.sibling_similarity = sibling_similarity
        self.cross_reference = cross_reference

    @component.output_types(
        competition=Competition | None, runner_up_margin=float | None, similarity_agrees=bool | None
    )
    def run(self, candidates: list[Candidate], evidence_bar: EvidenceBar, l0_index: L0Index) -> dict[str, Any]:
        """
        :param candidates: Reranked candidates, in rank order.
        :param evidence_bar: The retriever's; only candidates at or above its applied bar are considered.
        :param l0_index: The L0 index the lookup read (document summary vectors).
        :returns: `competition` (None when the leader stands alone), `runner_up_margin` (None
            without a second usable document) and `similarity_agrees`: whether the leader is also
            the best document by vector similarity alone (None without a usable candidate).
        """
        kept = usable(candidates, evidence_bar.applied)
        documents = list(document_scores(kept).items())
        agrees = similarity_leader(kept) == documents[0][0] if documents else None
        if len(documents) < 2:
            return {"competition": None, "runner_up_margin": None, "similarity_agrees": agrees}
        (leader, (leader_score, leader_best)), (runner_up, (runner_score, best)) = documents[0], documents[1]
        margin = runner_up_margin = round(leader_score - runner_score, 4)
        reasons = self._sibling_reasons(l0_index, leader, runner_up)
        limit = self.sibling_margin if reasons else self.margin
        named = self._named_runner_up(leader_best, documents[1:]) if margin >= limit else None
        if margin < limit:
            reasons.insert(0, f"score margin {margin:.3f} < {limit}")
        elif named is not None:
            runner_up, (runner_score, best) = named
            margin = round(leader_score - runner_score, 4)
            reasons = self._sibling_reasons(l0_index, leader, runner_up)
            reasons.insert(0, f"the leader's best block names {PurePosixPath(runner_up).stem} (margin {margin:.3f})")
        else:
            return {"competition": None, "runner_up_margin": margin, "similarity_agrees": agrees}
        competition = Competition(
            leader=leader, competitor=runner_up, margin=margin, reasons=reasons, evidence_key=best.evidence_key
        )
        return {"competition": competition, "runner_up_margin": runner_up_margin, "similarity_agrees": agrees}

    def _named_runner_up(self, leader_best: Candidate, runners_up: list) -> tuple | None:
        """The best runner-up document the leader's best block names by its file name (None: none, or the rule is off)."""
        if not self.cross_reference:
            return None
        return next((document for document in runners_up if names_document(leader_best.content, document[0])), None)

    def _sibling_reasons(self, index: L0Index, leader: str, runner_up: str) -> list[str]:
        reasons = []
        stem = shared_name_stem(leader, runner_up)
        if stem:
            reasons.append(f"shared name stem {stem}")
        first, second = index.summary_vector(leader), index.summary_vector(runner_up)
        if first is not None and second is not None:
            similarity = float(np.dot(first, second))
            if similarity >= self.sibling_similarity:
                reasons.append(f"document similarity {similarity:.3f} >= {self.sibling_similarity}")
        return reasons
