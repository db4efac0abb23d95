"""The top-level `components` package: another distribution's package of that name fails loudly at import."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def import_pipelines(*path_first: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, path_first), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-c", "import pipelines"], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )


def test_another_distributions_components_package_fails_at_import_naming_it(tmp_path):
    other = tmp_path / "components"
    other.mkdir()
    (other / "__init__.py").write_text('"""Someone else\'s UI widgets."""\n', encoding="utf-8")
    run = import_pipelines(tmp_path, cwd=tmp_path)  # not the checkout: `-c` puts the folder first
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the package 'components' imported from ")
    assert str(other) in last and "is not lookup-knowledge's" in last


def test_the_projects_own_components_package_imports():
    run = import_pipelines()
    assert run.returncode == 0, run.stderr
