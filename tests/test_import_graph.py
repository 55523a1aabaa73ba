"""No import cycle among the modules of skillrise_gym and skillrise_train, counting imports inside functions
too (a lazy import hides a cycle from Python, not from a reader): the layers import one way (issue 27)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("skillrise_gym", "skillrise_train")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (`from package import submodule` counts as the
    submodule; `from package import name` as the package)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package
                base = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a non-module name: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by a depth-first search (each reported once, from its smallest name)."""
    found, seen = [], set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                key = tuple(path)
                if key not in seen:
                    seen.add(key)
                    found.append(path + [start])
            elif nxt > start and nxt not in path:
                walk(start, nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def project_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {name: imports_of(name, path, set(known)) for name, path in known.items()}
    # importing a module runs its package's __init__ first: a package that imports its own submodule is not
    # a cycle with it, so edges from a submodule to its own package(s) are left out
    return {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}


def test_no_import_cycles_among_the_project_modules():
    found = cycles(project_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graph = project_graph()
    assert "skillrise_train.credit" in graph["skillrise_train.algorithms"]  # it reads the imports it should
    assert "skillrise_gym.records" in graph["skillrise_train.samples"]
