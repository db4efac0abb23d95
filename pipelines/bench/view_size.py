"""
What one `lookup_knowledge` result costs the calling agent, per view: the full result and the agent
view (`view=agent`), measured over the queries of an eval set as JSON characters and as tokens of
the embedding model's tokenizer (a WordPiece proxy: an LLM's own tokenizer counts differently).

    python -m pipelines.bench.view_size --queries eval/sample-kb.jsonl [key=value ...]
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from components.common.embedding_models import count_tokens
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService, build_lookup_pipeline
from pipelines.serving.views import VIEWS, agent_view


def read_queries(path: Path) -> list[str]:
    """The `query` of each JSONL line of an eval set."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()]


def measure(cfg, queries: list[str]) -> dict[str, dict[str, list[int]]]:
    """Characters and tokens of each view's compact JSON, per query (not recorded as tool calls)."""
    service = LookupService(cfg, pipeline=build_lookup_pipeline(cfg, record=False))
    sizes: dict[str, dict[str, list[int]]] = {view: {"chars": [], "tokens": []} for view in VIEWS}
    for query in queries:
        full = service.lookup(query).to_dict()
        for view, shown in (("full", full), ("agent", agent_view(full))):
            text = json.dumps(shown, ensure_ascii=False)
            sizes[view]["chars"].append(len(text))
            sizes[view]["tokens"].append(count_tokens(cfg.embedder.model, text))
    return sizes


def format_sizes(sizes: dict[str, dict[str, list[int]]], label: str, queries: int, model: str) -> str:
    lines = [f"result size per lookup over {queries} queries of {label} (compact JSON; tokens: {model} WordPiece)"]
    for view, measured in sizes.items():
        tokens, chars = measured["tokens"], measured["chars"]
        lines.append(
            f"  view={view:5s}  tokens mean {statistics.mean(tokens):.0f}, median {statistics.median(tokens):.0f}, "
            f"max {max(tokens)}; characters mean {statistics.mean(chars):.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--queries", required=True, type=Path, help="an eval set (JSONL with a query field)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    cfg = load_config(args.overrides)
    queries = read_queries(args.queries)
    print(format_sizes(measure(cfg, queries), str(args.queries), len(queries), cfg.embedder.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
