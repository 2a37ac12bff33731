"""The rooms and what may import what, read from the source with ``ast`` (every import, function-local
ones included, and every ``-m``-style module name in a string literal):

* the task packages (``search/``, ``gan/``, ``detection/``, ``classification/``, installed as
  ``evonorm_suite.<folder>``) are leaves: none imports another, and each imports itself by its
  absolute name (their entry modules run as files, ``python search/evolve.py``, where a relative
  import fails);
* the core (``evonorm_core/``) imports no task package;
* ``import evonorm_core`` needs nothing but torch (its classifier room, which needs torchvision,
  is imported by name only).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORT_ROOT = "evonorm_suite"
TASK_PACKAGES = ("search", "gan", "detection", "classification")
TASK_MODULE = re.compile(rf"^(?:{IMPORT_ROOT}\.)?({'|'.join(TASK_PACKAGES)})(?:\.|$)")
TASK_MODULE_STRING = re.compile(rf"^{IMPORT_ROOT}\.({'|'.join(TASK_PACKAGES)})(?:\.|$)")


def module_name(path: Path, root: Path) -> str:
    """The dotted name ``path`` is imported under: ``evonorm_suite.search.proxy``, ``evonorm_core.registry``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([IMPORT_ROOT, *parts] if parts[0] in TASK_PACKAGES else parts)


def references(path: Path, root: Path) -> list[tuple[int, str, bool]]:
    """``(line, module, relative)``, in line order, for every import in ``path`` (relative ones resolved)
    and every string literal that names a task package's module (``[sys.executable, "-m",
    "evonorm_suite.gan.train_biggan"]``)."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package.pop()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            found.append((node.lineno, ".".join([*base, *([node.module] if node.module else [])]), node.level > 0))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and TASK_MODULE_STRING.match(node.value):
            found.append((node.lineno, node.value, False))
    return sorted(found)


def import_violations(folder: str, root: Path = ROOT) -> list[str]:
    """Every import under ``root / folder`` that breaks the rules, as ``file:line: what``."""
    own = folder if folder in TASK_PACKAGES else None
    problems = []
    for path in sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts):
        where = path.relative_to(root).as_posix()
        for line, module, relative in references(path, root):
            match = TASK_MODULE.match(module)
            target = match.group(1) if match else None
            if own is not None and relative:
                problems.append(f"{where}:{line}: relative import of {module} (write {IMPORT_ROOT}.{own}...: "
                                "entry modules run as files)")
            elif target is not None and target != own:
                problems.append(f"{where}:{line}: imports {module} (the task package {target}/)")
            elif target is not None and not module.startswith(f"{IMPORT_ROOT}."):
                problems.append(f"{where}:{line}: imports {module} by a bare top-level name (write "
                                f"{IMPORT_ROOT}.{module})")
    return problems


@pytest.mark.parametrize("folder", TASK_PACKAGES)
def test_task_packages_are_leaves(folder):
    assert any((ROOT / folder).glob("*.py")), f"no Python files under {folder}/"
    assert import_violations(folder) == []


def test_the_core_imports_no_task_package():
    assert import_violations("evonorm_core") == []


def test_the_rules_see_every_kind_of_import(tmp_path):
    """The check itself: a relative import, a function-local import, a bare top-level name and a module
    named in a subprocess command line are all caught, each where it is; the core may not name even a
    task package's own module."""
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "bad.py").write_text(textwrap.dedent("""
        from evonorm_suite.search.config import X
        from .proxy import Y

        def run():
            from evonorm_suite.classification import recipes
            import gan.trainer
            import search.config
            return ["python", "-m", "evonorm_suite.detection.train_net"]
    """))
    (tmp_path / "evonorm_core").mkdir()
    (tmp_path / "evonorm_core" / "bad.py").write_text("from .search import driver\nimport evonorm_suite.search.proxy\n")
    assert import_violations("search", tmp_path) == [
        "search/bad.py:3: relative import of evonorm_suite.search.proxy (write evonorm_suite.search...: entry "
        "modules run as files)",
        "search/bad.py:6: imports evonorm_suite.classification (the task package classification/)",
        "search/bad.py:7: imports gan.trainer (the task package gan/)",
        "search/bad.py:8: imports search.config by a bare top-level name (write evonorm_suite.search.config)",
        "search/bad.py:9: imports evonorm_suite.detection.train_net (the task package detection/)",
    ]
    assert import_violations("evonorm_core", tmp_path) == [
        "evonorm_core/bad.py:2: imports evonorm_suite.search.proxy (the task package search/)"]


def module_file(module: str, root: Path = ROOT) -> Path | None:
    """The source file of the core's ``module`` (a module or a package), or None."""
    base = root.joinpath(*module.split("."))
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def import_time_modules(path: Path, root: Path = ROOT) -> set[str]:
    """What importing ``path`` imports: its imports outside function bodies (module level, ``if``/``try``
    blocks and class bodies run at import time), relative ones resolved, ``from pkg import name`` giving
    ``pkg.name`` too when that is a module of the core."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package.pop()
    found, todo = set(), [ast.parse(path.read_text(), str(path))]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*(package[: len(package) - node.level + 1] if node.level else []),
                             *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}", root))
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def import_closure(module: str, root: Path = ROOT) -> tuple[set[str], set[str]]:
    """``(core modules, outside top-level names)`` that ``import module`` loads, read from the source."""
    core, outside, todo = set(), set(), [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        if parts[0] != "evonorm_core":
            outside.add(parts[0])
            continue
        for prefix in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):  # parents run their __init__ first
            path = module_file(prefix, root)
            if path is not None and prefix not in core:
                core.add(prefix)
                todo.extend(import_time_modules(path, root))
    return core, outside


def test_importing_evonorm_core_needs_only_torch():
    """``import evonorm_core`` loads, by its imports outside function bodies, only the core's own modules
    (not its classifier room), torch and the standard library; and running it loads none of the suite's
    heavier dependencies."""
    core, outside = import_closure("evonorm_core")
    assert "evonorm_core.classifiers" not in core and "evonorm_core.registry" in core
    assert outside - set(sys.stdlib_module_names) - {"__future__"} == {"torch"}
    code = textwrap.dedent("""
        import sys
        import evonorm_core
        loaded = [m for m in ("evonorm_core.classifiers", "evonorm_suite", "torchvision", "sklearn", "matplotlib",
                              "scipy", "detectron2", "ray", "timm") if m in sys.modules]
        assert not loaded, loaded
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_closure_follows_parents_and_names_what_it_meets(tmp_path):
    """The closure check itself: a parent package's ``__init__`` runs first, ``from . import module`` is
    followed, a function-local import is not (it runs later, if ever)."""
    package = tmp_path / "evonorm_core"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import plumbing\n")
    (package / "plumbing.py").write_text("import json\nif True:\n    import torch\n"
                                         "def lazy():\n    import matplotlib\n")
    (package / "room" / "__init__.py").write_text("import torchvision\n")
    (package / "room" / "models.py").write_text("from ..plumbing import lazy\n")
    assert import_closure("evonorm_core", tmp_path) == ({"evonorm_core", "evonorm_core.plumbing"}, {"json", "torch"})
    assert import_closure("evonorm_core.room.models", tmp_path) == (
        {"evonorm_core", "evonorm_core.plumbing", "evonorm_core.room", "evonorm_core.room.models"},
        {"json", "torch", "torchvision"})
