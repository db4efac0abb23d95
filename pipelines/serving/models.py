"""
Pydantic models of the HTTP contract: the `lookup_knowledge` result as OpenAPI describes it, and
the feedback an agent gives on it.

Keys follow `LookupResult.to_dict()`; nested traces stay open objects. Keys a result does not
carry (e.g. `message` on a found result) are left out of the JSON, as in `knowledge lookup`.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from pipelines.serving.views import agent_view


def _absent(value: Any) -> bool:
    return value is None


def omitted_if_none(description: str | None = None) -> Any:
    """A key `to_dict()` leaves out when it has no value: left out of the JSON too."""
    return Field(default=None, description=description, exclude_if=_absent)


class EvidenceBlockModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    evidenceKey: str = Field(description="Stable chunk identity (hash of source, breadcrumb, text)")
    source: str = Field(description="Knowledge base path of the document")
    title: str | None = None
    breadcrumb: str | None = Field(default=None, description="H1 > H2 > H3 of the chunk")
    category: str | None = None
    retrievalLayer: str | None = None
    score: float | None = Field(default=None, description="Normalized similarity in [0, 1]")
    scoreLabel: str | None = None
    rawScore: float | None = None
    rawScoreLabel: str | None = None
    rerankScore: float | None = None
    content: str = Field(description="The chunk text: the evidence to quote")
    hitReasons: list[str] = Field(default_factory=list, description="Why this chunk was retrieved and ranked")


class ContextPackModel(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str = Field(description="Evidence packed under the token budget, with source headers")
    budgetTokens: int | None = None
    usedTokens: int | None = None
    includedSources: list[str] = Field(default_factory=list)
    omittedSources: list[str] = Field(default_factory=list)
    truncated: bool | None = None


class LookupResponse(BaseModel):
    """The evidence-first result of one lookup_knowledge call (`knowledge lookup` prints the same JSON)."""

    model_config = ConfigDict(extra="allow")

    found: bool = Field(description="True when the knowledge base holds evidence for the query")
    evidenceStatus: str = Field(description="evidence, no_evidence, or error when the lookup failed")
    message: str | None = omitted_if_none("Why nothing was found, or what failed")
    retrievalLayer: str | None = omitted_if_none()
    evidenceBlocks: list[EvidenceBlockModel] = Field(default_factory=list)
    contextPack: ContextPackModel | None = omitted_if_none()
    retrievalTrace: dict[str, Any] | None = omitted_if_none()
    rerankTrace: list[dict[str, Any]] | None = omitted_if_none()
    relevanceLevel: str | None = omitted_if_none()
    completenessHint: str | None = omitted_if_none()
    queryTransform: dict[str, Any] | None = omitted_if_none()
    l0Hints: dict[str, Any] | None = omitted_if_none()
    sidecar: dict[str, Any] | None = omitted_if_none()
    competition: dict[str, Any] | None = omitted_if_none(
        "Another document close to the best one: leader, competitor, margin, reasons, evidenceKey"
    )
    error: dict[str, Any] | None = omitted_if_none("type, message, component of a failed lookup")
    invocationId: str | None = Field(default=None, description="Id of the tool_invocation trace row")
    traceStatus: str | None = omitted_if_none()

    def __str__(self) -> str:
        # hayhooks' MCP transport sends str(result) as the tool's text content: make that the JSON.
        return self.model_dump_json()

    def shown(self, view: str) -> dict[str, Any]:
        """The result as JSON data in `view`: `full`, the whole record, or `agent` (`pipelines/serving/views.py`)."""
        body = self.model_dump(mode="json")
        return agent_view(body) if view == "agent" else body


class FeedbackRequest(BaseModel):
    """An agent's verdict on one lookup it made (`POST /lookup_knowledge/feedback`)."""

    model_config = ConfigDict(extra="forbid")

    invocationId: StrictStr = Field(description="The invocationId of the lookup's result")
    useful: StrictBool = Field(description="Whether the answer (or the named source) helped")
    source: StrictStr | None = Field(
        default=None, description="The source that helped (or did not), KB-relative as cited; default: the best one"
    )


class FeedbackResponse(BaseModel):
    """The label the feedback became."""

    labelId: str
    invocationId: str
    verdict: str = Field(description="useful or not_useful")
    sources: list[str] = Field(description="The source(s) the verdict is about")
    traceStatus: str = Field(description="recorded, or spooled while the trace database is away")


class StatusResponse(BaseModel):
    """`GET /status`: the server is up, and the pipeline it serves."""

    status: str = Field(description="Up! while the server answers")
    pipelines: list[str]


class PipelineStatusResponse(BaseModel):
    """`GET /status/{pipeline_name}` of the served pipeline (any other name: 404)."""

    status: str = Field(description="Up! while the server answers")
    pipeline: str
