"""`knowledge dev milvus-server`: a local Milvus server for development, until Ctrl+C."""

import argparse
from pathlib import Path

from components.errors import BadInputError, KnowledgeFailure
from pipelines.cli.common import check_port, command_parser

NAME = "dev"


def add_parser(sub) -> None:
    dev = command_parser(
        sub,
        NAME,
        help="development helpers: a local Milvus server",
        description="`knowledge dev milvus-server` runs a Milvus server on loopback until Ctrl+C, its data in "
        "--data-dir: the Milvus 2.3 standalone (PyPI `milvus`, dense leg only) or, with --engine lite, the Milvus "
        "Lite gRPC server (dense and BM25 legs, one process). Use it with milvus=server "
        "milvus.uri=http://127.0.0.1:PORT (and milvus.full_text=true on the Lite server).",
    )
    helpers = dev.add_subparsers(dest="dev", metavar="HELPER", required=True)
    server = helpers.add_parser("milvus-server", help="a Milvus server on 127.0.0.1 until Ctrl+C")
    server.add_argument(
        "--data-dir", default=".knowledge/milvus-server", help="where its data lives (kept between runs; one server)"
    )
    server.add_argument("--port", type=int, default=19530, help="port (default 19530, as conf/milvus/server.yaml)")
    server.add_argument(
        "--engine",
        choices=("standalone", "lite"),
        default="standalone",
        help="standalone: Milvus 2.3 (no BM25); lite: the Milvus Lite gRPC server with BM25 (default standalone)",
    )


def run(args: argparse.Namespace) -> int:
    from pipelines.dev.foreground import serve_until_interrupted
    from pipelines.dev.milvus_server import MilvusServerUnavailableError

    check_port(args.port)
    try:
        return serve_until_interrupted(Path(args.data_dir), args.port, args.engine)
    except MilvusServerUnavailableError as exc:
        if isinstance(exc, BadInputError):
            raise  # a busy data folder or port, a data folder that is a file: exit 2
        raise KnowledgeFailure(str(exc)) from exc
