"""
Pydantic models of the HTTP contract: the `lookup_knowledge` result as OpenAPI describes it.

Keys follow `LookupResult.to_dict()`; nested traces stay open objects. Keys a result does not
carry (e.g. `message` on a found result) are left out of the JSON, as in `knowledge lookup`.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer


class _SameKeys(BaseModel):
    """Serializes only the keys the result carried: no `null` for an absent optional key."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _only_given_keys(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        given = set(self.model_fields_set) | set(self.model_extra or {})
        return {key: value for key, value in data.items() if key in given}


class EvidenceBlockModel(_SameKeys):
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


class ContextPackModel(_SameKeys):
    text: str = Field(description="Evidence packed under the token budget, with source headers")
    budgetTokens: int | None = None
    usedTokens: int | None = None
    includedSources: list[str] = Field(default_factory=list)
    omittedSources: list[str] = Field(default_factory=list)
    truncated: bool | None = None


class LookupResponse(_SameKeys):
    """The evidence-first result of one lookup_knowledge call (`knowledge lookup` prints the same JSON)."""

    found: bool = Field(description="True when the knowledge base holds evidence for the query")
    evidenceStatus: str = Field(description="evidence, no_evidence, or error when the lookup failed")
    message: str | None = Field(default=None, description="Why nothing was found, or what failed")
    retrievalLayer: str | None = None
    evidenceBlocks: list[EvidenceBlockModel] = Field(default_factory=list)
    contextPack: ContextPackModel | None = None
    retrievalTrace: dict[str, Any] | None = None
    rerankTrace: list[dict[str, Any]] | None = None
    relevanceLevel: str | None = None
    completenessHint: str | None = None
    queryTransform: dict[str, Any] | None = None
    l0Hints: dict[str, Any] | None = None
    sidecar: dict[str, Any] | None = None
    error: dict[str, Any] | None = Field(default=None, description="type, message, component of a failed lookup")
    invocationId: str | None = Field(default=None, description="Id of the tool_invocation trace row")
    traceStatus: str | None = None

    def __str__(self) -> str:
        # hayhooks' MCP transport sends str(result) as the tool's text content: make that the JSON.
        return self.model_dump_json()


class ErrorResponse(BaseModel):
    """A request the server refused: `error` is a short code, `detail` the reason."""

    error: str
    detail: str
