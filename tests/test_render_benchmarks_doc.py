"""tools/render_benchmarks_doc.py: docs/benchmarks.md's result blocks come from the committed JSON."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("render_benchmarks_doc", ROOT / "tools" / "render_benchmarks_doc.py")
render = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render)
RESULTS = ROOT / "docs" / "results"


def test_placeholders_become_blocks_and_rendering_is_stable():
    doc = ("intro\n\nRESULTS_CAPTURE\n\nmiddle\n\nRESULTS_BENCHMARK\n\n### gpu\n\nRESULTS_BENCHMARK_CUDA\n\n"
           "### matrix\n\nRESULTS_MATRIX\n\n### compiled\n\nRESULTS_COMPILED\n")
    once = render.render_all(doc, RESULTS)
    for name in render.BLOCKS:
        assert f"<!-- {name}:" in once and f"<!-- /{name} -->" in once
        assert f"\n{name}\n" not in once
    assert once.startswith("intro\n") and "\nmiddle\n" in once and "### compiled" in once
    assert render.render_all(once, RESULTS) == once  # the blocks are replaced, not appended


def test_blocks_report_what_the_json_says():
    doc = render.render_all("RESULTS_CAPTURE\nRESULTS_BENCHMARK\nRESULTS_BENCHMARK_CUDA\nRESULTS_MATRIX\n"
                            "RESULTS_COMPILED\n", RESULTS)
    cpu_block, rest = doc.split("<!-- /RESULTS_BENCHMARK -->")
    cuda_block, matrix_block = rest.split("<!-- /RESULTS_BENCHMARK_CUDA -->")
    for block, name in ((cpu_block, "benchmark_layers.json"), (cuda_block, "benchmark_layers_cuda.json")):
        bench = json.loads((RESULTS / name).read_text())
        missed = [t for t in bench["targets"] if not t["met"]]
        met = len(bench["targets"]) - len(missed)
        assert f"targets in this run: {met} of {len(bench['targets'])} met" in block
        assert block.count("- **MISS**") == len(missed)
    bn_relu = next(r for r in bench["layers"] if r["layer"] == "bn_relu (native)")
    assert f"| bn_relu (native) | bn_relu | {bn_relu['ms']:.3g} ms |" in cuda_block  # sub-millisecond GPU times
    assert "the C++ kernels are CPU-only" in cuda_block and "EvoNorm CPU kernels" not in cuda_block
    matrix = json.loads((RESULTS / "benchmark_matrix.json").read_text())["cells"]
    targets = [t for c in matrix for t in c["targets"]]
    missed = [t for t in targets if not t["met"]]
    assert f"matrix's targets in this run: {len(targets) - len(missed)} of {len(targets)} met" in matrix_block
    assert matrix_block.count("- **MISS**") == len(missed)
    for c in matrix:  # one row per combination, with its count of targets met
        assert (f"| {c['layout']} | {c['dtype']} | {c['step']} | {c['batch']} | " in matrix_block
                and f"| {sum(t['met'] for t in c['targets'])} of {len(c['targets'])} |" in matrix_block)
    capture = json.loads((RESULTS / "capture_resnet50.json").read_text())["results"]
    assert f"{sum(r['ok'] for r in capture)} of {len(capture)} checks passed" in doc
    assert "Command: `python tools/benchmark_layers.py" in doc and "load average" in doc


def test_committed_doc_has_the_blocks():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for name in render.BLOCKS:
        assert f"<!-- {name}:" in text, f"run python tools/render_benchmarks_doc.py ({name} missing)"
        assert f"\n{name}\n" not in text


def test_a_document_without_the_placeholder_is_a_clear_error():
    with pytest.raises(SystemExit, match="RESULTS_CAPTURE"):
        render.render_all("no placeholders here\n", RESULTS)


@pytest.mark.parametrize("damage, says", [
    (None, "error: no benchmark result {path}: rerun its benchmark"),
    ('{"min_ms": ', "error: benchmark result {path} is not valid JSON"),
    ('{"command": "x"}',
     "error: benchmark result {path} lacks or mistypes what this renderer reads (KeyError: 'min_ms')"),
    ("[]", "error: benchmark result {path} lacks or mistypes what this renderer reads (TypeError")])
def test_a_missing_damaged_or_other_shaped_result_is_one_error_line_naming_it(tmp_path, damage, says):
    for name in ("capture_resnet50.json", "benchmark_layers.json", "benchmark_layers_cuda.json",
                 "benchmark_matrix.json"):
        (tmp_path / name).write_bytes((RESULTS / name).read_bytes())
    path = tmp_path / "compiled_choice.json"
    if damage is not None:
        path.write_text(damage)
    with pytest.raises(SystemExit) as refused:
        render.main(["--results", str(tmp_path), "--out", "-"])
    assert str(refused.value.code).startswith(says.format(path=path))


def test_roofline_table_and_at_least_targets():
    """A run that timed a copy_: each layer's fraction of the copy rate, the copy's rate (2 passes of 4 MB in
    2 ms: 4 GB/s); a roofline target reads '>=' in percent; a run recorded before copy_ was timed has no table."""
    layer = {"layer": "evonorm_s0 (fused)", "shape": [1, 1, 1024, 1024], "input_bytes": 4_000_000, "copy_ms": 2.0,
             "ms": 16.0, "roofline": 0.5}
    by = {(layer["layer"], render.shape_name(layer["shape"])): layer}
    shape = render.shape_name(layer["shape"])
    lines = render.render_roofline([layer], [shape], [layer["layer"]], by)
    assert f"{shape}: 4.0 GB/s" in lines[1] and lines[-1] == "| evonorm_s0 (fused) | 50 % |"
    old = {k: v for k, v in layer.items() if k not in ("roofline", "copy_ms")}
    assert render.render_roofline([old], [shape], [layer["layer"]], by) == []
    assert render.target_line({"target": "t", "ratio": 0.25, "limit": 0.5, "at_least": True}) == \
        "t: 25 % (target >= 50 %)"
    assert render.target_line({"target": "t", "ratio": 1.25, "limit": 1.0}) == "t: 1.25x (target <= 1.0x)"


def test_matrix_rows_show_the_slowest_layer_of_each_series(tmp_path):
    """One row per combination: per shape the largest S ratio and the largest B ratio, bold above 1.0; each missed
    target listed with its combination."""
    def row(layer, shape, ratio):
        return {"layer": layer, "shape": shape, "ratio": ratio}

    cell = {"layout": "channels_last", "dtype": "bfloat16", "step": "inference", "batch": 2,
            "layers": [row("evonorm_s0 (fused)", [2, 8, 7, 7], 0.5), row("evonorm_s1 (fused)", [2, 8, 7, 7], 0.75),
                       row("evonorm_b0 (fused)", [2, 8, 7, 7], 1.25), row("evonorm_b2 (fused)", [2, 8, 7, 7], 0.25),
                       row("bn_relu (native)", [2, 8, 7, 7], 1.0)],
            "targets": [{"target": "evonorm_b0 inference vs bn_relu (native) at 2x8x7x7", "ratio": 1.25, "limit": 1.0,
                         "met": False},
                        {"target": "evonorm_s1 inference vs gn_silu (native) at 2x8x7x7", "ratio": 0.75, "limit": 1.0,
                         "met": True}]}
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({"config": {"device": "cpu", "threads": 2, "reps": 3, "warmup": 1},
                                "command": "python tools/benchmark_layers.py --matrix", "torch": "2.x",
                                "kernels": "installed", "load_average": [0.1, 0.1, 0.1], "cells": [cell]}))
    block = render.render_matrix(path, "m.png")
    assert "| layout | dtype | pass | batch | S 8x7x7 | B 8x7x7 | targets met |" in block
    assert "| channels_last | bfloat16 | inference | 2 | 0.75 | **1.25** | 1 of 2 |" in block
    assert "targets in this run: 1 of 2 met" in block
    assert ("- **MISS** channels_last bfloat16 batch 2: evonorm_b0 inference vs bn_relu (native) at 2x8x7x7: 1.25x "
            "(target <= 1.0x)") in block
    assert "![layer matrix](m.png)" in block and "is outside this checkout" in block


def test_the_rerun_command_writes_the_files_the_block_reads():
    """A run recorded with --json/--plot elsewhere (a scratch folder, a GPU machine's $OUT) is re-measured into the
    block's own JSON and PNG, its other arguments kept."""
    recorded = "python tools/benchmark_layers.py --device cuda --json /root/out/b.json --reps 20 --plot=/root/out/b.png"
    again = render.rerun_command(recorded, RESULTS / "benchmark_layers_cuda.json")
    assert again == ("python tools/benchmark_layers.py --device cuda --reps 20 --json "
                     "docs/results/benchmark_layers_cuda.json --plot docs/results/benchmark_layers_cuda.png")
    doc = render.render_all("\n".join(render.BLOCKS) + "\n", RESULTS)
    assert "--json docs/results/benchmark_layers.json --plot docs/results/benchmark_layers.png`, then" in doc
    assert "--json docs/results/benchmark_matrix.json --plot docs/results/benchmark_matrix.png`, then" in doc
    assert "/tmp/" not in "".join(line for line in doc.splitlines() if line.startswith("To measure again"))


@pytest.mark.parametrize("load,quiet", [(0.3, True), (2.0, True), (2.5, True), (2.6, False), (3.9, False)])
def test_a_run_is_under_load_only_above_its_own_threads(load, quiet):
    """A 2-thread run keeps the load average near 2 by itself: only above 2.5 did other jobs share the CPUs."""
    note = render.load_note([load, 0.0, 0.0], 2)
    assert ("quiet" in note) == quiet and ("measured under load" in note) == (not quiet)
