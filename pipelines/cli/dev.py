"""`knowledge dev milvus-server`: a local Milvus standalone server for development, until Ctrl+C."""

import argparse
from pathlib import Path

from components.errors import KnowledgeFailure
from pipelines.cli.common import check_port, command_parser

NAME = "dev"


def add_parser(sub) -> None:
    dev = command_parser(
        sub,
        NAME,
        help="development helpers: a local Milvus standalone server",
        description="`knowledge dev milvus-server` runs a Milvus 2.3 standalone server (PyPI `milvus`) on "
        "loopback until Ctrl+C, its data in --data-dir; use it with milvus=server milvus.uri=http://127.0.0.1:PORT.",
    )
    helpers = dev.add_subparsers(dest="dev", metavar="HELPER", required=True)
    server = helpers.add_parser("milvus-server", help="a Milvus standalone server on 127.0.0.1 until Ctrl+C")
    server.add_argument(
        "--data-dir", default=".knowledge/milvus-server", help="where its data lives (kept between runs)"
    )
    server.add_argument("--port", type=int, default=19530, help="port (default 19530, as conf/milvus/server.yaml)")


def run(args: argparse.Namespace) -> int:
    from pipelines.dev.milvus_server import MilvusServerUnavailableError, serve_until_interrupted

    check_port(args.port)
    try:
        return serve_until_interrupted(Path(args.data_dir), args.port)
    except MilvusServerUnavailableError as exc:
        raise KnowledgeFailure(str(exc)) from exc
