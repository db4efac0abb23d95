"""
What a failed lookup keeps of the stages that finished before the failure: the parts of the result
each stage contributes, and the `retrieval_details` keys they fill (`TraceWriter.record_error`).
"""

import dataclasses
from typing import Any

from components.lookup_result import LookupResult
from components.tracing import stage_recorder

# What each stage contributes to a result, and the retrieval_details keys it fills.
_STAGE_PARTS: dict[str, dict[str, tuple[str, ...]]] = {
    "query_transformer": {"query_transform": ("query_transform",)},
    "l0_hints": {"hints": ("l0_hints",)},
    "retriever": {"retrieval_trace": ("retrieval_trace", "fallback_reason")},
    "deduper": {
        "rerank_trace": ("rerank_trace",),
        "evidence_blocks": ("evidence_blocks", "final_evidence_count"),
        "dedup": ("candidate_count",),
    },
    "context_packer": {"context_pack": ("context_pack_summary",)},
}
_RESULT_FIELDS = {"hints": "l0_hints", "dedup": "dedup"}


def with_finished_stages(
    failure: LookupResult,
    recording: stage_recorder.StageRecording | None,
    failed_stage: str | None = None,
    partial_outputs: dict[str, Any] | None = None,
) -> tuple[LookupResult, set[str]]:
    """
    The error result with the outputs of every stage that finished before the failure, and the
    `retrieval_details` keys they fill. A component that failed after producing part of its work
    returns it as its failure's outputs (`partial_outputs` of `failed_stage`; the retriever's
    `retrieval_trace` of the attempts that ran): those are kept too.
    """
    changes: dict[str, Any] = {}
    keys: set[str] = set()
    finished = [
        (stage.name, stage.outputs)
        for stage in (recording.stages if recording else [])
        if stage.end_ns and not stage.error and isinstance(stage.outputs, dict)
    ]
    if failed_stage is not None and partial_outputs:
        finished.append((failed_stage, partial_outputs))
    for name, outputs in finished:
        for output, detail_keys in _STAGE_PARTS.get(name, {}).items():
            field = _RESULT_FIELDS.get(output, output)
            if output in outputs and field not in changes:
                changes[field] = outputs[output]
                keys.update(detail_keys)
    return dataclasses.replace(failure, **changes, completed_parts=sorted(changes)), keys
