"""
hayhooks wrapper of `lookup_knowledge`: the one door of every served call. `knowledge serve` calls
it for `POST /lookup_knowledge/run`, the feedback route and both MCP tools (`app.py`); `hayhooks
run` can deploy this folder as it is.

hayhooks imports this file by path; the repository root must be on `sys.path` (`knowledge serve`
runs from it, or pass `--additional-python-path` to `hayhooks run`).
"""

import logging

from fastapi import HTTPException
from hayhooks import BasePipelineWrapper
from pydantic import StrictStr

from components.contracts import STATUS_ERROR, InvalidQueryError
from pipelines.labels.record import UnknownInvocationError
from pipelines.serving.feedback import give_feedback
from pipelines.serving.models import FeedbackResponse, LookupResponse
from pipelines.serving.service import shared_service

logger = logging.getLogger(__name__)


class PipelineWrapper(BasePipelineWrapper):
    """Owns the process's warmed LookupService; one call is one lookup and one trace row."""

    def setup(self) -> None:
        self.service = shared_service()
        self.pipeline = self.service.pipeline

    def run_api(self, query: StrictStr) -> LookupResponse:
        """
        Look up the operations knowledge base (runbooks) for a question or alert text and return evidence.

        :param query: The question or alert text to look up, in the user's words.
        :returns: The evidence-first result: found, evidenceBlocks, contextPack, traces, invocationId.
        """
        try:
            result = self.service.lookup(query)
        except InvalidQueryError as exc:
            raise HTTPException(status_code=422, detail={"error": "invalid_query", "detail": str(exc)}) from exc
        body = result.to_dict()
        if result.evidence_status == STATUS_ERROR:
            logger.warning("lookup failed (invocation %s): %s", result.invocation_id, result.message)
            raise HTTPException(status_code=503, detail=body)
        return LookupResponse.model_validate(body)

    def feedback(self, invocation_id: str, useful: bool, source: str | None, origin: str) -> FeedbackResponse:
        """
        An agent's verdict on a lookup it made, as a label of that lookup (`origin`: rest or mcp).
        404 for an unknown invocation, 422 for a label that cannot be (a source not in the index).
        """
        try:
            label = give_feedback(self.service, invocation_id, useful, source, origin)
        except UnknownInvocationError as exc:
            raise HTTPException(404, detail={"error": "unknown_invocation", "detail": str(exc)}) from exc
        except ValueError as exc:  # a bad label (a source not in the index): the reason is the detail
            raise HTTPException(422, detail={"error": "invalid_feedback", "detail": str(exc)}) from exc
        return FeedbackResponse(**label)
