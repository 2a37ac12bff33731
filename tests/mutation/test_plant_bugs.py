"""tools/plant_bugs.py: every set of planted bugs still applies to this tree (opt-in).

Not part of the default test run (``tests/conftest.py`` leaves this folder out): the plants
are exact snippets of the source, so a refactor that moves or rewrites a planted line makes
its plant stale, which is a reason to update the plant, not a failure of the code. Run it
before a planted-bug run, or after a refactor, with ``python -m pytest tests/mutation``.
No plant's selection includes this file (a planted snippet is, by design, missing here).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("plant_bugs", ROOT / "tools" / "plant_bugs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


plant_bugs = _load()


@pytest.mark.parametrize("name", sorted(plant_bugs.PLANT_SETS))
def test_every_plant_applies_once_and_compiles(name):
    assert plant_bugs.validate(plant_bugs.PLANT_SETS[name]) == []


def test_ids_name_one_plant_across_sets_and_no_selection_runs_this_file():
    plants = [p for ps in plant_bugs.PLANT_SETS.values() for p in ps]
    assert len({p.id for p in plants}) == len(plants)
    assert not any(t.startswith("tests/mutation/") for p in plants for t in p.tests)


def test_set_flag_selects_the_set(capsys):
    assert plant_bugs.main(["--set", "fresh2", "--list"]) == 0
    assert f"{len(plant_bugs.FRESH2)} plants:" in capsys.readouterr().out
    assert plant_bugs.main(["--list"]) == 0
    assert f"{len(plant_bugs.PLANTS)} plants:" in capsys.readouterr().out


def test_a_moved_snippet_is_planted_where_it_now_is():
    """F2's snippet lives in formulas.py; a plant that still names functional.py finds it there."""
    f2 = next(p for p in plant_bugs.PLANTS if p.id == "F2")
    moved = dataclasses.replace(f2, file="evonorm_core/functional.py")
    assert plant_bugs.locate(moved) == "evonorm_core/formulas.py"
    assert plant_bugs.location_problems([moved]) == [
        "F2: the snippet moved from evonorm_core/functional.py to evonorm_core/formulas.py; update the plant's file"]
    assert plant_bugs.definition_problems([moved]) == []  # it still runs


def test_a_rewritten_snippet_is_stale_with_its_file_and_snippet_and_is_not_run():
    f2 = next(p for p in plant_bugs.PLANTS if p.id == "F2")
    stale = dataclasses.replace(f2, original="return (x + 1) * rms if variant == 'b1' else rms - x")
    assert plant_bugs.locate(stale) is None
    (problem,) = plant_bugs.location_problems([stale])
    assert problem.startswith("F2: stale (target moved): evonorm_core/formulas.py no longer holds the snippet")
    assert repr(stale.original) in problem
    verdict = plant_bugs.run_plant(stale, timeout=1.0)  # nothing is planted, no pytest starts
    assert (verdict.result, verdict.file, verdict.seconds) == ("stale", "evonorm_core/formulas.py", 0.0)
    assert verdict.detail == plant_bugs.stale_reason(stale)
