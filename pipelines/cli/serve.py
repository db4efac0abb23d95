"""`knowledge serve`: lookup_knowledge over HTTP (REST) or MCP, on loopback unless a key guards it."""

import argparse

from components.errors import EXIT_OK
from pipelines.cli.common import (
    add_overrides,
    add_print_config,
    check_port,
    command_parser,
    lookup_config,
    print_config,
)

NAME = "serve"


def add_parser(sub) -> None:
    parser = command_parser(
        sub,
        NAME,
        help="serve lookup_knowledge over HTTP (REST) or, with --mcp, over MCP",
        description="Serve POST /lookup_knowledge/run and GET /health (REST, default port serve.port=1416), or "
        "the MCP tool lookup_knowledge at /mcp and /sse (--mcp, serve.mcp_port=1417). Binds to 127.0.0.1; "
        "any other address needs an API key (KNOWLEDGE_API_KEY or serve.api_key).",
    )
    parser.add_argument("--host", help="address to bind (default serve.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default serve.port, or serve.mcp_port with --mcp)")
    parser.add_argument("--mcp", action="store_true", help="serve the MCP tool instead of the REST endpoint")
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes sharing the port (default serve.workers, 1); above 1 needs milvus=server",
    )
    add_print_config(parser)
    add_overrides(parser)


def run(args: argparse.Namespace) -> int:
    check_port(args.port)
    if args.cfg:
        return print_config(args.overrides)
    overrides = list(args.overrides)
    if args.host:  # into the config: each worker rebuilds it from the overrides, and answers to the bound host
        overrides.append(f"serve.host={args.host}")
    cfg = lookup_config(overrides)
    from pipelines.serving.bind import check_bind, check_workers, resolve_api_key

    host = cfg.serve.host
    workers = args.workers if args.workers is not None else cfg.serve.workers
    check_bind(host, resolve_api_key(cfg))  # before the slow imports and long before binding
    check_workers(cfg, workers, args.mcp)

    from pipelines.serving.app import serve

    port = args.port if args.port is not None else cfg.serve.mcp_port if args.mcp else cfg.serve.port
    serve(cfg, overrides, host=host, port=port, mcp=args.mcp, workers=workers)
    return EXIT_OK
