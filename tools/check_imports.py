#!/usr/bin/env python3
"""Fail on an import cycle among voicespec's modules, or on runtime code importing training code.

Reads the source (``ast``), so it checks every import, lazy ones inside functions included, without
running anything; imports under ``if TYPE_CHECKING:`` (annotations only) do not count. Rules:

1. The module graph has no cycle (a package's ``__init__`` counts as its own module).
2. Runtime modules import nothing from the tools built on top of them: ``voicespec.train`` may be
   imported only by itself and ``voicespec.cli`` (the composition root that dispatches to the
   recipes); ``voicespec.bench`` only by itself, ``train`` and ``cli``.

Usage: ``python tools/check_imports.py [PACKAGE_DIR]`` (default: the repository's ``voicespec/``);
exit status 1 with one line per problem.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# tool sub-package -> the sub-packages that may import it
TOOLS = {"train": ("train", "cli"), "bench": ("bench", "train", "cli")}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` — imports for annotations only, never executed."""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's own modules that ``path`` imports (``from a import b`` counts ``a.b`` when it is a module)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t in modules and t != name:
                out.add(t)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def check(root: Path) -> list[str]:
    files = sorted(root.rglob("*.py"))
    modules = {module_name(f, root) for f in files}
    graph = {module_name(f, root): imports_of(f, module_name(f, root), modules) for f in files}
    top = root.name
    problems = []

    def inside(mod: str, sub: str) -> bool:
        return mod == f"{top}.{sub}" or mod.startswith(f"{top}.{sub}.")

    for mod, deps in sorted(graph.items()):
        for tool, allowed in TOOLS.items():
            if any(inside(mod, a) for a in allowed):
                continue
            for d in sorted(deps):
                if inside(d, tool):
                    kind = "training" if tool == "train" else tool
                    problems.append(f"runtime module {mod} imports {kind} module {d}")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("import cycle: " + " -> ".join(cycle))
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "voicespec"
    problems = check(root.resolve())
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
