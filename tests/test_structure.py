"""scripts/check_structure.py: modules over the line limit and import cycles are found, also hidden ones."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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


def test_the_project_has_no_import_cycle_and_no_module_over_the_limit(capsys):
    assert check_structure.main([]) == 0, capsys.readouterr().out


def test_what_a_pip_build_leaves_in_the_checkout_is_ignored_by_git():
    """`pip install .` (or a wheel build) writes build/ and *.egg-info/ into the checkout: neither may show as untracked."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for left_by_a_build in ("build/lib/pipelines/__init__.py", "lookup_knowledge.egg-info/PKG-INFO"):
        checked = subprocess.run(["git", "check-ignore", "-q", left_by_a_build], cwd=ROOT, check=False)
        assert checked.returncode == 0, f"{left_by_a_build} is not ignored by .gitignore"
