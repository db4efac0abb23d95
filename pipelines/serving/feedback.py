"""
An agent's feedback on a lookup it made, as the served feedback route and MCP tool take it: one
label (origin `rest` or `mcp`) in the server's trace store (docs/tracing.md#labels).
"""

from typing import Any

from components.errors import BadInputError
from pipelines.labels.record import feedback_verdict, label_invocation

# Who an agent's label is by: the agent does not say who it is.
AGENT_REVIEWER = "agent"


class FeedbackUnavailableError(BadInputError):
    """The server records no traces (trace writer off): there is no store for labels."""


def give_feedback(service, invocation_id: str, useful: bool, source: str | None, origin: str) -> dict[str, Any]:
    """
    Write the label of one feedback call and describe it.

    :raises UnknownInvocationError: No such lookup was recorded.
    :raises BadLabelError: The source is not in the index.
    """
    writer = service.trace_writer
    if writer is None:
        raise FeedbackUnavailableError("this server records no lookups: feedback has nowhere to go")
    outcome = label_invocation(
        writer.store,
        service.cfg.l0.index_path,
        invocation_id,
        feedback_verdict(useful),
        [source] if source else [],
        AGENT_REVIEWER,
        origin,
    )
    label = outcome.label
    return {
        "labelId": label["id"],
        "invocationId": label["invocation_id"],
        "verdict": label["verdict"],
        "sources": label["sources"],
        "traceStatus": outcome.status,
    }
