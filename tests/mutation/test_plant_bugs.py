"""tools/plant_bugs.py: every planted bug of the C++ code still applies to this tree (opt-in).

Not part of the default test run (``tests/conftest.py`` leaves this folder out): the plants are
exact snippets of the kernel source, so a rewrite of a planted line makes its plant stale, which
is a reason to update the plant, not a failure of the code. Run it before a planted-bug run, or
after changing the kernels, with ``python -m pytest tests/mutation``.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("tools.plant_bugs", ROOT / "tools" / "plant_bugs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


plant_bugs = _load()


def test_every_plant_applies_once():
    assert plant_bugs.validate(plant_bugs.PLANTS) == []


def test_plants_are_of_the_cpp_sources_and_no_selection_runs_this_folder():
    assert {p.file for p in plant_bugs.PLANTS} == {plant_bugs.CPP, plant_bugs.EAGER}
    assert not any(t.startswith("tests/mutation/") for p in plant_bugs.PLANTS for t in p.tests)


def test_list_names_every_plant(capsys):
    assert plant_bugs.main(["--list"]) == 0
    assert f"{len(plant_bugs.PLANTS)} plants" in capsys.readouterr().out


def test_a_rewritten_snippet_is_stale_with_its_file_and_snippet_and_is_not_run():
    k1 = plant_bugs.PLANTS[0]
    stale = dataclasses.replace(k1, original="var[ng] = (within + between) / (Cg - 1);")
    (problem,) = plant_bugs.validate([stale])
    assert problem.startswith(f"K1: stale: {plant_bugs.CPP} no longer holds it")
    assert repr(stale.original) in problem
    verdict = plant_bugs.run_plant(stale, timeout=1.0)  # nothing is copied or planted, no pytest starts
    assert (verdict.result, verdict.seconds) == ("stale", 0.0)
    assert verdict.detail == plant_bugs.stale_reason(stale)
