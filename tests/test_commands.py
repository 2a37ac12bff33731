"""Every command-line program: installed as a console command, `--help` for every flag, and the
design card's script invocations run as written (through the editable install, no sys.path edits)."""
import ast
import importlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def console_scripts() -> dict[str, str]:
    """``name -> module:function`` from setup.py's CONSOLE_SCRIPTS (read without running setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "CONSOLE_SCRIPTS":
            entries = ast.literal_eval(node.value)
            return dict(tuple(part.strip() for part in entry.split("=")) for entry in entries)
    raise AssertionError("setup.py defines no CONSOLE_SCRIPTS")


def needs_detectron2(needed: bool) -> None:
    if needed:
        pytest.importorskip("detectron2", reason="detectron2 is not installed (tools/install.sh installs it)")


@pytest.mark.parametrize("name,target", sorted(console_scripts().items()))
def test_every_console_command_has_help(name, target, capsys):
    needs_detectron2(target.startswith("evonorm_suite.detection"))
    module, function = target.split(":")
    main = getattr(importlib.import_module(module), function)
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def entry_modules() -> list[str]:
    """Every module of a task package that runs as a program (``python search/calibrate.py``)."""
    return sorted(str(p.relative_to(ROOT)) for folder in ("search", "gan", "detection", "classification")
                  for p in (ROOT / folder).glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


@pytest.mark.parametrize("script", [*entry_modules(), "tools/train_net.py", "tools/benchmark_layers.py",
                                    "tools/benchmark_timm.py", "tools/check_capture.py", "tools/model_cost.py",
                                    "tools/render_benchmarks_doc.py"])
def test_design_card_scripts_run_from_the_checkout(script):
    needs_detectron2(script.startswith("detection/") or script in ("tools/train_net.py", "tools/model_cost.py"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)  # the checkout under test (in CI: the editable install's folder)
    done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
    assert "Warning" not in done.stderr, done.stderr[-2000:]  # e.g. a library's deprecation warning at import


def test_no_module_edits_sys_path():
    offenders = [str(p.relative_to(ROOT)) for folder in ("evonorm_core", "classification", "search", "gan",
                                                         "detection", "tools")
                 for p in (ROOT / folder).rglob("*.py") if "sys.path.insert" in p.read_text()]
    assert offenders == []


GENERIC_NAMES = ("search", "gan", "detection", "classification", "tools")


def test_no_installed_distribution_puts_a_generic_name_at_the_top_of_site_packages():
    """After tools/install.sh no distribution (this project's or a dependency's, e.g. detectron2's wheel and
    its scripts) owns a top-level ``search``, ``gan``, ``detection``, ``classification`` or ``tools``."""
    owners = {}
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            top = file.parts[0].removesuffix(".py")
            if len(file.parts) > 1 or file.suffix == ".py":
                owners.setdefault(top, set()).add(dist.metadata["Name"])
    site = [Path(p) for p in sys.path if p.endswith("site-packages")]
    found = {name: sorted(owners[name]) for name in GENERIC_NAMES if name in owners
             and any((root / name).exists() or (root / f"{name}.py").exists() for root in site)}
    assert found == {}
