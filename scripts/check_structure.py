"""
Structure checks that ruff does not make: no module of the project over MAX_LINES lines, no
import cycle between its modules, no upward import (a component importing `pipelines`, a module
outside the CLI importing `pipelines.cli`, the top) and no import of a package's private modules
(PUBLIC_API_ONLY). Every import counts, also one inside a function or under `TYPE_CHECKING`: such
an import hides a cycle, it does not remove it.

Usage: python scripts/check_structure.py [PACKAGE_DIR ...]   (default: components pipelines)
Exit status 1 and one line per finding when something is wrong.
"""

import ast
import importlib
import sys
from pathlib import Path

MAX_LINES = 450
PACKAGES = ("components", "pipelines")
# (importer's package, imported package): the importer sits below what it imports. The CLI's own
# modules are not below it.
UPWARD = (("components", "pipelines"), ("pipelines", "pipelines.cli"))
# Packages whose API is what the top-level package exports: their submodules change between
# releases without notice, so an import of one could break the project on an upgrade.
PUBLIC_API_ONLY = ("hayhooks",)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """The dotted names a module imports (`from a import b` gives `a.b` and `a`; resolved later)."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def exported(package: str) -> set[str] | None:
    """The names `package` exports (`__all__`); None when it is not installed here."""
    try:
        return set(importlib.import_module(package).__all__)
    except ImportError:
        return None


def private_imports(tree: ast.AST, packages: tuple[str, ...] = PUBLIC_API_ONLY) -> list[str]:
    """
    The imports of `packages` other than their exported names, as `line N: name`: a submodule
    (`import hayhooks.settings`, `from hayhooks.server.app import x`) or a name the package does
    not export (`from hayhooks import settings` imports the submodule too).
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in packages:
            public = exported(node.module)
            names = [f"{node.module}.{a.name}" for a in node.names if public is not None and a.name not in public]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names if "." in name and name.split(".")[0] in packages]
    return found


def graph(root: Path, packages: tuple[str, ...]) -> tuple[dict[str, set[str]], dict[str, Path]]:
    paths = {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    edges: dict[str, set[str]] = {}
    for name, path in paths.items():
        names = imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py")
        # `from a import b`: the module a.b when there is one, else a itself.
        targets = {n for n in names if n in paths}
        edges[name] = {t for t in targets if t != name and not any(o.startswith(t + ".") for o in targets)}
    return edges, paths


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward_imports(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a package above the importer's (UPWARD)."""
    return sorted(
        (name, target)
        for name, targets in edges.items()
        for target in targets
        for low, high in UPWARD
        if within(name, low) and not within(name, high) and within(target, high)
    )


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    packages = tuple(argv) or PACKAGES
    edges, paths = graph(root, packages)
    problems = []
    for path in sorted(paths.values()):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            problems.append(f"{path.relative_to(root)}: {lines} lines; the limit is {MAX_LINES}")
    problems += [f"import cycle: {' <-> '.join(cycle)}" for cycle in cycles(edges)]
    problems += [f"upward import: {name} imports {target}" for name, target in upward_imports(edges)]
    for path in sorted(paths.values()):
        private = private_imports(ast.parse(path.read_text(encoding="utf-8")))
        problems += [
            f"{path.relative_to(root)}: {where} is private: import what the package exports" for where in private
        ]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
