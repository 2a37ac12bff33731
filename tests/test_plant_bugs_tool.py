"""tools/plant_bugs.py: the results file a partial rerun updates is checked before any plant runs.

No plant is run here (each runs tests in a copy of the tree); tools/plant_bugs.py --validate is CI's check of
the plants themselves.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from .tool_scripts import load

plant_bugs = load("plant_bugs")
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "planted_bugs_cpp.json"


def test_a_partial_rerun_reads_the_committed_results_and_refuses_a_damaged_file_before_running(tmp_path):
    assert plant_bugs.previous_results(tmp_path / "absent.json") == {}
    assert {e["id"] for e in plant_bugs.previous_results(RESULTS)["plants"]}
    first = next(iter(p.id for p in plant_bugs.PLANTS))
    for text, says in (('{"plants": ', "Expecting value"), ("[]", "not an object"),
                       ('{"plants": [{"result": "caught"}]}', "plants that have an id")):
        damaged = tmp_path / "results.json"
        damaged.write_text(text)
        with pytest.raises(SystemExit, match=rf"^error: --json {damaged} cannot be updated \(.*{says}"):
            plant_bugs.main(["--only", first, "--json", str(damaged), "--skip-clean-check"])
        assert damaged.read_text() == text  # left as it was
