"""The package's layering, read from the source: no import circle, and no arrow from the logic up into Dagster.

Every ``import`` and ``from ... import`` of every module counts, function-local ones included (a
local import that would make a circle only hides it from the interpreter, not from a reader);
imports under ``if TYPE_CHECKING:`` do not (they never run). ``from a.b import c`` is an edge to
``a.b.c`` when that is a module, else to ``a.b``. The parent packages an import implies are left out
(their ``__init__`` files hold no logic).

Layers: ``definitions``, ``defs`` (the assets), ``resources`` (Dagster resources), ``cli`` and
``bench`` (which drive the assets) sit above. Everything else (corpus, llm, multihop, rag_sft,
long_context, recall, release, sources, recipes, storage...) is plain logic: it imports no module of
those layers and no Dagster.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import ragsft_assets

PACKAGE = "ragsft_assets"
ROOT = Path(ragsft_assets.__file__).resolve().parent
# The Dagster layer and what drives it; every other module of the package is Dagster-free logic.
ABOVE = ("definitions", "defs", "resources", "cli", "bench")


def module_files(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (its file, whether it is a package's ``__init__``), for every module under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _under_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, at any depth (functions included), but not under TYPE_CHECKING."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if _under_type_checking(child):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            stack.append(child)


def imported_names(path: Path, module: str, is_package: bool, modules: Collection[str] = ()) -> set[str]:
    """The dotted names a module imports, absolute. ``from a import b`` gives ``a.b`` when that is one of
    ``modules``, else ``a`` (``b`` is a name defined in ``a``)."""
    here = module if is_package else module.rpartition(".")[0]
    names = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            parts = here.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
        for alias in node.names:
            name = f"{base}.{alias.name}"
            names.add(name if name in modules else base)
    return names


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (see the module docstring for what counts)."""
    modules = module_files(root, package)
    return {
        module: {n for n in imported_names(path, module, is_package, modules) if n in modules} - {module}
        for module, (path, is_package) in modules.items()
    }


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a circle (strongly
    connected components of more than one module), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        # Tarjan's algorithm, iteratively (no recursion limit on a deep chain of imports).
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return sorted(circles)


def _layer(module: str, package: str) -> str:
    return module.removeprefix(package + ".").split(".", 1)[0]


def upward_imports(root: Path, package: str) -> list[str]:
    """``a -> b`` for every import of a Dagster-free module into a layer above, or of Dagster itself."""
    graph = import_graph(root, package)
    out = []
    for module, targets in sorted(graph.items()):
        if module == package or _layer(module, package) in ABOVE:
            continue
        out += [f"{module} -> {t}" for t in sorted(targets) if _layer(t, package) in ABOVE]
        path, is_package = module_files(root, package)[module]
        out += [
            f"{module} -> {name}"
            for name in sorted(imported_names(path, module, is_package))
            if name.split(".", 1)[0] == "dagster" or name.startswith("dagster_")
        ]
    return out


def test_no_import_circle_in_the_package() -> None:
    circles = import_circles(import_graph(ROOT, PACKAGE))
    assert not circles, "modules that import each other (move the shared piece down):\n" + "\n".join(
        "  " + " <-> ".join(m.removeprefix(PACKAGE + ".") for m in c) for c in circles
    )


def test_the_logic_imports_nothing_above_it() -> None:
    upward = upward_imports(ROOT, PACKAGE)
    assert not upward, "Dagster-free modules importing the Dagster layer:\n" + "\n".join(
        "  " + u for u in upward
    )


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_scan_finds_circles_through_local_and_relative_imports(tmp_path: Path) -> None:
    """The checks above would pass on a scan that sees nothing: it must see each kind of import."""
    root = _write(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "a.py": "from pkg.b import f\n",
            "b.py": "def f():\n    from . import c\n",  # function-local and relative
            "c.py": "import pkg.a\n",
            "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
            "sub/__init__.py": "",
            "sub/x.py": "from ..sub import y\n",
            "sub/y.py": "from pkg.sub.x import thing\n",
            "e.py": "from pkg.sub import x\n",  # x a module of sub: an edge to pkg.sub.x, none to pkg.sub
        },
    )
    graph = import_graph(root, "pkg")
    assert graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == set() and graph["pkg.e"] == {"pkg.sub.x"}
    assert import_circles(graph) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.sub.x", "pkg.sub.y"]]
    del graph["pkg.c"]
    assert import_circles({m: t - {"pkg.c"} for m, t in graph.items()}) == [["pkg.sub.x", "pkg.sub.y"]]


def test_the_scan_finds_the_logic_importing_upward(tmp_path: Path) -> None:
    root = _write(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "defs/__init__.py": "",
            "defs/assets.py": "import dagster\nfrom pkg.corpus import rules\n",  # downward: fine
            "corpus/__init__.py": "",
            "corpus/rules.py": "def f():\n    from pkg.defs.assets import X\n",
            "corpus/clean.py": "import os\n",
            "release/card.py": "from dagster import asset\n",
        },
    )
    assert upward_imports(root, "pkg") == [
        "pkg.corpus.rules -> pkg.defs.assets",
        "pkg.release.card -> dagster",
    ]
