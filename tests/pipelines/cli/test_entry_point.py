"""The `knowledge` parser built from its command modules: every command, in order, without loading the pipelines."""

import subprocess
import sys

from pipelines.cli import entry_point as cli
from tests.helpers import REPO, child_env, run_cli

COMMANDS_IN_HELP_ORDER = [
    "index",
    "lookup",
    "serve",
    "eval",
    "adapt",
    "compare",
    "guard",
    "bench",
    "dev",
    "traces",
    "labels",
]
HEAVY_MODULES = ("haystack", "torch", "pymilvus", "omegaconf", "hydra", "mlflow")


def test_every_command_module_gives_its_parser_and_its_run():
    subparsers = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert list(subparsers.choices) == COMMANDS_IN_HELP_ORDER
    assert list(cli.COMMANDS) == COMMANDS_IN_HELP_ORDER
    assert all(callable(run) for run in cli.COMMANDS.values())


def test_python_m_pipelines_cli_runs_the_command_line():
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    listed = [line.split()[0] for line in result.stdout.splitlines() if line[:4].isspace() and not line[4].isspace()]
    assert listed == COMMANDS_IN_HELP_ORDER


def test_parsing_every_command_imports_no_pipeline():
    # `--help` and a bad argument must answer before any model, store or config library loads.
    script = (
        "import sys\n"
        "from pipelines.cli.entry_point import parse\n"
        "for argv in (['lookup', 'q'], ['eval', '--queries', 'f'], ['bench', 'all'], ['traces', 'show', 'x'],\n"
        "             ['traces', 'label', 'x', '--none'], ['labels', 'list']):\n"
        "    parse(argv)\n"
        f"print(' '.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
