"""What every command shares: the usage error, the parser conventions, config loading, input checks."""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from components.errors import EXIT_OK, BadInputError

EPILOG = """\
Configuration: any key of conf/ can be overridden after the arguments, for example
  knowledge lookup "disk almost full" retrieval.top_k=30 retrieval.reference_threshold=0.6
  knowledge index --kb ~/runbooks milvus.uri=/tmp/kb.db
  knowledge lookup "cert expiry" mlflow=off trace=postgres
Exit status: 0 success (found=false is a success), 2 bad input or config, 1 failure.
"""


class UsageError(BadInputError):
    """Bad command-line input (exit status 2)."""


def command_parser(sub, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    """A (sub)command whose help ends with the configuration and exit-status epilog."""
    return sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """The Hydra overrides every command takes after its arguments."""
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")


def add_print_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cfg", action="store_true", help="print the composed config (YAML) and exit")


def check_overrides(overrides: Sequence[str]) -> None:
    for override in overrides:
        if "=" not in override:
            raise UsageError(f"unexpected argument {override!r}: overrides look like key=value")


def load(overrides: Sequence[str], extra: Sequence[str] = (), torch_free: bool = False, components: bool = True):
    """
    The composed config, its component keys checked by the components that take them (their
    pipelines are built, not warmed up); a stray word among the overrides is a usage error.

    :param torch_free: The process embeds only with the configured backend (a lookup, a server, a
        printed config): with an ONNX backend torch is kept out, before the check loads Haystack.
    :param components: False for a command that builds no pipeline (reading traces or labels): it
        reads no component key, so it does not pay for importing the components to check them.
    """
    from components.common.embedding_models import keep_torch_out
    from pipelines.config.settings import load_config

    check_overrides(overrides)
    cfg = load_config([*extra, *overrides])
    if torch_free and components:
        keep_torch_out(cfg.embedder.backend)
    if components:
        from pipelines.serialized import check_pipelines  # after keep_torch_out: it imports Haystack

        check_pipelines(cfg)
    note_model_verdict(cfg)
    return cfg


_noted: set[str] = set()


def note_model_verdict(cfg) -> None:
    """One stderr line per process for a model folder adapt did not recommend: it is used, as asked, but not silently."""
    from pipelines.config.model_calibration import adapt_verdict

    verdict = adapt_verdict(cfg)
    model = str(cfg.embedder.model)
    if verdict and model not in _noted:
        _noted.add(model)
        print(f"note: embedder.model {model} was judged by `knowledge adapt`: {verdict}", file=sys.stderr)


def lookup_config(overrides: Sequence[str]):
    """The config of a lookup or serve process; with an ONNX backend, torch is kept out before Haystack loads."""
    return load(overrides, torch_free=True)


def print_config(overrides: Sequence[str]) -> int:
    """The composed config as YAML, secrets masked (`--cfg`)."""
    from omegaconf import OmegaConf

    from pipelines.config.model_calibration import adapt_verdict
    from pipelines.config.settings import mask_secrets

    cfg = load(overrides, torch_free=True)
    print(OmegaConf.to_yaml(mask_secrets(cfg)), end="")
    verdict = adapt_verdict(cfg)
    if verdict:
        print(f"# embedder.model {cfg.embedder.model}: {verdict} (knowledge adapt's verdict)")
    return EXIT_OK


def check_writable(path: str | None) -> None:
    """An output file (when given) that can be written: a bad path fails before the work, not after it."""
    if not path:
        return
    target = Path(path).resolve()
    if target.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder, give a file name")
    if not target.parent.is_dir():
        raise UsageError(f"cannot write {path}: its folder does not exist")
    if not os.access(target if target.exists() else target.parent, os.W_OK):  # EROFS too, even for root
        where = path if target.exists() else f"its folder {target.parent}"
        raise UsageError(f"cannot write {path}: {where} is read-only")


def check_port(port: int | None) -> None:
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"--port {port} is not a TCP port (1-65535)")
