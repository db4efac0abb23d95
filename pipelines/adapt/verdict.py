"""
The verdict that ends `knowledge adapt`: base against adapted model, each with its own calibration,
through the whole lookup pipeline (each indexed into its own folder under
`paths.state_dir/adapt-verdict/`), on queries made from the knowledge base (anchors held out of
training by `pipelines.adapt.split`, with the anchor's document as the answer) and on the guard sets
(off-topic texts that must be rejected).

The decision is the project's one recommendation rule (`pipelines.tuning.recommend.recommend`):
the adapted model is the candidate, the base model the current setting; it must keep the configured
guard's constraints (`conf/guard`) and reject off-topic texts within one point of the base model on
every guard set, and beat the base model by the paired test on the knowledge base's queries.
Design notes: docs/adapt.md#the-verdict.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.errors import BadInputError, KnowledgeFailure
from pipelines.evaluation.metrics import EvalQuery, Ranked
from pipelines.evaluation.run import evaluate, index_first

KB_SET = "kb-pairs"
LABELS_SET = "labels-check"  # the check split of `--labels`: held out of training by the stable split
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
class AdaptVerdict:
    """The shared rule's verdict, with the scores it was made from (model label -> set name -> scores)."""

    decision: Any  # pipelines.tuning.recommend.Verdict
    scores: dict[str, dict[str, SetScores]] = field(default_factory=dict)

    @property
    def recommended(self) -> bool:
        return self.decision.recommended is not None

    @property
    def reason(self) -> str:
        return self.decision.reason

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
        # The decision's own "keep ..." line says the same reason: the verdict is printed once.
        warnings = [f"warning: {warning}" for warning in self.decision.unguarded]
        return [*lines, *warnings, f"Verdict: {verdict}: {self.reason}"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.recommended,
            "reason": self.reason,
            "scores": {label: {name: vars(s) for name, s in sets.items()} for label, sets in self.scores.items()},
        }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def kb_queries(held_out: list[tuple[str, str]]) -> list[EvalQuery]:
    """The held-out anchors (`pipelines.adapt.split`), each answered by its own document."""
    return [EvalQuery(query=a, relevant={s}, kind="answerable", id=f"kb-{i}") for i, (a, s) in enumerate(held_out)]


def judged_queries(split, labels=None) -> dict[str, list[EvalQuery]]:
    """
    The queries the sign test judges on: the labels' check split (`LabelSplit`) when labels were
    given, else the knowledge base's held-out anchors (`HeldOutSplit`).
    """
    if labels is not None:
        return {LABELS_SET: labels.check}
    return {KB_SET: kb_queries(split.held_out)}


def guard_texts(guard_sets: list[Any]) -> list[str]:
    """The off-topic texts of the guard sets (`QuerySet`s)."""
    return [q.query for query_set in guard_sets for q in query_set.queries if not q.answerable]


def checked_guard_sets(cfg, given: list[str] | None) -> list[Any]:
    """
    The configured guard sets (`guard.sets`) and the `--guard` files, read before training so that a
    bad one fails in seconds; a `--guard` file without off-topic queries guards nothing and is refused.
    """
    from pipelines.tuning.guards import guard_sets

    sets = guard_sets(cfg, list(given or []), [])
    for query_set in sets:
        if not guard_texts([query_set]):
            raise BadInputError(f"guard set {query_set.path} holds no off-topic query (kind off_topic)")
    return sets


def set_scores(queries: list[EvalQuery], answers: list[Ranked]) -> SetScores:
    from pipelines.evaluation.metrics import score

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


def model_answers(
    overrides: list[str], model: str, state: Path, kb_path: str, sets: dict[str, list[EvalQuery]]
) -> dict[str, list[Ranked]]:
    """One model through the whole pipeline, with its calibration (as `embedder.model=DIR` loads it)."""
    from pipelines.config.settings import load_config
    from pipelines.evaluation.run import PipelineSystem

    cfg = load_config([*overrides, f"embedder.model={model}", f"paths.state_dir={state}", "mlflow=off"])
    cfg = index_first(cfg, kb_path, replace=True)
    system = PipelineSystem(cfg)
    return {name: evaluate(cfg, queries, [system]).answers["pipeline"] for name, queries in sets.items()}


def decide(cfg, sets: dict[str, list[EvalQuery]], answers: dict[str, dict[str, list[Ranked]]], model_label: str):
    """
    The shared rule on base (`answers["base"]`) against adapted (`answers["adapted"]`): the configured
    guard's constraints, plus, per set with off-topic queries, rejection within `REJECTION_TOLERANCE`
    of the base model's; the paired test on the knowledge base's queries.
    """
    from pipelines.evaluation.metrics import score
    from pipelines.tuning.guards import Constraint, guard_constraints, untested_guards
    from pipelines.tuning.recommend import Candidate, Policy, metric_values, recommend

    policy = Policy.from_config(cfg)
    metrics = {label: {n: score(sets[n], answers[label][n]) for n in sets} for label in answers}

    def candidate(label: str, text: str) -> Candidate:
        values = {n: metric_values(sets[n], answers[label][n], policy.metric) for n in sets}
        return Candidate(text, metrics[label], values)

    constraints = guard_constraints(cfg, [], [], "guard.constraints")
    for name, base in metrics["base"].items():
        if base["off_topic"]:
            floor = max(0.0, round(base["no_evidence_rate"] - REJECTION_TOLERANCE, 4))
            constraints.append(Constraint.parse(f"no_evidence_rate@{name}>={floor}", "the base model's rejection"))
    unguarded = untested_guards(constraints, [metrics["base"], metrics["adapted"]], int(cfg.guard.min_off_topic))
    paired = [n for n in sets if metrics["base"][n]["answerable"]]
    return recommend(
        candidate("base", "the base model"), candidate("adapted", model_label), constraints, policy, paired, unguarded
    )


def judge(
    cfg,
    overrides: list[str],
    model_dir: str,
    kb_path: str,
    sets: dict[str, list[EvalQuery]],
) -> AdaptVerdict:
    root = Path(cfg.paths.state_dir) / "adapt-verdict"
    answers = {
        label: model_answers(overrides, model, root / label, kb_path, sets)
        for label, model in (("base", cfg.embedder.model), ("adapted", model_dir))
    }
    decision = decide(cfg, sets, answers, f"embedder.model={model_dir}")
    scores = {label: {n: set_scores(sets[n], answers[label][n]) for n in sets} for label in answers}
    return AdaptVerdict(decision, scores)
