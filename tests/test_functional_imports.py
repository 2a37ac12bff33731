"""The functional home imports without a cycle (issue 30): read from the source with ``ast``.

The modules under test are ``evonorm_core/functional.py``, ``formulas.py``, ``statistics.py``,
``running_stats.py`` and every module of ``evonorm_core/ops/`` and ``evonorm_core/layers/``.
Every import counts, function-local ones included, so a cycle cannot hide in a function.
"""
from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "evonorm_core"
FILES = [CORE / name for name in ("functional.py", "formulas.py", "statistics.py", "running_stats.py")]
FILES += sorted((CORE / "ops").glob("*.py")) + sorted((CORE / "layers").glob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in FILES}


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """The modules an import statement of module ``importer`` loads (``from . import x``: ``x`` if a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    names = [f"{source}.{alias.name}" for alias in node.names]
    return [name if _is_module(name) else source for name in names]


def imports(importer: str) -> list[tuple[str, bool]]:
    """``(imported module, function-local)`` for every import in ``importer``'s source, among :data:`MODULES`."""
    tree = ast.parse(MODULES[importer].read_text(), filename=str(MODULES[importer]))
    found = []

    def visit(node: ast.AST, local: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.extend((name, local) for name in _imported(node, importer) if name in MODULES and name != importer)
        inner = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


GRAPH = {importer: sorted({name for name, _ in imports(importer)}) for importer in MODULES}


def test_the_files_under_test_are_found():
    assert {"evonorm_core.functional", "evonorm_core.formulas", "evonorm_core.ops", "evonorm_core.ops.library",
            "evonorm_core.ops.extension", "evonorm_core.layers.base"} <= set(MODULES)
    assert "evonorm_core.ops" in GRAPH["evonorm_core.functional"]  # the resolution sees the arrows there are


def test_the_import_graph_has_no_cycle():
    try:
        tuple(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"import cycle: {' -> '.join(err.args[1])}")


# function-local imports allowed, each with its reason (the cycle test above still sees them)
LAZY_IMPORTS = {
    ("evonorm_core.ops", "evonorm_core.ops.triton_kernels"):
        "imports Triton, which importing evonorm_core must not load (test_architecture.py); loaded at the first "
        "CUDA call",
}


@pytest.mark.parametrize("importer", sorted(MODULES))
def test_no_function_local_imports_among_them(importer):
    assert [name for name, local in imports(importer) if local and (importer, name) not in LAZY_IMPORTS] == []


def test_the_allowed_lazy_imports_are_still_lazy():
    for importer, name in LAZY_IMPORTS:
        assert (name, True) in imports(importer) and (name, False) not in imports(importer), (importer, name)


def test_the_formulas_sit_below_the_functionals_and_the_operators():
    assert set(GRAPH["evonorm_core.formulas"]) <= {"evonorm_core.statistics"}
    ops = [name for name in MODULES if name.startswith("evonorm_core.ops")]
    assert not any("evonorm_core.functional" in GRAPH[name] for name in ops)
