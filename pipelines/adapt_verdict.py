"""
The verdict that ends `knowledge adapt`: base against adapted model, each with its own calibration,
through the whole lookup pipeline (each indexed into its own folder under
`paths.state_dir/adapt-verdict/`), on queries made from the knowledge base (pair anchors, with the
anchor's document as the answer) and on the guard sets (off-topic texts that must be rejected).

`recommend_adapted` is the rule: the adapted model is recommended only when it ranks better and
rejects as well. It stands in for the project's shared recommendation rule until that lands, and
is the one place to swap. Design notes: docs/adapt.md#the-verdict.
"""

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.errors import BadInputError, KnowledgeFailure
from pipelines.adapt_pairs import EVAL_DIR, MinedPairs
from pipelines.evaluation import EvalQuery, Ranked, evaluate, index_first, load_queries

# The guard sets adapt fits the calibration on and judges with (off-topic texts the corpus does not cover).
DEFAULT_GUARD_SETS = (str(EVAL_DIR / "offtopic-alerts.jsonl"),)
KB_QUERIES = 100  # queries made from the knowledge base, at most
KB_SET = "kb-pairs"
# Off-topic rejection may fall this much under the base model's before the adapted model is refused.
REJECTION_TOLERANCE = 0.01


class NotRecommendedError(KnowledgeFailure):
    """The adapted model does not rank better, or does not reject as well as the base model."""


@dataclass
class SetScores:
    hit_at_1: float | None
    hit_at_5: float | None
    answered: float | None
    rejected: float | None
    high_right: float | None  # share of `high` answers whose first source is relevant
    high_count: int = 0


@dataclass
class Verdict:
    recommended: bool
    reason: str
    scores: dict[str, dict[str, SetScores]] = field(default_factory=dict)  # model label -> set name -> scores

    def lines(self) -> list[str]:
        lines = ["  set              model    hit@1  hit@5  answered  rejected  high right"]
        for set_name in next(iter(self.scores.values()), {}):
            for label, sets in self.scores.items():
                s = sets[set_name]
                high = f"{_fmt(s.high_right)} of {s.high_count}" if s.high_count else "-"
                lines.append(
                    f"  {set_name:<16} {label:<8} {_fmt(s.hit_at_1):>5}  {_fmt(s.hit_at_5):>5}  {_fmt(s.answered):>8}"
                    f"  {_fmt(s.rejected):>8}  {high}"
                )
        verdict = "recommended" if self.recommended else "not recommended"
        return [*lines, f"Verdict: {verdict}: {self.reason}"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.recommended,
            "reason": self.reason,
            "scores": {label: {name: vars(s) for name, s in sets.items()} for label, sets in self.scores.items()},
        }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def kb_queries(mined: MinedPairs, seed: int, limit: int = KB_QUERIES) -> list[EvalQuery]:
    """Heading-path and first-sentence anchors, each answered by its own document (a seeded sample)."""
    anchors = sorted({(p.anchor, p.source) for p in mined.pairs if p.kind in ("heading", "sentence")})
    chosen = random.Random(seed).sample(anchors, min(limit, len(anchors)))
    return [EvalQuery(query=a, relevant={s}, kind="answerable", id=f"kb-{i}") for i, (a, s) in enumerate(chosen)]


def guard_texts(guard_sets: list[str]) -> list[str]:
    return [q.query for path in guard_sets for q in load_queries(path) if not q.answerable]


def checked_guard_sets(paths: list[str] | None) -> list[str]:
    """The guard sets to use, each read once before training so that a bad one fails in seconds."""
    chosen = list(paths or DEFAULT_GUARD_SETS)
    for path in chosen:
        if not guard_texts([path]):
            raise BadInputError(f"--guard {path} holds no off-topic query (kind off_topic, or no relevant sources)")
    return chosen


def set_scores(queries: list[EvalQuery], answers: list[Ranked]) -> SetScores:
    from pipelines.evaluation_metrics import score

    metrics = score(queries, answers)
    answerable = [(q, a) for q, a in zip(queries, answers, strict=True) if q.answerable]
    high = [bool(a.sources) and a.sources[0] in q.relevant for q, a in answerable if a.details.get("level") == "high"]
    return SetScores(
        hit_at_1=metrics["hit@1"] if metrics["answerable"] else None,
        hit_at_5=metrics["hit@5"] if metrics["answerable"] else None,
        answered=metrics["answer_rate"] if metrics["answerable"] else None,
        rejected=metrics["no_evidence_rate"] if metrics["off_topic"] else None,
        high_right=sum(high) / len(high) if high else None,
        high_count=len(high),
    )


def score_model(overrides: list[str], model: str, state: Path, kb_path: str, sets: dict[str, list[EvalQuery]]):
    """One model through the whole pipeline, with its calibration (as `embedder.model=DIR` loads it)."""
    from pipelines.evaluation import PipelineSystem
    from pipelines.settings import load_config

    cfg = load_config([*overrides, f"embedder.model={model}", f"paths.state_dir={state}", "mlflow=off"])
    cfg = index_first(cfg, kb_path, replace=True)
    system = PipelineSystem(cfg)
    return {
        name: set_scores(queries, evaluate(cfg, queries, [system]).answers["pipeline"])
        for name, queries in sets.items()
    }


def recommend_adapted(base: dict[str, SetScores], adapted: dict[str, SetScores]) -> tuple[bool, str]:
    """
    Recommend the adapted model only when its hit@1 is higher over the ranking sets and, on every
    guard set, it rejects off-topic texts within `REJECTION_TOLERANCE` of the base model.
    """
    for name, scores in adapted.items():
        if scores.rejected is None:
            continue
        floor = round((base[name].rejected or 0.0) - REJECTION_TOLERANCE, 4)
        if scores.rejected < floor:
            return (
                False,
                f"it rejects {scores.rejected:.3f} of {name} (base {base[name].rejected:.3f}; needs {floor:.3f})",
            )
    ranked = [name for name, s in adapted.items() if s.hit_at_1 is not None]
    gain = sum(adapted[n].hit_at_1 for n in ranked) - sum(base[n].hit_at_1 for n in ranked)
    if not ranked or gain <= 0:
        return False, f"it does not rank better (hit@1 change {gain / max(1, len(ranked)):+.3f} on {', '.join(ranked)})"
    return True, f"hit@1 {gain / len(ranked):+.3f} on {', '.join(ranked)}, rejection kept on the guard sets"


def judge(
    overrides: list[str],
    base_model: str,
    model_dir: str,
    kb_path: str,
    state_dir: str,
    sets: dict[str, list[EvalQuery]],
) -> Verdict:
    root = Path(state_dir) / "adapt-verdict"
    scores = {
        label: score_model(overrides, model, root / label, kb_path, sets)
        for label, model in (("base", base_model), ("adapted", model_dir))
    }
    recommended, reason = recommend_adapted(scores["base"], scores["adapted"])
    return Verdict(recommended, reason, scores)
