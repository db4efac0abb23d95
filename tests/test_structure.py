"""
scripts/check_structure.py: modules over the line limit, import cycles (also hidden ones), upward
imports and private imports are found; the top level of pipelines/ holds only the pipelines and the wings.
"""

import ast
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The top level of pipelines/: the pipelines and their loader; everything else lives in a wing (a subpackage).
PIPELINE_MODULES = {"__init__.py", "lookup.py", "indexing.py", "serialized.py"}
# Folders of pipelines/ that hold data, not code: the YAML pipelines and the link to conf/.
DATA_FOLDERS = {"yaml", "conf"}
SPEC = importlib.util.spec_from_file_location("check_structure", ROOT / "scripts" / "check_structure.py")
check_structure = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(check_structure)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_cycle_held_by_an_import_inside_a_function_is_found(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import thing\n",
            "pkg/b.py": "def thing():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "import pkg.a\n",
        },
    )
    edges, _ = check_structure.graph(tmp_path, ("pkg",))
    assert check_structure.cycles(edges) == [["pkg.a", "pkg.b"]]


def test_a_cycle_under_type_checking_and_a_relative_import_is_found(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
            "pkg/b.py": "from . import a\n",
        },
    )
    edges, _ = check_structure.graph(tmp_path, ("pkg",))
    assert check_structure.cycles(edges) == [["pkg.a", "pkg.b"]]


def test_an_acyclic_tree_has_no_cycle(tmp_path):
    write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n", "pkg/b.py": "import os\n"})
    edges, _ = check_structure.graph(tmp_path, ("pkg",))
    assert check_structure.cycles(edges) == []


def test_a_component_importing_pipelines_is_an_upward_import(tmp_path):
    write(
        tmp_path,
        {
            "components/__init__.py": "",
            "components/a.py": "def f():\n    from pipelines.b import thing\n    return thing\n",
            "pipelines/__init__.py": "",
            "pipelines/b.py": "import components.a\nthing = 1\n",
        },
    )
    edges, _ = check_structure.graph(tmp_path, ("components", "pipelines"))
    assert check_structure.upward_imports(edges) == [("components.a", "pipelines.b")]


def test_a_wing_or_pipeline_importing_the_cli_is_an_upward_import_and_the_cli_itself_is_not(tmp_path):
    write(
        tmp_path,
        {
            "pipelines/__init__.py": "",
            "pipelines/lookup.py": "import pipelines.cli\n",
            "pipelines/cli/__init__.py": "",
            "pipelines/cli/main.py": "from pipelines.cli.common import x\nfrom pipelines.serving import app\n",
            "pipelines/cli/common.py": "x = 1\n",
            "pipelines/serving/__init__.py": "",
            "pipelines/serving/app.py": "def f():\n    from pipelines.cli.main import x\n    return x\n",
        },
    )
    edges, _ = check_structure.graph(tmp_path, ("pipelines",))
    assert check_structure.upward_imports(edges) == [
        ("pipelines.lookup", "pipelines.cli"),
        ("pipelines.serving.app", "pipelines.cli.main"),
    ]


def test_the_top_level_of_pipelines_holds_only_the_pipelines_and_the_wings():
    top = [path for path in (ROOT / "pipelines").iterdir() if path.name != "__pycache__"]
    modules = {path.name for path in top if path.is_file()}
    folders = {path.name for path in top if path.is_dir()}
    not_wings = {name for name in folders - DATA_FOLDERS if not (ROOT / "pipelines" / name / "__init__.py").is_file()}
    assert modules == PIPELINE_MODULES, f"modules outside a wing: {sorted(modules - PIPELINE_MODULES)}"
    assert not not_wings, f"folders of pipelines/ that are neither a wing (a package) nor data: {sorted(not_wings)}"


@pytest.mark.parametrize(
    ("source", "private"),
    [
        ("from hayhooks.settings import settings\n", ["line 1: hayhooks.settings"]),
        ("def build():\n    import hayhooks.server.app\n", ["line 2: hayhooks.server.app"]),
        ("from hayhooks import create_app, settings\n", ["line 1: hayhooks.settings"]),
        ("from hayhooks import BasePipelineWrapper, create_app\nimport hayhooks\nfrom pkg.hayhooks import x\n", []),
    ],
)
def test_an_import_of_a_private_hayhooks_module_is_found(source, private):
    pytest.importorskip("hayhooks", reason="hayhooks (the serve extra) is not installed")
    assert check_structure.private_imports(ast.parse(source)) == private


def test_a_private_import_fails_the_check(tmp_path, monkeypatch, capsys):
    write(tmp_path, {"pkg/__init__.py": "", "pkg/app.py": "from hayhooks.server.utils import mcp_utils\n"})
    monkeypatch.setattr(check_structure, "__file__", str(tmp_path / "scripts" / "check_structure.py"))
    assert check_structure.main(["pkg"]) == 1
    assert (
        capsys.readouterr().out
        == "pkg/app.py: line 1: hayhooks.server.utils is private: import what the package exports\n"
    )


def test_no_module_under_pipelines_imports_a_private_hayhooks_module():
    found = {
        str(path.relative_to(ROOT)): private
        for path in sorted((ROOT / "pipelines").rglob("*.py"))
        if (private := check_structure.private_imports(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_the_project_has_no_import_cycle_no_upward_import_no_private_import_and_no_module_over_the_limit(capsys):
    assert check_structure.main([]) == 0, capsys.readouterr().out


def test_what_a_pip_build_leaves_in_the_checkout_is_ignored_by_git():
    """`pip install .` (or a wheel build) writes build/ and *.egg-info/ into the checkout: neither may show as untracked."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for left_by_a_build in ("build/lib/pipelines/__init__.py", "lookup_knowledge.egg-info/PKG-INFO"):
        checked = subprocess.run(["git", "check-ignore", "-q", left_by_a_build], cwd=ROOT, check=False)
        assert checked.returncode == 0, f"{left_by_a_build} is not ignored by .gitignore"
