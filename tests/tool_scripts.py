"""The programs of ``tools/`` as modules, for their tests.

``tools/`` is a folder of scripts run as files (``python tools/benchmark_layers.py``), not an
installed package, so a test loads a script from its path. Each is loaded once per test
process and registered in ``sys.modules`` (dataclasses look their module up there) under the
name its path gives it, ``tools.<name>`` (the name mutmut derives from the path, so that
``tools/mutation.py`` can tell which of its mutants a test ran).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load(name: str) -> ModuleType:
    """``tools/<name>.py`` as the module ``tools.<name>``."""
    module_name = f"tools.{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
