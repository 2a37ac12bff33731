"""tools/mutation.py: which mutants a run asks mutmut for, how verdicts and equivalents are counted, the table.

No mutmut run here (that takes minutes per module): the parts that decide what is run and what is reported.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .tool_scripts import load

mutation = load("mutation")
REPO = Path(__file__).resolve().parents[1]

WHOLE = mutation.Module("evonorm_core/statistics.py", "statistics", ("tests/test_functional.py",))
SOME = mutation.Module("tools/benchmark_layers.py", "benchmark", ("tests/test_behaviour_classes.py",),
                       ("target_rows", "LayerResult.roofline"))


def test_every_module_and_test_file_exists_and_a_task_module_is_mutated_under_its_import_name():
    for module in mutation.MODULES.values():
        assert (REPO / module.path).is_file(), module.path
        files = {t.split("::")[0] for t in module.tests if t.startswith("tests/")}
        assert files and all((REPO / f).is_file() for f in files), module.tests
    proxy = mutation.MODULES["search/proxy.py"]
    assert (proxy.mutated_path, proxy.dotted) == ("evonorm_suite/search/proxy.py", "evonorm_suite.search.proxy")
    assert WHOLE.dotted == "evonorm_core.statistics" and WHOLE.globs() == []
    assert SOME.globs() == ["tools.benchmark_layers.x_target_rows__mutmut_*",
                            "tools.benchmark_layers.xǁLayerResultǁroofline__mutmut_*"]


def test_a_run_asks_for_what_has_no_verdict_and_a_changed_module_is_run_again():
    names = [f"{SOME.dotted}.x_target_rows__mutmut_{i}" for i in range(1, 5)]
    verdicts = dict(zip(names, ["killed", "survived", "not checked", "no tests"]))
    # first run: every mutant (a whole module) or the selected functions' patterns
    assert mutation.mutmut_arguments(WHOLE, {}, changed=True, rerun_survivors=False) == []
    assert mutation.mutmut_arguments(SOME, {}, changed=True, rerun_survivors=False) == SOME.globs()
    # resumed: mutmut resumes a whole module itself; a selection is resumed by naming what is left
    assert mutation.mutmut_arguments(WHOLE, verdicts, changed=False, rerun_survivors=False) == []
    assert mutation.mutmut_arguments(SOME, verdicts, changed=False, rerun_survivors=False) == [names[2]]
    done = {**verdicts, names[2]: "killed"}
    assert mutation.mutmut_arguments(WHOLE, done, changed=False, rerun_survivors=False) is None
    assert mutation.mutmut_arguments(SOME, done, changed=False, rerun_survivors=False) is None
    # the module or its tests changed: mutmut reruns what changed in a whole module; a selection is run again
    assert mutation.mutmut_arguments(WHOLE, done, changed=True, rerun_survivors=False) == []
    assert mutation.mutmut_arguments(SOME, done, changed=True, rerun_survivors=False) == SOME.globs()
    # after new tests: the survivors and the untested, by name (mutmut keeps a verdict otherwise)
    assert sorted(mutation.mutmut_arguments(WHOLE, verdicts, False, rerun_survivors=True)) == names[1:]


def test_rerunning_the_survivors_maps_the_tests_anew_and_runs_the_mutants_of_changed_functions(tmp_path, monkeypatch):
    """mutmut maps a function to the tests that called it at its first run and later maps only tests it has not
    seen, so a test edited to reach a function would never meet its mutants: --rerun-survivors drops the map (a
    resumed run keeps it). A function edited since has new mutants that a run of the named survivors leaves
    unchecked: they are run after it."""
    module = mutation.MODULES["search/proxy.py"]
    test_map = tmp_path / module.slug / "mutants" / "mutmut-stats.json"
    verdicts = {"x_f__mutmut_1": "survived"}

    def prepare(module, root):
        test_map.parent.mkdir(parents=True, exist_ok=True)
        test_map.write_text("{}")

    def mutmut(root, *args, capture):
        calls.append((test_map.exists(), args[3:]))
        verdicts["x_g__mutmut_1"] = "killed" if len(calls) > 1 else "not checked"  # g's mutant, new since g changed
        return subprocess.CompletedProcess(args, 0)

    calls = []
    monkeypatch.setattr(mutation, "prepare", prepare)
    monkeypatch.setattr(mutation, "mutmut", mutmut)
    monkeypatch.setattr(mutation, "statuses", lambda module, root: verdicts)
    monkeypatch.setattr(mutation, "summarize", lambda module, root, verdicts: {})
    monkeypatch.setattr(mutation, "RESULTS", tmp_path / "results")
    mutation.run_module(module, tmp_path, jobs=1, fresh=False, rerun_survivors=True)
    assert calls == [(False, ("x_f__mutmut_1",)), (False, ())]
    calls.clear()
    verdicts["x_f__mutmut_2"] = "not checked"
    mutation.run_module(module, tmp_path, jobs=1, fresh=False, rerun_survivors=False)
    assert calls == [(True, ())]


def test_equivalents_count_only_for_the_change_they_were_written_for():
    name = "m.x_f__mutmut_{}".format
    verdicts = {name(1): "killed", name(2): "survived", name(3): "survived", name(4): "no tests",
                name(5): "timeout", name(6): "not checked", name(7): "killed", name(8): "segfault"}
    changes = {name(i): ["-    a = b[:2]", f"+    a = b[:{i}]"] for i in (2, 3, 4, 5, 8)}
    equivalents = {name(2): (mutation.change_hash(changes[name(2)]), "b has two elements"),
                   name(3): (mutation.change_hash(changes[name(2)]), "written for mutant 2's change"),
                   name(7): ("0123456789", "a test tells it apart")}
    counts, entries, stale = mutation.classify(verdicts, changes, equivalents)
    assert counts == {"killed": 2, "timeout": 1, "survived": 1, "no tests": 1, "equivalent": 1, "other": 1,
                      "not run": 1}
    by_name = {e["name"]: e for e in entries}
    assert by_name[name(2)]["verdict"] == "equivalent" and by_name[name(2)]["reason"] == "b has two elements"
    assert by_name[name(3)]["verdict"] == "survived" and "reason" not in by_name[name(3)]
    assert [s.split(":")[0] for s in stale] == [name(3), name(7)]
    # (2 killed + 1 timeout) / (8 mutants - 1 equivalent - 1 not run)
    assert mutation.score(counts) == round(3 / 6, 4)
    # the hash ignores how the lines are indented and spaced, not what they say
    assert mutation.change_hash(["-  a =  b", "+ a = c"]) == mutation.change_hash(["-a = b", "+a = c"])
    assert mutation.change_hash(["-a = b", "+a = c"]) != mutation.change_hash(["-a = b", "+a = d"])


def test_the_equivalents_file_is_one_line_per_mutant(tmp_path):
    path = tmp_path / "equivalents.txt"
    path.write_text("# comment\n\nm.x_f__mutmut_2 0123456789 b has two elements: [:3] is [:2]\n")
    assert mutation.load_equivalents(path) == {"m.x_f__mutmut_2": ("0123456789", "b has two elements: [:3] is [:2]")}
    path.write_text("m.x_f__mutmut_2 b has two elements\n")
    with pytest.raises(SystemExit, match="expected 'MUTANT_NAME CHANGE_HASH REASON'"):
        mutation.load_equivalents(path)
    path.write_text("m.x_f__mutmut_2 0123456789 one\nm.x_f__mutmut_2 0123456789 two\n")
    with pytest.raises(SystemExit, match="listed twice"):
        mutation.load_equivalents(path)
    assert mutation.load_equivalents() is not None  # the committed file parses


def test_the_table_lists_every_module_and_the_survivors_of_those_run():
    result = {"module": "evonorm_core/statistics.py", "area": "statistics", "mutants": 3,
              "counts": {"killed": 1, "timeout": 0, "survived": 1, "no tests": 0, "equivalent": 1, "other": 0,
                         "not run": 0},
              "score": 0.5, "tool": "mutmut 3.8.1", "commit": "0123456789abcdef", "functions": "all",
              "not_mutated": [], "stale_equivalents": [],
              "not_killed": [{"name": "evonorm_core.statistics.x_f__mutmut_2", "verdict": "survived",
                              "change": ["-    a = 1", "+    a = 2"]},
                             {"name": "evonorm_core.statistics.x_f__mutmut_3", "verdict": "equivalent",
                              "change": ["-    b = 1", "+    b = 1.0"], "reason": "the same number"}]}
    text = mutation.table({"evonorm_core/statistics.py": result})
    assert text.startswith(mutation.TABLE_START) and text.endswith(mutation.TABLE_END)
    assert "| `evonorm_core/statistics.py` | statistics | 3 | 1 | 0 | 1 | 0 | 1 | 0 | 0 | 50.0 % |" in text
    assert "- survived: `x_f__mutmut_2` `- a = 1` / `+ a = 2`" in text
    assert "- equivalent: `x_f__mutmut_3` `- b = 1` / `+ b = 1.0`: the same number" in text
    for path in mutation.MODULES:
        assert f"`{path}`" in text
    assert "not run yet: `python3 tools/mutation.py --module evonorm_core/convert.py`" in text


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit):
        mutation.parse_args(["--help"])
    out = capsys.readouterr().out
    for flag in ("--module", "--all", "--list-modules", "--report", "--jobs", "--fresh", "--rerun-survivors",
                 "--work-dir"):
        assert flag in out
    with pytest.raises(SystemExit):
        mutation.parse_args(["--module", "evonorm_core/statistics.py", "--jobs", "0"])
