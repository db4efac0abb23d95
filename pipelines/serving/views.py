"""
The two views of a lookup result and what each holds, in words an agent reads in the tool
description. Plain dicts only: the `knowledge lookup --url` client shows a view without importing
the pipeline stack (Haystack, Milvus, the model).
"""

from typing import Any

# `full` is the whole result (REST and CLI default); `agent` is what an agent quotes from.
VIEWS = ("full", "agent")

# The agent view, key by key, in its order: what each holds (the tool description is made of these).
AGENT_VIEW_KEYS: dict[str, str] = {
    "found": "true when the knowledge base holds evidence for the query",
    "evidenceStatus": "evidence, no_evidence or error",
    "message": "without evidence: why",
    "relevanceLevel": "high, medium, low or none",
    "completenessHint": "complete, partial, ambiguous, weak or none, then why",
    "context": "the packed evidence text to quote, each block headed by its source, score and why it matched",
    "citations": "one per evidence block: source, title, breadcrumb, score, scoreLabel",
    "contextTruncated": "true when the context budget cut a block",
    "error": "a failed call: type, message, component",
    "invocationId": "the recorded call, for `knowledge traces show`",
}
# The keys of the agent view taken as they are from the full result.
_COPIED_KEYS = ("found", "evidenceStatus", "message", "relevanceLevel", "completenessHint")
# The keys of one citation: where a packed block comes from and how strongly it matched.
_CITATION_KEYS = ("source", "title", "breadcrumb", "score", "scoreLabel")

# The full result (`LookupResult.to_dict()`, `view=full`), key by key: the decision keys as above, and the traces.
FULL_VIEW_KEYS: dict[str, str] = {
    **{
        key: AGENT_VIEW_KEYS[key]
        for key in ("found", "evidenceStatus", "message", "relevanceLevel", "completenessHint")
    },
    "retrievalLayer": "the layer that answered",
    "evidenceBlocks": "each block's source, title, breadcrumb, content, score, hitReasons",
    "contextPack": "the packed text with its budget and the sources included and omitted",
    "retrievalTrace": "every retrieval attempt with its filter, legs and fallback reason",
    "rerankTrace": "the rerank contributions",
    "queryTransform": "the query variants",
    "l0Hints": "the L0 hints that matched",
    "competition": "a document competing with the best one, when there is one",
    "sidecar": "the sidecar comparison, when enabled",
    "error": AGENT_VIEW_KEYS["error"],
    "invocationId": AGENT_VIEW_KEYS["invocationId"],
    "traceStatus": "whether the call's record was written or spooled",
}


def described(keys: dict[str, str]) -> str:
    """`key (what it holds), ...`: the form the tool descriptions list a view's keys in."""
    return ", ".join(f"{key} ({text})" for key, text in keys.items())


def agent_view(result: dict[str, Any]) -> dict[str, Any]:
    """
    The slim result for an agent (`view=agent`): the decision, the packed context to quote and one
    citation per evidence block, without the retrieval and rerank traces or a second copy of the
    evidence text. The trace row of the call keeps everything.

    Usage example:

    ```python
    agent_view(service.lookup("disk almost full").to_dict())["context"]  # the text to quote
    ```
    """
    view = {key: result[key] for key in _COPIED_KEYS if key in result}
    pack = result.get("contextPack") or {}
    view["context"] = pack.get("text", "")
    view["citations"] = [
        {key: block[key] for key in _CITATION_KEYS if block.get(key) is not None}
        for block in result.get("evidenceBlocks") or []
    ]
    if pack.get("truncated"):
        view["contextTruncated"] = True
    if "error" in result:
        view["error"] = result["error"]
    view["invocationId"] = result.get("invocationId")
    return view


def shown(result: dict[str, Any], view: str) -> dict[str, Any]:
    """The result as a view shows it: the full result, or the agent view (packed context and citations)."""
    return result if view == "full" else agent_view(result)
