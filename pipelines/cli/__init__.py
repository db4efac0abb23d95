"""
The `knowledge` command line: one thin entry point over the pipelines, one module per command.

    knowledge index [--kb DIR] [--rebuild] [--status] [key=value ...]
    knowledge lookup "QUERY" [key=value ...]
    knowledge lookup --batch FILE [key=value ...]
    knowledge lookup --url http://127.0.0.1:1416 "QUERY"
    knowledge serve [--host H] [--port P] [--mcp] [--workers N] [key=value ...]
    knowledge eval --queries FILE [--queries FILE ...] [--guard FILE] [-m] [--search NAME --trials N]
                   [--constraint SPEC] [--study NAME --resume] [key=value ...]
    knowledge eval|lookup|serve --cfg [key=value ...]
    knowledge compare --queries FILE [--top-k K] [--json] [key=value ...]
    knowledge compare --a "k=v ..." --b "k=v ..." --queries FILE [--report FILE] [--json] [key=value ...]
    knowledge adapt [--kb DIR] [--epochs N] [--output DIR] [--seed S] [key=value ...]
    knowledge bench index|lookup|serve|backends|all [options] [key=value ...]
    knowledge traces list [--last N] [--status ok|error] [key=value ...]
    knowledge traces show ID [--json] [key=value ...]
    knowledge traces label ID --source PATH [--source PATH] | --none | --off-topic [--reviewer NAME] [key=value ...]
    knowledge traces export [--format jsonl] [--output FILE] [key=value ...]
    knowledge traces replay [key=value ...]
    knowledge traces rerun [--since DATE] [--last N] [--json] [key=value ...]
    knowledge labels list [--last N] | export --out DIR | pull [--since DATE] | import FILE [--reviewer NAME]
    knowledge dev milvus-server [--data-dir DIR] [--port P] [--engine standalone|lite]

Hydra overrides go after the arguments. Exit status: 0 on success (found=false included),
2 on bad input or configuration, 1 on any other failure; errors are one line on stderr.

Each command module holds its parser (`add_parser`) and its work (`run`); they import the
pipelines inside `run`, so `--help` and a bad argument answer before any model or store loads.
"""

import os

# Set before any module below imports Haystack or the Hugging Face hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
# Model-loading bars of transformers are noise on every call; the indexing bar is our own.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from pipelines.cli.common import UsageError
from pipelines.cli.entry_point import main

__all__ = ["UsageError", "main"]
