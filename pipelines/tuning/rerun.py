"""
`knowledge traces rerun`: the queries of recorded `tool_invocation` rows asked again under the
current config (with its overrides), and what would change against what was recorded: the top
source, found, the relevance level, the fallback reason. No labels needed.

The reruns go through the lookup pipeline without its TraceWriter: they leave no row in the
trace table (and no MLflow trace), so the recorded traffic stays what production saw. The
comparison is logged as one MLflow run (experiment `lookup-knowledge-rerun`).

    report = rerun_traces(load_config(["retrieval.evidence_threshold=0.6"]), last=200)
    report.changed, report.totals["found_lost"]

See docs/tuning.md ("Replay recorded traffic against a new config").
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from omegaconf import DictConfig

from components.common.masking import masked
from components.contracts import InvalidQueryError
from components.errors import BadInputError
from pipelines.tuning.runs import RunLogger, flatten_params

RERUN_EXPERIMENT = "lookup-knowledge-rerun"
RERUN_ARTIFACT = "rerun.json"
TOOL_NAME = "lookup_knowledge"
# What a recorded decision is made of, in the order reports show them.
DECISION_FIELDS = ("found", "top_source", "relevance_level", "fallback_reason")
NOT_RECORDED = "(not recorded)"


class RerunInputError(BadInputError):
    """Nothing to rerun, or a bad --since."""


def decision(found: Any, details: dict[str, Any] | None) -> dict[str, Any]:
    """The decision of one lookup, from its `retrieval_details` record (recorded or fresh)."""
    details = details or {}
    blocks = details.get("evidence_blocks") or []
    return {
        "found": bool(found),
        "top_source": blocks[0].get("source") if blocks else None,
        # A row written before a key was recorded says nothing about it: not a change.
        "relevance_level": details.get("relevance_level", NOT_RECORDED),
        "fallback_reason": details.get("fallback_reason", NOT_RECORDED),
    }


def parse_since(text: str | None) -> datetime | None:
    """`--since 2026-12-01` or `2026-12-01T08:00` (UTC unless it says otherwise)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise RerunInputError(f"--since {text!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM)") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass
class RerunRow:
    invocation_id: str
    query: str
    recorded_at: str
    recorded: dict[str, Any]
    current: dict[str, Any]

    @property
    def changed(self) -> list[str]:
        return [
            name
            for name in DECISION_FIELDS
            if self.recorded[name] != NOT_RECORDED and self.recorded[name] != self.current[name]
        ]

    def to_dict(self) -> dict[str, Any]:
        row = {"invocation_id": self.invocation_id, "query": self.query, "recorded_at": self.recorded_at}
        for name in DECISION_FIELDS:
            row[f"recorded_{name}"] = self.recorded[name]
            row[f"current_{name}"] = self.current[name]
        row["changed"] = ",".join(self.changed)
        return row


@dataclass
class RerunReport:
    rows: list[RerunRow]
    skipped: int
    run_id: str | None = None
    runs: RunLogger | None = None
    totals: dict[str, float] = field(default_factory=dict)
    guard: dict[str, dict[str, Any]] = field(default_factory=dict)  # each guard set's metrics under the config
    constraints: list[Any] = field(default_factory=list)
    fit: Any = None  # pipelines/tuning/guard_fit.py's GuardFit, fitted on the current settings
    warnings: list[str] = field(default_factory=list)  # guards too small to decide

    @property
    def changed(self) -> list[RerunRow]:
        return [row for row in self.rows if row.changed]


def totals(rows: list[RerunRow]) -> dict[str, float]:
    """Counts over the rerun rows: changed queries, each field's changes, found flips both ways."""
    counts: dict[str, float] = {
        "queries": len(rows),
        "changed": sum(1 for row in rows if row.changed),
        "found_lost": sum(1 for row in rows if row.recorded["found"] and not row.current["found"]),
        "found_gained": sum(1 for row in rows if not row.recorded["found"] and row.current["found"]),
    }
    for name in DECISION_FIELDS[1:]:
        counts[f"{name}_changed"] = sum(1 for row in rows if name in row.changed)
    counts["recorded_found_rate"] = _rate([row.recorded["found"] for row in rows])
    counts["current_found_rate"] = _rate([row.current["found"] for row in rows])
    return counts


def _rate(flags: list[bool]) -> float:
    return round(sum(flags) / len(flags), 4) if flags else 0.0


def recorded_rows(
    cfg: DictConfig, since: datetime | None = None, last: int | None = None, include_evaluation: bool = False
) -> list[dict[str, Any]]:
    """The successful lookup rows to rerun, oldest first (`last`: only the newest N); production traffic only by default."""
    from pipelines.state.traces import open_store

    rows = open_store(cfg, reading=True).latest(last=None, status="ok")  # newest first
    rows = [row for row in rows if row.get("tool_name") == TOOL_NAME and _query_of(row) is not None]
    if not include_evaluation:
        rows = [row for row in rows if not is_evaluation(row)]
    if since is not None:
        rows = [row for row in rows if _aware(row["created_at"]) >= since]
    return list(reversed(rows[:last] if last else rows))


def is_evaluation(row: dict[str, Any]) -> bool:
    """A lookup recorded by `knowledge eval --record`, not by a client."""
    from components.tracing.trace_writer import EVALUATION_ORIGIN, ORIGIN_KEY

    return (row.get("retrieval_details") or {}).get(ORIGIN_KEY) == EVALUATION_ORIGIN


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _query_of(row: dict[str, Any]) -> str | None:
    arguments = row.get("arguments") or {}
    query = arguments.get("query") if isinstance(arguments, dict) else None
    return query if isinstance(query, str) and query.strip() else None


# The keys a rerun tries; the rest (where the state, traces and runs live) are the same for the current settings.
SETTING_PREFIXES = ("retrieval.", "rerank.", "competition.", "query.", "context.", "sidecar.", "pipeline.", "embedder.")


def is_setting(override: str) -> bool:
    """An override that changes what a lookup decides, as opposed to where its state lives."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.startswith(SETTING_PREFIXES)


def rerun_traces(
    cfg: DictConfig,
    since: datetime | None = None,
    last: int | None = None,
    experiment: str = RERUN_EXPERIMENT,
    include_evaluation: bool = False,
    guards: list[Any] = (),
    constraints: list[Any] = (),
    current_cfg: DictConfig | None = None,
) -> RerunReport:
    """
    Rerun the recorded queries under `cfg` (nothing recorded), compare, score the guard sets
    (conf/guard/, fitted on `current_cfg`, the settings in force) under the same config, log one MLflow run.
    """
    from pipelines.lookup import LookupService, build_lookup_pipeline

    recorded = recorded_rows(cfg, since, last, include_evaluation)
    if not recorded:
        raise RerunInputError(
            f"no recorded lookup to rerun in {masked(cfg.trace.db_url)} (with --since/--last as given)"
        )
    service = LookupService(cfg, pipeline=build_lookup_pipeline(cfg, record=False))
    rows: list[RerunRow] = []
    skipped = 0
    for row in recorded:
        query = _query_of(row)
        try:
            result = service.lookup(query)
        except InvalidQueryError:
            skipped += 1
            continue
        rows.append(
            RerunRow(
                invocation_id=row["id"],
                query=query,
                recorded_at=_aware(row["created_at"]).isoformat(timespec="seconds"),
                recorded=decision(row.get("found"), row.get("retrieval_details")),
                current=decision(result.found, result.retrieval_details(0)),
            )
        )
    report = RerunReport(rows, skipped, totals=totals(rows), constraints=list(constraints))
    if guards:
        _score_guard(report, cfg, current_cfg or cfg, list(guards))
    report.runs = RunLogger.from_config(cfg, experiment)
    report.run_id = _log_run(report, cfg, since, last)
    return report


def _score_guard(report: RerunReport, cfg: DictConfig, current_cfg: DictConfig, guards: list[Any]) -> None:
    """The guard fitted on the current settings, then its sets in effect scored under `cfg`."""
    from pipelines.tuning.guard_fit import fit_guard, measure_guard
    from pipelines.tuning.guards import untested_guards

    current = measure_guard(current_cfg, guards)
    report.fit = fit_guard(current_cfg, guards, report.constraints, current)
    report.constraints = report.fit.constraints
    report.guard = dict(current) if cfg == current_cfg else measure_guard(cfg, report.fit.sets)
    report.guard = {name: report.guard[name] for name in (s.name for s in report.fit.sets)}
    report.warnings = untested_guards(report.constraints, [report.guard], int(current_cfg.guard.min_off_topic))


def _log_run(report: RerunReport, cfg: DictConfig, since: datetime | None, last: int | None) -> str | None:
    runs = report.runs
    tags = {"kind": "trace-rerun", "rerun.since": since.isoformat() if since else "", "rerun.last": str(last or "")}
    run_id = runs.start("rerun", tags=tags)
    if run_id is None:
        return None
    try:
        runs.log_params(run_id, flatten_params(cfg))
        from pipelines.tuning.runs import flatten_metrics

        guard = {k: v for name, m in report.guard.items() for k, v in flatten_metrics(m, f"guard.{name}.").items()}
        runs.log_metrics(run_id, {**report.totals, **guard})
        runs.log_table(run_id, [row.to_dict() for row in report.rows], artifact_file=RERUN_ARTIFACT)
    except Exception:
        runs.finish(run_id, "FAILED")
        raise
    runs.finish(run_id)
    return run_id


def format_rerun(report: RerunReport, limit: int = 30) -> str:
    """The totals, then each changed query: what was recorded -> what the current config decides."""
    t = report.totals
    lines = [
        f"reran {int(t['queries'])} recorded lookups under the current config (not recorded): "
        f"{int(t['changed'])} changed",
        f"  found {t['recorded_found_rate']:.3f} -> {t['current_found_rate']:.3f} "
        f"(lost {int(t['found_lost'])}, gained {int(t['found_gained'])}); top source changed "
        f"{int(t['top_source_changed'])}, relevance level {int(t['relevance_level_changed'])}, "
        f"fallback reason {int(t['fallback_reason_changed'])}",
    ]
    if report.skipped:
        lines.append(f"  skipped {report.skipped} invalid quer{'y' if report.skipped == 1 else 'ies'}")
    lines += _guard_lines(report)
    for row in report.changed[:limit]:
        moves = "; ".join(f"{name} {row.recorded[name]} -> {row.current[name]}" for name in row.changed)
        lines.append(f"  {row.invocation_id[:8]}  {_cut(row.query, 60):<60}  {moves}")
    if len(report.changed) > limit:
        lines.append(f"  ... {len(report.changed) - limit} more (--json, or the MLflow artifact {RERUN_ARTIFACT})")
    if report.runs is not None:
        lines.extend(report.runs.announce(report.run_id))
    return "\n".join(lines)


def _guard_lines(report: RerunReport) -> list[str]:
    """Each guard set under the config replayed: its rejection and answer rates, and the constraints it breaks."""
    from pipelines.tuning.guards import set_violations

    lines = [f"  warning: {warning}" for warning in report.warnings]
    lines += [f"  {line}" for line in (report.fit.lines() if report.fit is not None else [])]
    for name, metrics in report.guard.items():
        broken = set_violations(report.constraints, name, metrics)
        rates = ", ".join(
            f"{key} {metrics[key]:.3f}" for key in ("no_evidence_rate", "answer_rate") if metrics.get(key) is not None
        )
        status = "breaks " + ", ".join(broken) if broken else "keeps the guard"
        lines.append(f"  guard {name}: {rates}: {status}")
    return lines


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
