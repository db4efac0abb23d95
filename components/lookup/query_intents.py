"""
What a query asks of its document, by the words it uses: a fix, a diagnosis, a meaning, an impact.
Read once per lookup by `QueryTransformer` (`QueryTransform.needed_sections`) and by `RuleReranker`
(its `section_match` signal).
"""

from components.common.text import fold

# What a query asks for, by words it uses; matched against the kind of a chunk's section.
_INTENTS: dict[str, tuple[str, ...]] = {
    "mitigation": (
        "fix",
        "resolve",
        "mitigate",
        "remediate",
        "solve",
        "recover",
        "workaround",
        "what to do",
        "how do i",
        "how to",
        "处理",
        "解决",
        "怎么办",
        "恢复",
    ),
    "diagnosis": (
        "why",
        "diagnose",
        "investigate",
        "debug",
        "root cause",
        "cause",
        "troubleshoot",
        "check",
        "原因",
        "排查",
        "诊断",
    ),
    "overview": ("what is", "what does", "meaning", "mean", "explain", "是什么", "含义"),
    "impact": ("impact", "affect", "consequence", "影响"),
}


def query_intents(query: str) -> set[str]:
    folded = fold(query)
    return {kind for kind, markers in _INTENTS.items() if any(marker in folded for marker in markers)}


# The sections a query needs of its document when it names no intent: an alert text or a bare
# symptom needs what to do about it.
DEFAULT_NEEDED_SECTIONS = frozenset({"mitigation"})


def needed_section_kinds(query: str) -> frozenset[str]:
    """The section kinds a query needs of its leading document: those it asks for, else the mitigation."""
    return frozenset(query_intents(query)) or DEFAULT_NEEDED_SECTIONS
