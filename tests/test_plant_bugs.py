"""tools/plant_bugs.py: every set of planted bugs still applies to this tree.

A refactor that moves or rewrites a planted line makes its plant stale (the snippet is no
longer found exactly once); that is an error to fix in the plant, not a bug the tests caught.
No plant's selection includes this file (a planted snippet is, by design, missing here).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
    assert not any(t.split("::")[0] == "tests/test_plant_bugs.py" for p in plants for t in p.tests)


def test_set_flag_selects_the_set(capsys):
    assert plant_bugs.main(["--set", "fresh2", "--list"]) == 0
    assert f"{len(plant_bugs.FRESH2)} plants:" in capsys.readouterr().out
    assert plant_bugs.main(["--list"]) == 0
    assert f"{len(plant_bugs.PLANTS)} plants:" in capsys.readouterr().out
