#!/usr/bin/env python3
"""Mutation testing of the modules where a silent error changes results, with mutmut, one module at a time.

    python3 tools/mutation.py --list-modules                            # the modules, their tests, their last result
    nice -n 5 python3 tools/mutation.py --module evonorm_core/statistics.py   # run (or resume) one module
    nice -n 5 python3 tools/mutation.py --all                            # every module not finished yet, smallest first
    python3 tools/mutation.py --report                                  # rewrite the table in docs/testing.md

mutmut (pinned in ``tools/constraints.txt``) writes every mutant of a module (an operator swapped, a
constant changed, an argument dropped, ...) and runs, for each, only the tests that call the mutated
function, in a process forked from one that has already imported torch: a mutant costs a second or
two, not a pytest start-up. Each module (:data:`MODULES`) is mapped to the few test files that cover
it, and runs in its own folder, ``.mutation/<module>/`` (git-ignored): a folder of links to this
checkout with a ``pyproject.toml`` that configures mutmut for that module alone; mutmut copies the
tree into ``mutants/`` there and mutates the copy. Nothing in the working tree is ever modified, so a
run cannot disturb other processes that import the library from it.

A run is resumable: mutmut records each mutant's verdict as it gets it, an interrupted run (Ctrl-C,
``kill``) continues where it stopped, and a mutant whose function changed since is run again
(mutmut's function hashes). ``--fresh`` starts the module over.

At the end of a run the verdicts go to ``docs/results/mutation/<module>.json``: the counts and, for
every mutant that was not killed, its change (the mutated lines) and mutmut's name for it, with which
``mutmut show NAME`` (in ``.mutation/<module>/``) prints its diff. ``--report`` rewrites the table of
``docs/testing.md`` between its markers from those files. A surviving mutant is either a missing test
(add one against an independent reference and run the module again) or equivalent: it computes the
same thing as the original. Equivalent mutants are listed in ``tools/mutation_equivalents.txt``, one
line each: mutmut's name, a hash of the mutated lines and the reason. The hash ties the reason to the
change it was written for: if mutmut later gives that name to another change (the function was
edited), the entry is reported as stale and the mutant counts as survived until the entry is updated.

The score is (killed + timed out) / (mutants - equivalent). mutmut does not mutate decorated functions
(``@property``, ``@torch.library.custom_op``, ...; it cannot set up its trampoline for them) nor
module-level statements (tables, defaults): each module's JSON lists the decorated functions it skips,
so that the score is read together with what it does not cover.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results" / "mutation"
EQUIVALENTS = REPO / "tools" / "mutation_equivalents.txt"
DOC = REPO / "docs" / "testing.md"
DEFAULT_WORK_DIR = REPO / ".mutation"
TABLE_START = "<!-- mutation table: written by `python3 tools/mutation.py --report`; do not edit by hand -->"
TABLE_END = "<!-- end of the mutation table -->"
# The task folders are installed as evonorm_suite.<folder> (setup.py): a module of one is mutated under that
# name, the name its tests import it by.
TASK_FOLDERS = ("classification", "detection", "gan", "search")
# (-n 0: mutmut runs the tests in its own process; pyproject.toml's -n auto would start xdist workers)
PYTEST_ARGS = ["-p", "no:cacheprovider", "-n", "0"]
# mutmut's verdicts, grouped as the table counts them; any other (suspicious, segfault, skipped) is "other"
KILLED, TIMEOUT, SURVIVED, NO_TESTS, EQUIVALENT, OTHER, PENDING = (
    "killed", "timeout", "survived", "no tests", "equivalent", "other", "not run")
PENDING_STATUSES = ("not checked", "check was interrupted by user")
LEFT_STANDING = (SURVIVED, NO_TESTS)  # verdicts an entry of the equivalents file may turn into "equivalent"


@dataclass(frozen=True)
class Module:
    """One file to mutate and the tests that cover it."""

    path: str  # relative to the repository root
    area: str  # the name for what it is
    tests: tuple[str, ...]  # pytest arguments that select the tests run against its mutants
    functions: tuple[str, ...] = ()  # mutate only these (``name`` or ``Class.method``); all when empty

    @property
    def slug(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")

    @property
    def mutated_path(self) -> str:
        """Where the file is in the mutation folder: a task folder's module sits under ``evonorm_suite/``."""
        return f"evonorm_suite/{self.path}" if self.path.split("/")[0] in TASK_FOLDERS else self.path

    @property
    def dotted(self) -> str:
        """The module's import name, the prefix of its mutants' names."""
        return self.mutated_path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")

    def globs(self) -> list[str]:
        """mutmut's name patterns for the selected functions (empty: every function)."""
        patterns = []
        for name in self.functions:
            cls, _, func = name.rpartition(".")
            patterns.append(f"{self.dotted}.xǁ{cls}ǁ{func}__mutmut_*" if cls else f"{self.dotted}.x_{func}__mutmut_*")
        return patterns


SLOW_OFF = ("-m", "not slow")
MODULES = {m.path: m for m in [
    Module("tools/benchmark_layers.py", "benchmark arithmetic",
           # (test_fast_benchmark.py runs the command end to end, torch.compile included: a minute per mutant)
           ("tests/test_benchmark_arithmetic.py",
            "tests/test_behaviour_classes.py::test_resnet50_step_ratios_are_evonorm_over_its_baseline",
            "tests/test_behaviour_classes.py::test_layer_table_ratios_are_each_layer_over_its_baseline"),
           ("baseline_of", "bench_shape", "bench_model", "_evonorm_over_baseline", "target_rows", "format_targets",
            "matrix_layers", "bench_matrix", "worst_ratio", "format_cell")),
    # (the two-process tests of test_sync_batch_stats.py run the synced path in child processes, which mutmut's
    # test-to-function map does not see: test_statistics.py runs it in one process)
    Module("evonorm_core/statistics.py", "statistics",
           ("tests/test_statistics.py", "tests/test_functional.py", "tests/test_running_stats.py",
            "tests/test_layers_bad_inputs.py", "tests/test_layers.py", *SLOW_OFF)),
    Module("evonorm_core/running_stats.py", "running statistics",
           ("tests/test_running_stats.py", "tests/test_properties_running_stats.py", "tests/test_search_layer.py",
            "tests/test_layers.py", *SLOW_OFF)),
    Module("evonorm_core/search/expression.py", "search: expression printer/parser",
           ("tests/test_search_expression.py", "tests/test_search_genome.py", "tests/test_properties_expression.py",
            "tests/test_search_layer.py")),
    Module("evonorm_core/search/genome.py", "search: genome",
           ("tests/test_search_genome.py", "tests/test_properties_genome.py", "tests/test_search_equivalence.py")),
    Module("evonorm_core/search/primitives.py", "search: primitives",
           ("tests/test_search_primitives.py", "tests/test_search_layer.py", "tests/test_properties_genome.py")),
    Module("evonorm_core/search/equivalence.py", "search: equivalence",
           ("tests/test_search_equivalence.py", "tests/test_properties_genome.py", "tests/test_search_driver.py",
            *SLOW_OFF)),
    # (test_pool_workers_die_with_a_killed_search starts search/evolve.py as a script, a path the mutation folder
    # does not have (the task folders are there as evonorm_suite/<folder>); the search it starts runs in child
    # processes, which mutmut's test-to-function map does not see anyway)
    Module("evonorm_core/search/evolution.py", "search: evolution",
           ("tests/test_search_config.py", "tests/test_search_driver.py", "tests/test_search_runs.py",
            "--deselect", "tests/test_search_runs.py::test_pool_workers_die_with_a_killed_search", *SLOW_OFF)),
    Module("evonorm_core/search/rejection.py", "search: rejection",
           ("tests/test_search_rejection.py", "tests/test_search_config.py", *SLOW_OFF)),
    Module("evonorm_core/search/layer.py", "search: searched layer",
           ("tests/test_search_layer.py", "tests/test_properties_genome.py", "tests/test_properties_running_stats.py")),
    Module("search/proxy.py", "proxy trainer",
           ("tests/test_search_config.py", "tests/test_search_rejection.py", "tests/test_search_driver.py", *SLOW_OFF)),
    Module("evonorm_core/formulas.py", "layers and functionals",
           ("tests/test_functional.py", "tests/test_layers.py", "tests/test_layers_conditional.py", *SLOW_OFF)),
    Module("evonorm_core/functional.py", "layers and functionals",
           ("tests/test_functional.py", "tests/test_layers.py", "tests/test_layers_conditional.py",
            "tests/test_layers_bad_inputs.py", *SLOW_OFF)),
    Module("evonorm_core/layers/evonorm.py", "layers and functionals",
           ("tests/test_layers.py", "tests/test_layers_conditional.py", "tests/test_layers_bad_inputs.py", *SLOW_OFF)),
    Module("evonorm_core/layers/baselines.py", "layers and functionals",
           ("tests/test_layers.py", "tests/test_layers_bad_inputs.py", *SLOW_OFF)),
    Module("evonorm_core/layers/base.py", "layers and functionals",
           ("tests/test_layers.py", "tests/test_layers_conditional.py", "tests/test_layers_bad_inputs.py", *SLOW_OFF)),
    Module("evonorm_core/layers/conditional.py", "layers and functionals",
           ("tests/test_layers_conditional.py", *SLOW_OFF)),
    Module("evonorm_core/layers/controls.py", "layers and functionals", ("tests/test_layers.py", *SLOW_OFF)),
    Module("evonorm_core/ops/library.py", "layers and functionals: fused operators",
           ("tests/test_fast_layers.py", *SLOW_OFF)),
    Module("evonorm_core/ops/checks.py", "layers and functionals: operator argument checks",
           ("tests/test_fast_layers.py::test_the_operators_name_an_argument_of_the_wrong_size",
            "tests/test_fast_layers.py::test_the_operators_refuse_an_input_they_cannot_read",
            "tests/test_fast_layers.py::test_the_size_checks_pass_right_sized_arguments", *SLOW_OFF)),
    Module("evonorm_core/classifiers/trainer.py", "classifier trainer",
           ("tests/test_classifiers_trainer.py", "tests/test_search_rejection.py",
            "tests/test_behaviour_classes.py::test_a_step_trains_in_training_mode_whatever_mode_the_caller_left",
            "tests/test_behaviour_classes.py::test_a_classification_run_trains_in_training_mode_and_evaluates_in_eval_mode",
            *SLOW_OFF)),
    Module("evonorm_core/experiment/verdicts.py", "verdict rule",
           ("tests/test_reproduce.py", "tests/test_verdict_rule_edges.py", *SLOW_OFF)),
    Module("evonorm_core/convert.py", "conversion",
           ("tests/test_convert.py", "tests/test_convert_graph_reading.py", "tests/test_timm_evonorm.py",
            "tests/test_behaviour_classes.py::test_converted_layers_take_the_dtype_and_device_of_the_batchnorm_they_replace",
            *SLOW_OFF)),
]}


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def pytest_section() -> str:
    """The repository's ``[tool.pytest.ini_options]`` table, verbatim (markers, filters)."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r"^\[tool\.pytest\.ini_options\]\n.*?(?=^\[|\Z)", text, flags=re.M | re.S)
    if match is None:
        raise SystemExit("pyproject.toml has no [tool.pytest.ini_options] table")
    return match.group(0).rstrip() + "\n"


def toml_list(items: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(item, ensure_ascii=False) for item in items) + "]"


def prepare(module: Module, root: Path) -> None:
    """The module's mutation folder: links to the checkout and a pyproject.toml configuring mutmut for it."""
    root.mkdir(parents=True, exist_ok=True)
    links = {name: REPO / name for name in ("evonorm_core", "tests", "tools")}
    links.update({f"evonorm_suite/{folder}": REPO / folder for folder in TASK_FOLDERS})
    for name, target in links.items():
        link = root / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    config = (
        pytest_section()
        + "\n[tool.mutmut]\n"
        + f"source_paths = {toml_list([module.mutated_path])}\n"
        + f"also_copy = {toml_list(['evonorm_core', 'tools', 'evonorm_suite'])}\n"
        + f"pytest_add_cli_args = {toml_list(PYTEST_ARGS)}\n"
        + f"pytest_add_cli_args_test_selection = {toml_list(module.tests)}\n"
        # torch is not fork-safe once it has started threads: fork the mutants from a clean server process
        + 'process_isolation = "forkserver"\n'
    )
    config_path = root / "pyproject.toml"
    if not config_path.exists() or config_path.read_text(encoding="utf-8") != config:
        atomic_write(config_path, config)


def mutmut(root: Path, *args: str, capture: bool = True, threads: int = 1) -> subprocess.CompletedProcess:
    """``mutmut ARGS`` in ``root`` (its console entry point, so that its forked workers import it as a module)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "EVONORM_TEST_THREADS"):
        env.setdefault(name, str(threads))
    command = [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())", *args]
    return subprocess.run(command, cwd=root, env=env, text=True, capture_output=capture, check=False)


def statuses(module: Module, root: Path) -> dict[str, str]:
    """mutmut's verdict for each mutant of the module (of its selected functions); empty before the first run."""
    if not (root / "mutants" / f"{module.mutated_path}.meta").exists():
        return {}
    done = mutmut(root, "results", "--all", "true")
    if done.returncode:
        raise SystemExit(f"mutmut results failed in {root}:\n{done.stdout}{done.stderr}")
    found = dict(line.strip().rsplit(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    prefix = module.dotted + "."
    patterns = [re.compile(re.escape(g).replace(r"\*", ".*")) for g in module.globs()]
    return {name: status for name, status in found.items()
            if name.startswith(prefix) and (not patterns or any(p.fullmatch(name) for p in patterns))}


def changed_lines(diff: str) -> list[str]:
    """The removed and added lines of a unified diff (not its file headers)."""
    return [line for line in diff.splitlines()
            if line[:1] in "-+" and not line.startswith(("---", "+++"))]


def change_hash(lines: list[str]) -> str:
    """What an equivalents entry is tied to: the mutated lines, whitespace-normalised (not their line numbers)."""
    text = "\n".join(line[0] + " ".join(line[1:].split()) for line in lines)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def load_equivalents(path: Path = EQUIVALENTS) -> dict[str, tuple[str, str]]:
    """``{mutant name: (change hash, reason)}`` from the equivalents file (``#`` starts a comment line)."""
    entries: dict[str, tuple[str, str]] = {}
    if not path.exists():
        return entries
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(maxsplit=2)
        if len(parts) < 3 or not re.fullmatch(r"[0-9a-f]{10}", parts[1]):
            raise SystemExit(f"{path}:{number}: expected 'MUTANT_NAME CHANGE_HASH REASON', got {line!r}")
        if parts[0] in entries:
            raise SystemExit(f"{path}:{number}: {parts[0]} is listed twice")
        entries[parts[0]] = (parts[1], parts[2])
    return entries


def decorated_functions(module: Module) -> list[str]:
    """The module's functions mutmut leaves alone: decorated, other than by staticmethod or classmethod."""
    tree = ast.parse((REPO / module.path).read_text(encoding="utf-8"))
    found = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [ast.unparse(d) for d in node.decorator_list]
                if names and names not in (["staticmethod"], ["classmethod"]):
                    found.append(f"{prefix}{node.name} (@{', @'.join(names)})")

    visit(tree.body, "")
    if module.functions:
        wanted = set(module.functions)
        found = [f for f in found if f.split(" ")[0] in wanted]
    return found


def git_state(module: Module) -> dict:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, text=True, capture_output=True, check=False)
    paths = [module.path, *{t.split("::")[0] for t in module.tests if t.startswith("tests/")}]
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=REPO, text=True,
                           capture_output=True, check=False)
    return {"commit": head.stdout.strip(), "uncommitted_changes": sorted({line[3:] for line in dirty.stdout.splitlines()})}


def verdict_group(status: str) -> str:
    """mutmut's status as the table's column."""
    groups = {"killed": KILLED, "caught by type check": KILLED, "timeout": TIMEOUT, "survived": SURVIVED,
              "no tests": NO_TESTS}
    return groups.get(status, PENDING if status in PENDING_STATUSES else OTHER)


def classify(verdicts: dict[str, str], changes: dict[str, list[str]],
             equivalents: dict[str, tuple[str, str]]) -> tuple[dict[str, int], list[dict], list[str]]:
    """``(counts per column, one entry per mutant not killed, stale equivalents entries)``.

    ``changes`` holds the mutated lines of every mutant that was run and not killed. A survivor (or an
    untested mutant) listed in ``equivalents`` with the hash of its change counts as equivalent; an entry
    whose hash is another change's, or whose mutant a test kills, is stale.
    """
    counts = dict.fromkeys((KILLED, TIMEOUT, SURVIVED, NO_TESTS, EQUIVALENT, OTHER, PENDING), 0)
    entries, stale = [], []
    for name in sorted(verdicts, key=mutant_order):
        status, group = verdicts[name], verdict_group(verdicts[name])
        if group == KILLED:
            counts[KILLED] += 1
            if name in equivalents:
                stale.append(f"{name}: listed as equivalent but killed (a test tells it apart): remove the entry")
            continue
        entry: dict = {"name": name, "status": status}
        if name in changes:
            lines = changes[name]
            entry.update(change=lines, change_hash=change_hash(lines))
            if name in equivalents:
                recorded, reason = equivalents[name]
                if recorded != entry["change_hash"]:
                    stale.append(f"{name}: the equivalents entry was written for another change ({recorded}, now "
                                 f"{entry['change_hash']}: {' / '.join(lines)}); check it and update the hash")
                elif group in LEFT_STANDING:
                    group, entry["reason"] = EQUIVALENT, reason
        entry["verdict"] = group
        counts[group] += 1
        entries.append(entry)
    return counts, entries, stale


def score(counts: dict[str, int]) -> float | None:
    """(killed + timed out) / the mutants with a verdict that are not equivalent."""
    decided = sum(counts.values()) - counts[PENDING] - counts[EQUIVALENT]
    return round((counts[KILLED] + counts[TIMEOUT]) / decided, 4) if decided else None


def summarize(module: Module, root: Path, verdicts: dict[str, str]) -> dict:
    """The module's result file: counts, score and every mutant that was not killed."""
    changes = {name: changed_lines(mutmut(root, "show", name).stdout) for name, status in verdicts.items()
               if verdict_group(status) not in (KILLED, PENDING)}
    counts, entries, stale = classify(verdicts, changes, load_equivalents())
    return {
        "module": module.path,
        "area": module.area,
        "tool": f"mutmut {mutmut_version()}",
        "command": f"python3 tools/mutation.py --module {module.path}",
        "tests": list(module.tests),
        "functions": list(module.functions) or "all",
        "source_sha256": source_hash(module),
        "not_mutated": decorated_functions(module),
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **git_state(module),
        "mutants": sum(counts.values()),
        "counts": counts,
        "complete": counts[PENDING] == 0,
        "score": score(counts),
        "stale_equivalents": stale,
        "not_killed": entries,
    }


def mutant_order(name: str) -> tuple[str, int]:
    function, _, number = name.rpartition("__mutmut_")
    return function, int(number) if number.isdigit() else 0


def mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def source_hash(module: Module) -> str:
    return hashlib.sha256((REPO / module.path).read_bytes()).hexdigest()


def mutmut_arguments(module: Module, verdicts: dict[str, str], changed: bool,
                     rerun_survivors: bool) -> list[str] | None:
    """The mutant names (or patterns) to give ``mutmut run``; ``[]``: every mutant without a verdict; ``None``:
    nothing to run. ``changed``: the module or its test selection changed since its last result.

    mutmut runs every mutant it is named again, so a module restricted to some functions is resumed by naming
    the ones still to run; a whole module is resumed by mutmut itself, which also runs again the mutants of
    functions that changed since (and every mutant when the test selection changed).
    """
    pending = [name for name, status in verdicts.items() if status in PENDING_STATUSES]
    if not verdicts or (module.functions and changed):
        return module.globs()
    if rerun_survivors:
        return pending + [name for name, status in verdicts.items() if status in ("survived", "no tests")]
    if pending:
        return pending if module.functions else []
    return [] if changed and not module.functions else None


def run_mutmut(module: Module, root: Path, jobs: int, names: list[str]) -> None:
    """``mutmut run`` of ``names`` (empty: every mutant without a verdict) in the module's folder."""
    done = mutmut(root, "run", "--max-children", str(jobs), *names, capture=False)
    if done.returncode:
        raise SystemExit(f"[mutation] mutmut run failed for {module.path} (exit status {done.returncode}); "
                         f"its output is above; the folder is {root}")


def run_module(module: Module, work_dir: Path, jobs: int, fresh: bool, rerun_survivors: bool) -> dict:
    root = work_dir / module.slug
    if fresh and root.exists():
        shutil.rmtree(root)
    prepare(module, root)
    if rerun_survivors:
        # mutmut maps each function to the tests that called it at its first run and, later, maps only tests it
        # has not seen: a test edited since to reach a function would not be run against that function's mutants
        (root / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    # what the verdicts in this folder were obtained with: written after each mutmut run
    state_path = root / "verdicts-of.json"
    current = {"source_sha256": source_hash(module), "tests": list(module.tests)}
    changed = not state_path.exists() or json.loads(state_path.read_text(encoding="utf-8")) != current
    names = mutmut_arguments(module, statuses(module, root), changed, rerun_survivors)
    if names is None:
        print(f"[mutation] {module.path}: every mutant has a verdict and neither the module nor its tests changed "
              "(--rerun-survivors runs the survivors again, --fresh every mutant)", flush=True)
    else:
        what = ("the selected functions' mutants" if module.functions and names == module.globs() else
                f"{len(names)} mutants" if names else "the mutants without a verdict")
        print(f"[mutation] {module.path}: mutmut run in {root}: {what}", flush=True)
        run_mutmut(module, root, jobs, names)
        # the functions edited since have new mutants, which a run of the named survivors leaves unchecked
        pending = mutmut_arguments(module, statuses(module, root), False, False) if rerun_survivors else None
        if pending is not None:
            print(f"[mutation] {module.path}: and the mutants of the functions changed since", flush=True)
            run_mutmut(module, root, jobs, pending)
        atomic_write(state_path, json.dumps(current) + "\n")
    summary = summarize(module, root, statuses(module, root))
    atomic_write(RESULTS / f"{module.slug}.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def load_results() -> dict[str, dict]:
    found = {}
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("module") in MODULES:
            found[data["module"]] = data
    return found


def percent(score: float | None) -> str:
    return "-" if score is None else f"{100 * score:.1f} %"


def table(results: dict[str, dict]) -> str:
    """The Markdown table of every module (run or not) and, per module, its surviving mutants."""
    lines = [TABLE_START, "",
             "| module | area | mutants | killed | timeout | survived | no tests | equivalent | other | not run "
             "| caught | tool, commit |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for path, module in MODULES.items():
        r = results.get(path)
        if r is None:
            lines.append(f"| `{path}` | {module.area} | not run yet: `python3 tools/mutation.py --module {path}` "
                         "| | | | | | | | | |")
            continue
        c = r["counts"]
        notes = [note for note, applies in (
            ("uncommitted changes", r.get("uncommitted_changes")),
            ("the module changed since", r.get("source_sha256") not in (None, source_hash(module)))) if applies]
        lines.append(f"| `{path}` | {r['area']} | {r['mutants']} | {c[KILLED]} | {c[TIMEOUT]} | {c[SURVIVED]} "
                     f"| {c[NO_TESTS]} | {c[EQUIVALENT]} | {c[OTHER]} | {c[PENDING]} | {percent(r['score'])} "
                     f"| {r['tool']}, {r['commit'][:7]}{''.join(f'; {n}' for n in notes)} |")
    lines.append("")
    for path, r in ((path, results[path]) for path in MODULES if path in results):
        left = [m for m in r["not_killed"] if m["verdict"] not in (PENDING,)]
        if not left and not r["not_mutated"] and not r["stale_equivalents"]:
            continue
        lines.append(f"<details><summary><code>{path}</code>: {len(left)} not killed "
                     f"({sum(m['verdict'] == EQUIVALENT for m in left)} equivalent)</summary>\n")
        if r["functions"] != "all":
            lines.append(f"Mutated functions: {', '.join(f'`{f}`' for f in r['functions'])}.\n")
        if r["not_mutated"]:
            lines.append(f"Not mutated (decorated): {', '.join(f'`{f}`' for f in r['not_mutated'])}.\n")
        for note in r["stale_equivalents"]:
            lines.append(f"- **stale equivalents entry**: {note}")
        for m in left:
            change = " / ".join(f"`{line[0]} {' '.join(line[1:].split())}`" for line in m.get("change", []))
            why = f": {m['reason']}" if m["verdict"] == EQUIVALENT else ""
            short = m["name"].removeprefix(MODULES[path].dotted + ".")
            lines.append(f"- {m['verdict']}: `{short}` {change}{why}")
        lines.append("\n</details>\n")
    lines.append(TABLE_END)
    return "\n".join(lines)


def write_report() -> None:
    text = DOC.read_text(encoding="utf-8")
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"{DOC} lacks the markers of the mutation table:\n{TABLE_START}\n{TABLE_END}")
    atomic_write(DOC, text[:start] + table(load_results()) + text[end + len(TABLE_END):])
    print(f"[mutation] wrote the table in {DOC.relative_to(REPO)}")


def list_modules() -> None:
    results = load_results()
    for path, module in MODULES.items():
        r = results.get(path)
        state = (f"{r['counts'][KILLED]} killed / {r['mutants']} mutants, caught {percent(r['score'])}"
                 f"{'' if r['complete'] else ', unfinished'}" if r else "not run")
        print(f"{path:<36} {module.area:<44} {state}")
        only = f" (functions: {', '.join(module.functions)})" if module.functions else ""
        print(f"    tests: {' '.join(module.tests)}{only}")


def print_summary(r: dict) -> None:
    c = r["counts"]
    print(f"[mutation] {r['module']}: {r['mutants']} mutants: {c[KILLED]} killed, {c[TIMEOUT]} timeout, "
          f"{c[SURVIVED]} survived, {c[NO_TESTS]} no tests, {c[EQUIVALENT]} equivalent, {c[OTHER]} other, "
          f"{c[PENDING]} not run; caught {percent(r['score'])}")
    for m in r["not_killed"]:
        if m["verdict"] in (SURVIVED, NO_TESTS, OTHER):
            print(f"    {m['verdict']}: {m['name']}  " + " / ".join(m.get("change", [])))
    for note in r["stale_equivalents"]:
        print(f"    STALE {note}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--module", choices=list(MODULES), metavar="PATH",
                      help="run (or resume) the mutants of this module, write docs/results/mutation/<module>.json and "
                           f"the table in docs/testing.md; one of: {', '.join(MODULES)}")
    what.add_argument("--all", action="store_true",
                      help="run every module whose result is missing or unfinished, in the order --list-modules shows")
    what.add_argument("--list-modules", action="store_true",
                      help="list the modules, the tests each is run against and their last result; run nothing")
    what.add_argument("--report", action="store_true",
                      help="rewrite the table in docs/testing.md from docs/results/mutation/*.json; run nothing")
    parser.add_argument("--jobs", type=int, default=1,
                        help="mutants run at once (mutmut's --max-children; default %(default)s, for a machine shared with "
                             "other work)")
    parser.add_argument("--fresh", action="store_true",
                        help="delete the module's mutation folder first, so that every mutant runs again")
    parser.add_argument("--rerun-survivors", action="store_true",
                        help="run the module's surviving and untested mutants again, with the tests mapped to the "
                             "functions anew (after adding or editing tests: mutmut keeps a verdict until the mutated "
                             "function changes)")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                        help="where the per-module mutation folders go (default: .mutation/ in the checkout, "
                             "git-ignored)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list_modules:
        list_modules()
        return 0
    if not args.report:
        todo = [MODULES[args.module]] if args.module else [
            m for path, m in MODULES.items() if not load_results().get(path, {}).get("complete")]
        for module in todo:
            print_summary(run_module(module, args.work_dir.resolve(), args.jobs, args.fresh, args.rerun_survivors))
    write_report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
