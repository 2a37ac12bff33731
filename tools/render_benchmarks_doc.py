"""Writes the result tables of docs/benchmarks.md from the JSON files the benchmarks wrote.

    python tools/render_benchmarks_doc.py            # rewrite the result blocks in place
    python tools/render_benchmarks_doc.py --out -    # print the rendered document instead

It reads ``docs/results/capture_resnet50.json`` (``tools/check_capture.py``),
``benchmark_layers.json`` and ``benchmark_layers_cuda.json`` (``tools/benchmark_layers.py``),
``benchmark_matrix.json`` (``--matrix``) and ``compiled_choice.json`` (``--compare-compiled``) and
replaces the ``RESULTS_CAPTURE``, ``RESULTS_BENCHMARK``, ``RESULTS_BENCHMARK_CUDA``, ``RESULTS_MATRIX``
and ``RESULTS_COMPILED`` blocks of the document: first the bare
placeholder line, later the block between ``<!-- RESULTS_X -->`` and ``<!-- /RESULTS_X -->``.
Nothing is measured here. Each block says when its JSON was committed (git), the command,
the machine load recorded with it, and which files of the code that produced it changed
since; rerun the benchmark on a quiet machine, then `python tools/render_benchmarks_doc.py`.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = ("RESULTS_CAPTURE", "RESULTS_BENCHMARK", "RESULTS_BENCHMARK_CUDA", "RESULTS_MATRIX", "RESULTS_COMPILED")
# the code whose change makes a result stale (kernels, layers, the measuring code)
CODE = ["evonorm_core/ops", "evonorm_core/functional.py", "evonorm_core/formulas.py", "evonorm_core/layers",
        "evonorm_core/statistics.py", "evonorm_core/running_stats.py", "evonorm_core/convert.py",
        "tools/benchmark_layers.py", "tools/check_capture.py"]
EVONORMS = ["evonorm_s0", "evonorm_s1", "evonorm_s2", "evonorm_b0", "evonorm_b1", "evonorm_b2"]
COMPILED_OPERATOR_MIN_NUMEL = 16384  # evonorm_core.functional.COMPILED_OPERATOR_MIN_NUMEL["cpu"], checked below


def git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return done.stdout.strip()


def rerun_command(command: str, path: Path) -> str:
    """``command`` with its ``--json`` and ``--plot`` pointed at the files a block reads (``path`` and the PNG
    beside it), so that running it and then this tool updates the block: the recorded run may have written
    elsewhere (a scratch folder, a GPU machine's output folder)."""
    kept, args = [], iter(shlex.split(command))
    for arg in args:
        if arg in ("--json", "--plot"):
            next(args, None)
        elif not arg.startswith(("--json=", "--plot=")):
            kept.append(arg)
    try:
        target = path.resolve().relative_to(ROOT)
    except ValueError:
        target = path
    return shlex.join([*kept, "--json", str(target), "--plot", str(target.with_suffix(".png"))])


def provenance(path: Path) -> str:
    """When the JSON was committed and whether the code that produced it changed since."""
    try:
        rel = str(path.resolve().relative_to(ROOT))
    except ValueError:
        return f"`{path}` is outside this checkout: its date and the code that produced it are unknown."
    commit = git("log", "-1", "--format=%h %ad", "--date=format:%Y-%m-%d %H:%M UTC", "--", rel)
    if not commit:
        return f"`{rel}` is not committed: its date and the code that produced it are unknown."
    sha, date = commit.split(" ", 1)
    changed = [f for f in git("diff", "--name-only", sha, "HEAD", "--", *CODE).splitlines() if f]
    text = f"`{rel}`, committed {date} (commit {sha})."
    if not changed:
        return text + " The kernels, layers and measuring code have not changed since."
    return (text + f" Changed since then: {', '.join(f'`{f}`' for f in changed)} "
            "(see `git diff " + sha + " HEAD -- " + " ".join(changed) + "`).")


def load_note(load_average, threads: int, timings: bool = True) -> str:
    """The load average recorded at the end of the run, judged against the threads it used: the run's own
    threads keep it near ``threads``, so only half a CPU more than that says other jobs shared the CPUs."""
    load = load_average[0]
    if load <= threads + 0.5:
        return f"load average {load:.1f} when it finished (about its own {threads} threads: quiet)"
    note = f"load average {load:.1f} when it finished: **measured under load** (other jobs shared the CPUs)"
    return note + (", so single ratios are noisy" if timings else "; this affects the times, not the errors")


def kernels_note(kernels: str) -> str:
    """Whether the kernels measured are the ones a build from today's source gives."""
    match = re.search(r"(evonorm_ops_[0-9a-f]{16})", kernels)
    if not match:
        return f"EvoNorm CPU kernels: {kernels}"
    try:  # imported here: the renderer itself runs without torch and the package
        from evonorm_core.ops import extension

        now = extension.jit_name()
    except Exception:  # torch or the package not importable: say nothing more
        return f"EvoNorm CPU kernels: {kernels}"
    same = "the same as" if now == match.group(1) else "NOT the same as"
    return (f"EvoNorm CPU kernels: the just-in-time build `{match.group(1)}`, whose hash of source, flags, CPU, torch "
            f"and Python is {same} a build of today's source here (`{now}`); an installed build is compiled "
            "from the same source and flags")


def device_note(device: str, kernels: str) -> str:
    """Which code the EvoNorms ran: the C++ kernels' provenance on the CPU, the Triton kernels on CUDA."""
    if device.startswith("cpu"):
        return kernels_note(kernels)
    return (f"On {device.upper()} the fused EvoNorms run the operators' Triton kernels "
            "(`evonorm_core/ops/triton_kernels.py`; eager) and Inductor's kernels of the formula (compiled); "
            "the C++ kernels are CPU-only")


def fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def ms_text(ms: float) -> str:
    """A time in milliseconds to about three significant figures ("12 ms", "0.654 ms")."""
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.3g} ms"


def shape_name(shape) -> str:
    return "x".join(map(str, shape))


# ---- capture ---------------------------------------------------------------------------

def render_capture(path: Path) -> str:
    d = json.loads(path.read_text())
    cfg, results = d["config"], d["results"]
    checks = cfg["checks"]
    passed = sum(r["ok"] for r in results)
    lines = [
        f"**Last run:** {provenance(path)} Command: `python tools/check_capture.py --json {cfg['json']}` "
        f"(defaults: torchvision {', '.join(cfg['models'])} with 10 classes converted to each EvoNorm, "
        f"`impl={'/'.join(cfg['impls'])}`, input {cfg['batch']}x3x{cfg['size']}x{cfg['size']} {cfg['dtype']}, "
        f"compile backend {cfg['backend']}), torch {d['torch']}, CPU, {cfg['threads']} threads, "
        f"{load_note(d['load_average'], cfg['threads'], timings=False)}. {kernels_note(d['kernels'])}.",
        "",
        f"**{passed} of {len(results)} checks passed.** Each cell: the largest relative error of the captured "
        "program against eager (outputs; in train mode also parameter gradients and moving averages); "
        "`compile` is `fullgraph=True` (a graph break fails); ONNX runs in eval only, in float32.",
        "",
        "| layer | mode | " + " | ".join(checks) + " |",
        "| --- | --- | " + " | ".join("---" for _ in checks) + " |",
    ]
    rows = {}
    for r in results:
        rows.setdefault((r["model"], r["layer"], r["impl"], r["mode"]), {})[r["check"]] = r
    for (model, layer, impl, mode), cells in rows.items():
        out = []
        for check in checks:
            r = cells.get(check)
            if r is None:
                out.append("-")
            elif not r["ok"]:
                out.append(f"**FAIL** {r['detail'][:60]}")
            else:
                out.append("ok" if r["max_error"] is None else f"ok {r['max_error']:.0e}")
        label = layer if len(cfg["models"]) == 1 and len(cfg["impls"]) == 1 else f"{model} {layer} ({impl})"
        lines.append(f"| {label} | {mode} | " + " | ".join(out) + " |")
    failed = [r for r in results if not r["ok"]]
    lines += ["", "Target, program capture of converted ResNet-50 (fused): "
              + ("**met** (no graph break; export, ONNX Runtime, jit.trace, fx and create_feature_extractor match "
                 "eager)." if not failed else f"**MISS**: {len(failed)} checks failed.")
              + " The reference implementation, every baseline, MobileNetV2, EfficientNet-B0 and the suite's "
              "anchors are covered by `tests/test_capture.py` on small inputs, not by this run."]
    return "\n".join(lines)


# ---- layer benchmark and model step ------------------------------------------------------

# tools/benchmark_layers.py --allocator
ALLOCATORS = {"heap": "glibc malloc keeping freed memory (`--allocator heap`)", "system": "the system malloc"}


def last_run(path: Path, d: dict, setting: str = "") -> str:
    """The first line of a layer-run block: where the JSON came from, its command, ``setting`` (e.g. dtype and
    mode), device, threads, repetitions, torch, load and which kernels ran."""
    cfg = d["config"]
    allocator = ALLOCATORS[cfg.get("allocator", "system")]  # runs before --allocator used the system's
    return (f"**Last run:** {provenance(path)} Command: `{d['command'].strip()}` ({setting}{cfg['device'].upper()}, "
            f"{cfg['threads']} threads, median of {cfg['reps']} interleaved repetitions after {cfg['warmup']} warm-up, "
            f"{allocator}), "
            f"torch {d['torch']}, {load_note(d['load_average'], cfg['threads'])}. {device_note(cfg['device'], d['kernels'])}.")


def render_benchmark(path: Path, png: str) -> str:
    d = json.loads(path.read_text())
    cfg, layers, models, targets = d["config"], d["layers"], d["models"], d["targets"]
    shapes = list(dict.fromkeys(shape_name(r["shape"]) for r in layers))
    by = {(r["layer"], shape_name(r["shape"])): r for r in layers}
    lines = [last_run(path, d, f"{cfg['dtype']}, {'eval' if cfg['eval'] else 'train'} mode, "), ""]
    # how noisy: GN-ReLU and GN-SiLU do the same work and should time alike
    spread = [by[("gn_relu (native)", s)]["ratio"] for s in shapes if ("gn_relu (native)", s) in by]
    if spread:
        lines += [f"Noise gauge: native GN-ReLU against GN-SiLU (nearly the same work: only the activation differs) "
                  f"measured "
                  f"{fmt(min(spread))}-{fmt(max(spread))}x in this run; ratios within that spread of 1 are not "
                  "differences.", ""]
    lines += ["Forward + backward, median time as a multiple of the baseline measured in the same run "
              "(S series and GroupNorm: native GN-SiLU; B series and BatchNorm: native BN-ReLU); last column: "
              "bytes kept for backward / input bytes (largest over the shapes).", "",
              "| layer | vs | " + " | ".join(shapes) + " | kept / input |",
              "| --- | --- | " + " | ".join("---:" for _ in shapes) + " | ---: |"]
    eager = list(dict.fromkeys(r["layer"] for r in layers if not r["compiled"]))
    for name in eager:
        rows = [by.get((name, s)) for s in shapes]
        base = next(r["baseline"] for r in rows if r)
        cells = []
        for r in rows:
            if r is None:
                cells.append("-")
            elif name == r["baseline"]:
                cells.append(ms_text(r['ms']))
            else:
                cells.append(fmt(r["ratio"]))
        kept = max(r["saved_ratio"] for r in rows if r)
        lines.append(f"| {name} | {base.split(' (')[0]} | " + " | ".join(cells) + f" | {fmt(kept)} |")
    lines += render_roofline(layers, shapes, eager, by)
    compiled = list(dict.fromkeys(r["layer"] for r in layers if r["compiled"]))
    if compiled:
        lines += ["", "Under `torch.compile(fullgraph=True)` (Inductor), against the compiled baselines; baseline "
                  "rows: compiled ms (and as a multiple of the same baseline eager). First compilation in seconds "
                  "(largest over the shapes).", "",
                  "| layer | vs | " + " | ".join(shapes) + " | compile s |",
                  "| --- | --- | " + " | ".join("---:" for _ in shapes) + " | ---: |"]
        for name in compiled:
            rows = [by.get((name, s)) for s in shapes]
            base = next(r["baseline"] for r in rows if r)
            cells = []
            for s, r in zip(shapes, rows):
                if r is None:
                    cells.append("-")
                elif name == r["baseline"]:
                    eager_ms = by.get((name.replace(" compiled", ""), s))
                    cells.append(ms_text(r['ms']) + (f" ({fmt(r['ms'] / eager_ms['ms'])}x eager)" if eager_ms else ""))
                else:
                    cells.append(fmt(r["ratio"]))
            lines.append(f"| {name} | {base.split(' (')[0]} | " + " | ".join(cells)
                         + f" | {max(r['compile_s'] for r in rows if r):.1f} |")
    for arch in dict.fromkeys(m.get("model", "resnet50") for m in models):
        rows = [m for m in models if m.get("model", "resnet50") == arch]
        m0 = rows[0]
        timing = (f"{cfg['model_reps']} interleaved rounds; time ratio: the median over rounds of each round's ratio"
                  if "round_ratios" in m0 else f"median of {cfg['model_reps']}")  # older files: medians only
        lines += ["", f"Whole torchvision {m0.get('label', 'ResNet-50')}, one SGD training step (batch {m0['batch']}, "
                  f"{m0['size']}x{m0['size']}, {timing}), peak tensor memory of the step:", "",
                  "| step | EvoNorm ms | baseline ms | time ratio | rounds (min-max) | min ratio | EvoNorm MB | baseline MB "
                  "| memory ratio |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for m in rows:
            (ev, ev_ms), (bl, bl_ms) = m["ms"].items()
            kind = "compiled" if m["compiled"] else "eager"
            min_ratio = fmt(m["min_ratio"]) if "min_ratio" in m else "-"  # not recorded before
            rounds = m.get("round_ratios")
            spread = f"{fmt(min(rounds))}-{fmt(max(rounds))}" if rounds else "-"  # not recorded before
            lines.append(f"| {kind} {ev} vs {bl.split(' (')[0]} | {ev_ms:.0f} | {bl_ms:.0f} | {fmt(m['ratio'])} | "
                         f"{spread} | {min_ratio} | {m['peak_mb'][ev]:.0f} | {m['peak_mb'][bl]:.0f} | "
                         f"{fmt(m['memory_ratio'])} |")
    met = [t for t in targets if t["met"]]
    missed = [t for t in targets if not t["met"]]
    lines += ["", f"**The speed targets in this run: {len(met)} of {len(targets)} met.**"
              + (" MISS:" if missed else "")]
    lines += [f"- **MISS** {target_line(t)}" for t in missed]
    stage = [t for t in met if not is_model_target(t)]
    model_met = [t for t in met if is_model_target(t)]
    if stage:
        lines.append(f"- met: {len(stage)} of {sum(not is_model_target(t) for t in targets)} per-stage "
                     "layer targets: " + "; ".join(target_line(t) for t in stage))
    lines += [f"- met: {target_line(t)}" for t in model_met]
    lines += ["", f"![layer benchmark]({png})", "",
              f"To measure again, on a quiet machine (a few minutes, most of it compiling): "
              f"`{rerun_command(d['command'], path)}`, then `python tools/render_benchmarks_doc.py`."]
    return "\n".join(lines)


def is_model_target(t: dict) -> bool:
    """A whole-model step's target (runs before MobileNetV2 was timed name ResNet-50 in the text only)."""
    return "model" in t or "ResNet-50" in t["target"]


def target_line(t: dict) -> str:
    """A speed target as ``what: measured (target <= limit)``; roofline fractions read ``>=``."""
    if t.get("at_least"):
        return f"{t['target']}: {100 * t['ratio']:.0f} % (target >= {100 * t['limit']:.0f} %)"
    return f"{t['target']}: {fmt(t['ratio'])}x (target <= {t['limit']}x)"


def render_roofline(layers: list[dict], shapes: list[str], eager: list[str], by: dict) -> list[str]:
    """The fraction of the copy rate each eager layer's fwd+bwd reaches per shape (runs that timed a copy_)."""
    if not all("roofline" in r for r in layers):
        return []  # recorded before the benchmark timed a copy_
    first = {shape_name(r["shape"]): r for r in reversed(layers)}
    rates = [f"{s}: {2 * first[s]['input_bytes'] / first[s]['copy_ms'] / 1e6:.1f} GB/s" for s in shapes]
    lines = ["", "Roofline: each layer's fwd+bwd as a fraction of the rate of `copy_` of the same input, timed in "
             "the same rounds, counting 8 passes over the input (forward: read x for the moments, read x and write "
             "y; backward: read x and dy for the per-plane sums, read x and dy and write dx) against the copy's 2. "
             f"Copy rates (read + write): {', '.join(rates)}.", "",
             "| layer | " + " | ".join(shapes) + " |", "| --- | " + " | ".join("---:" for _ in shapes) + " |"]
    for name in eager:
        cells = [f"{100 * r['roofline']:.0f} %" if (r := by.get((name, s))) else "-" for s in shapes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


# ---- the matrix: layouts, dtypes, passes, batches -----------------------------------------

def render_matrix(path: Path, png: str) -> str:
    """Per combination (layout, dtype, pass, batch) and stage shape, the worst fused ratio of each series."""
    d = json.loads(path.read_text())
    cells = d["cells"]
    shapes = list(dict.fromkeys(shape_name(r["shape"][1:]) for c in cells for r in c["layers"]))
    targets = [t for c in cells for t in c["targets"]]
    missed = [(c, t) for c in cells for t in c["targets"] if not t["met"]]
    lines = [
        last_run(path, d),
        "",
        "The slowest fused EvoNorm of each series at each stage shape (C x H x W; the batch is the row's), as a "
        "multiple of its baseline's median time in the same rounds (S: native GN-SiLU, B: native BN-ReLU); above "
        "1.00 in bold. fwd+bwd: train mode, dense upstream gradient; inference: one forward in eval mode under "
        "`torch.inference_mode`.",
        "",
        "| layout | dtype | pass | batch | " + " | ".join(f"S {s} | B {s}" for s in shapes) + " | targets met |",
        "| --- | --- | --- | ---: | " + " | ".join("---: | ---:" for _ in shapes) + " | ---: |",
    ]
    for c in cells:
        ratios = []
        for s in shapes:
            for series in ("s", "b"):
                rows = [r["ratio"] for r in c["layers"] if r["layer"].startswith(f"evonorm_{series}")
                        and shape_name(r["shape"][1:]) == s]
                worst = max(rows) if rows else math.nan
                ratios.append(f"**{fmt(worst)}**" if worst > 1.0 else fmt(worst))
        met = sum(t["met"] for t in c["targets"])
        lines.append(f"| {c['layout']} | {c['dtype']} | {c['step']} | {c['batch']} | " + " | ".join(ratios)
                     + f" | {met} of {len(c['targets'])} |")
    lines += ["", f"**The matrix's targets in this run: {len(targets) - len(missed)} of {len(targets)} met** (every "
              "fused layer <= 1.0x its baseline in every cell; the copy-rate fraction >= 50 % for fwd+bwd at the "
              "largest batch where planes are 28 x 28 or larger)." + (" MISS:" if missed else "")]
    lines += [f"- **MISS** {c['layout']} {c['dtype']} batch {c['batch']}: {target_line(t)}" for c, t in missed]
    lines += ["", f"![layer matrix]({png})", "",
              f"To measure again, on a quiet machine: `{rerun_command(d['command'], path)}`, then "
              "`python tools/render_benchmarks_doc.py`."]
    return "\n".join(lines)


# ---- compiled: operator or formula -------------------------------------------------------

def render_compiled(path: Path) -> str:
    d = json.loads(path.read_text())
    op, formula = d["min_ms"]["operator"], d["min_ms"]["formula"]
    lines = [
        f"**Last run:** {provenance(path)} Command: `{d['command'].strip()}`, torch {d['torch']}, CPU, "
        f"2 threads (the command's default), {load_note(d['load_average'], 2)}. Fwd+bwd of one compiled layer (minimum over the repetitions), "
        "each mode in a fresh process.",
        "",
        "| shape | elements | layer | operator ms | formula ms | formula / operator | faster | "
        f"`fused` runs (>= {COMPILED_OPERATOR_MIN_NUMEL} elements: operator) |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- | --- |",
    ]
    disagree = []
    for shape, times in op.items():
        numel = math.prod(int(n) for n in shape.split("x"))
        chosen = "operator" if numel >= COMPILED_OPERATOR_MIN_NUMEL else "formula"
        for name, ms in times.items():
            f_ms = formula[shape][name]
            faster = "operator" if ms <= f_ms else "formula"
            if faster != chosen:
                disagree.append(f"{name} at {shape} ({fmt(f_ms / ms)})")
            lines.append(f"| {shape} | {numel:,} | {name} | {ms:.1f} | {f_ms:.1f} | {fmt(f_ms / ms)} | {faster} | "
                         f"{chosen}{'' if faster == chosen else ' (slower here)'} |")
    lines += [""]
    if disagree:
        summary = "The choice disagrees with this run at: " + "; ".join(disagree) + "."
    else:
        summary = "The choice agrees with this run at every shape measured."
    smallest = min(math.prod(int(n) for n in s.split("x")) for s in op)
    if smallest >= COMPILED_OPERATOR_MIN_NUMEL:
        summary += (f" This run has no shape below the {COMPILED_OPERATOR_MIN_NUMEL:,}-element threshold, so it "
                     "shows the operator is chosen where it was faster, but not where the formula becomes the "
                     "faster one: the threshold rests on a smaller-shape measurement that is not among the "
                     "committed results. To check it (on a quiet machine), add small shapes to this file: "
                     "`python tools/benchmark_layers.py --compare-compiled --shapes 8x64x8x8 16x64x14x14 "
                     "16x256x56x56 16x512x28x28 16x1024x14x14 16x2048x7x7`, then `python tools/render_benchmarks_doc.py`.")
    lines.append(summary)
    return "\n".join(lines)


def rendered(render: Callable[..., str], path: Path, *args: str) -> str:
    """``render(path, *args)``; a result file that is missing, not JSON or not of the shape the renderer reads
    is one error line naming it."""
    fix = "rerun its benchmark (the command in docs/benchmarks.md) or restore it (git checkout)"
    try:
        return render(path, *args)
    except FileNotFoundError:
        raise SystemExit(f"error: no benchmark result {path}: {fix}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SystemExit(f"error: benchmark result {path} is not valid JSON ({error}): {fix}") from None
    except (KeyError, TypeError, IndexError) as error:
        raise SystemExit(f"error: benchmark result {path} lacks or mistypes what this renderer reads "
                         f"({type(error).__name__}: {error}); it was written by another version: {fix}") from None


def render_all(doc: str, results: Path) -> str:
    blocks = {
        "RESULTS_CAPTURE": rendered(render_capture, results / "capture_resnet50.json"),
        "RESULTS_BENCHMARK": rendered(render_benchmark, results / "benchmark_layers.json",
                                      "results/benchmark_layers.png"),
        "RESULTS_BENCHMARK_CUDA": rendered(render_benchmark, results / "benchmark_layers_cuda.json",
                                           "results/benchmark_layers_cuda.png"),
        "RESULTS_MATRIX": rendered(render_matrix, results / "benchmark_matrix.json", "results/benchmark_matrix.png"),
        "RESULTS_COMPILED": rendered(render_compiled, results / "compiled_choice.json"),
    }
    for name, body in blocks.items():
        text = (f"<!-- {name}: written by tools/render_benchmarks_doc.py from docs/results; do not edit by hand -->\n"
                f"{body}\n<!-- /{name} -->")
        block = re.compile(rf"<!-- {name}[ :].*?<!-- /{name} -->", re.S)
        if block.search(doc):
            doc = block.sub(lambda _: text, doc, count=1)
        elif re.search(rf"^{name}$", doc, re.M):
            doc = re.sub(rf"^{name}$", lambda _: text, doc, count=1, flags=re.M)
        else:
            raise SystemExit(f"{name}: neither its placeholder line nor its block is in the document")
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md", help="document to fill")
    p.add_argument("--results", type=Path, default=ROOT / "docs" / "results", help="folder of the JSON results")
    p.add_argument("--out", default=None, help="write here instead of over --doc ('-': standard output)")
    args = p.parse_args(argv)
    try:  # imported here: the renderer itself runs without torch and the package
        from evonorm_core import functional

        actual = functional.COMPILED_OPERATOR_MIN_NUMEL.get("cpu")
        if actual != COMPILED_OPERATOR_MIN_NUMEL:
            raise SystemExit(f"functional.COMPILED_OPERATOR_MIN_NUMEL['cpu'] is {actual}, this script assumes "
                             f"{COMPILED_OPERATOR_MIN_NUMEL}: update it")
    except ImportError:
        pass
    doc = render_all(args.doc.read_text(), args.results.resolve())
    if args.out == "-":
        sys.stdout.write(doc)
    else:
        Path(args.out or args.doc).write_text(doc)
        print(f"wrote {args.out or args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
