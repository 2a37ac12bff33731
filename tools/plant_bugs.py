#!/usr/bin/env python3
"""Plant bugs in the C++ code (the CPU kernels and the eager autograd nodes) one at a time, in a copy of the tree,
and check that their tests fail.

    python3 tools/plant_bugs.py --list                                  # the plants, nothing run
    python3 tools/plant_bugs.py --validate                              # does every snippet still apply? nothing run
    nice -n 5 python3 tools/plant_bugs.py --json docs/results/planted_bugs_cpp.json   # every plant (~40 min here)
    nice -n 5 python3 tools/plant_bugs.py --only K3 K12                 # some plants again

The Python modules are mutation-tested mechanically (``tools/mutation.py``, mutmut); a Python mutation
tool does not reach ``evonorm_core/ops/csrc/``, so the kernels keep hand-written plants (:data:`PLANTS`):
small, realistic bugs of the kinds a kernel gets wrong (a reduction's count, a block's accumulation, a
layout's index, a gradient's term, the float exp polynomial), each with the tests that should notice it.
They come from the earlier planted-bug sets, whose Python plants mutmut replaces; those sets, their
snippets and their verdicts stay in ``docs/results/planted_bugs*.json`` and in the history of this file.

Each plant names an exact snippet of the kernel source (found exactly once), its replacement, the
tests that should notice (pytest node ids) and what the bug is. For each plant the library and the
tests are copied to a temporary folder, the snippet is replaced in the copy, and ``python3 -m pytest
-x -q <its tests>`` runs there with a time limit, the kernels built just in time from the planted
source into the copy's own cache (a minute or two); the folder is deleted afterwards. Nothing in the
working tree is modified, so a run can go on beside other work that imports the library from it.
Verdicts: ``caught`` (pytest reported a failed test or a collection error: exit status 1 or 2),
``missed`` (every test passed), ``timeout``, ``error`` (pytest could not run the selection: status
3-5) and ``stale`` (the snippet is no longer in the source exactly once: the code was rewritten;
update the plant). ``--validate`` lists the stale plants and exits 1 if there are any; the opt-in
``python3 -m pytest tests/mutation`` checks the same (the default test run does not depend on the
text of any line).

Before the first plant, the union of the selected plants' tests runs once on an unplanted copy: a
test that fails there would turn every plant it guards into a false catch (``--skip-clean-check``
skips this). ``--json PATH`` writes every plant with its verdict, the test that failed and the time
taken; with ``--only`` an existing file is updated (``before``: each plant's first verdict, ``after``:
the latest; every run is listed under ``runs``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT = 900.0
CAUGHT, MISSED, TIMEOUT, ERROR, STALE = "caught", "missed", "timeout", "error", "stale"
# what a planted copy holds: the library (the kernels' sources included, the built kernels not) and the tests
COPIED = ("evonorm_core", "tests", "pyproject.toml")
NOT_COPIED = shutil.ignore_patterns("__pycache__", "_C*.so", ".hypothesis")


@dataclass(frozen=True)
class Plant:
    """One planted bug: ``original`` (exactly once in ``file``) becomes ``replacement``."""

    id: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    description: str


@dataclass
class Verdict:
    """What running a plant's tests gave."""

    id: str
    result: str
    seconds: float
    detail: str = ""  # the first failing test, pytest's summary line when nothing failed, or why it is stale


FAST = "tests/test_fast_layers.py"
CPP = "evonorm_core/ops/csrc/evonorm_ops.cpp"
EAGER = "evonorm_core/ops/csrc/eager_autograd.cpp"
EAGER_TEST = f"{FAST}::test_eager_entry_point_is_the_registered_autograd"


def cpp(mode: str, dtype: str, layout: str) -> str:
    """The C++-kernel test of ``mode`` (layer-training-given) with per-channel affine."""
    return f"{FAST}::test_cpp_kernels_match_paper[{mode}-torch.{dtype}-{layout}-channel]"


def plant(id: str, original: str, replacement: str, tests: tuple[str, ...] | str, description: str) -> Plant:
    """A :class:`Plant` of the kernel source; ``tests`` may be one node id or file."""
    return Plant(id, CPP, original, replacement, (tests,) if isinstance(tests, str) else tuple(tests), description)


# Ids as in the planted-bug sets they come from (K1-K4 "original", K5-K7 "fresh2", K8-K10 "fresh3",
# K11-K14 "fresh4", K15-K17 "fresh5", K18-K19 "fresh6"; K20-K21 the affine operator's, K22-K24 the S forward's
# over small planes' runs and K25-K28 the AVX-512 plane loops, all 2026-11-30: on a CPU without AVX-512 the code
# K25-K28 plant into is not compiled, so they are missed there); K5 and K13 were rewritten with the NCHW group
# moments, and K3, K7-K11, K14, K16, K17 and K19 on 2026-11-30 for the kernels' current text (the same mistakes in
# the new text; their old snippets had gone stale), K10 and K16 again for the S backward's shared bookkeeping,
# K4 and K28 on 2026-12-01 for exp_negated (one coefficient table; K28 now the lanes' scalef); K29-K31 the eager
# C++ autograd nodes' (csrc/eager_autograd.cpp, 2026-12-01); K32-K33 the AVX-512 S backward's large planes and
# sigmoid arrays (2026-12-01, later), K34 the lanes' bfloat16 store (2026-12-02), K35-K36 the channels_last B
# backward's sums written in place (2026-12-02, later); K37-K39 the NCHW B inference on lanes and the lanes'
# bfloat16 store by vcvtneps2bf16 (2026-12-02, evening); K40-K41 the NCHW B training forward on lanes and K42-K43
# the NCHW B backward on lanes (2026-12-02, afternoon).
PLANTS: list[Plant] = [
    plant("K1", "spread += std::max(s2[c] / s.HW - offset * offset, 0.0) + (m - mu) * (m - mu);",
          "spread += std::max(s2[c] / s.HW - offset * offset, 0.0);",
          (cpp("evonorm_s0-True-False", "float32", "channels_last"),
           cpp("evonorm_s1-True-False", "float64", "channels_last")),
          "channels_last group variance drops the spread of the channel means (Chan's between-term)"),
    plant("K2", "const double M = static_cast<double>(Cg * s.HW);", "const double M = static_cast<double>(s.HW);",
          (cpp("evonorm_s0-True-False", "float32", "nchw"), cpp("evonorm_s2-True-False", "float64", "nchw")),
          "S backward divides the group-statistic gradient by H W instead of C/G H W"),
    plant("K3", "kb[c] = dsb[c] / (sbd[c] * static_cast<double>(s.N * s.HW));",
          "kb[c] = dsb[c] / (sbd[c] * static_cast<double>(s.HW));",
          (cpp("evonorm_b0-True-False", "float32", "nchw"), cpp("evonorm_b1-True-False", "float64", "channels_last")),
          "B backward: the batch-variance term of dx forgets the batch size N"),
    plant("K4", "0x1.573a54p-5f, ", "0x1.573a54p-4f, ",
          (cpp("evonorm_s0-True-False", "float32", "nchw"), cpp("evonorm_s1-True-False", "bfloat16", "channels_last")),
          "float exp polynomial: 4th-order coefficient doubled (float32/half paths only; float64 uses std::exp)"),
    plant("K5", "var = std::max(s2 / L - offset * offset, 0.0);", "var = std::max(s2 / L, 0.0);", FAST,
          "NCHW group variance: the second moment about the group's first value, its shift not taken out"),
    plant("K6", "kk0 = centered ? -kk * mean[ng] : 0.0", "kk0 = centered ? kk * mean[ng] : 0.0", FAST,
          "S backward (S0/S1): the group mean's term of dx with the wrong sign"),
    plant("K7", "dv = param_grad(sums.get() + 1 * NC, *v1, s.N, s.C)", "dv = param_grad(sums.get(), *v1, s.N, s.C)", FAST,
          "B0 backward: dv1 summed from U (sum dd) instead of UX (sum dd x)"),
    plant("K8", "per_sample_ = data_.dim() == 2;", "per_sample_ = data_.dim() > 2;", FAST,
          "per-sample (N, C) gamma/beta read as per channel: every sample gets the first sample's row"),
    plant("K9", "const double kk = (with_ux ? u[c] + ux[c] : u[c]) / (q[c] * static_cast<double>(HW));",
          "const double kk = u[c] / (q[c] * static_cast<double>(HW));", FAST,
          "B1 backward: p = q depends on x too, but the UX term of q's gradient is dropped"),
    plant("K10", "a[i] = static_cast<A>(w(n, c) * r);", "a[i] = static_cast<A>(r);", FAST,
          "S backward: dx leaves out gamma (g r s' instead of g r gamma s')"),
    plant("K11", "q_out[nc] = static_cast<A>(std::sqrt((variant == 0 ? var[nc] : var[nc] + mean[nc] * mean[nc]) + eps));",
          "q_out[nc] = static_cast<A>(std::sqrt(var[nc] + eps));", FAST,
          "B1/B2 forward: q from the instance variance instead of the mean square mu_wh(x^2)"),
    plant("K12", "for (i64 c = 0; c < C; c++) s1[c] += b1[c], s2[c] += b2[c];",
          "for (i64 c = 0; c < C; c++) s1[c] = b1[c], s2[c] = b2[c];", FAST,
          "channels_last moments: each block of 256 rows overwrites the sums instead of adding to them"),
    plant("K13", "mean = k + offset;", "mean = offset;", FAST,
          "NCHW group mean without the shift (the group's first value) added back: S2's rstd, S0/S1's backward"),
    plant("K14", "const bool with_ux = variant == 1, centered = variant == 0;",
          "const bool with_ux = variant == 1, centered = variant != 2;", FAST,
          "B backward: B1 gets the instance-mean term of dx that only B0's centered q has"),
    plant("K15", "const int32_t scale_bits = (static_cast<int32_t>(k) + 127) << 23;",
          "const int32_t scale_bits = (static_cast<int32_t>(k) + 126) << 23;", FAST,
          "float exp: exponent bias 126 instead of 127, every float32/half sigmoid reads exp(-z) / 2"),
    plant("K16", "dgamma[nc] = t[i][0] * r;", "dgamma[nc] = t[i][0];", FAST,
          "S backward: dgamma sums g x s without the group rstd r"),
    plant("K17", "return per_nc_sum[n * C + c];", "return per_nc_sum[c * N + n];", FAST,
          "per-channel parameter gradients summed over (n, c) sums indexed as (c, n): wrong elements added"),
    plant("K18", "var = std::max(s2 / L - offset * offset, 0.0);",
          "var = std::max(s2 / (L - 1) - offset * offset, 0.0);", FAST,
          "NCHW run moments (per-(n, c) instance and per-(n, group)): the mean square divided by L - 1 instead of L"),
    plant("K19", "s.HW, v(0, c), w(n, c) * r,", "s.HW, A(1), w(n, c) * r,", FAST,
          "S forward kernel: the gate is sigmoid(x), v1 ignored"),
    plant("K20", "dx[j] = static_cast<U>(gj * w);", "dx[j] = static_cast<U>(gj);",
          (cpp("affine-True-False", "float32", "nchw"), cpp("affine-True-False", "float64", "nchw")),
          "NCHW affine backward: dx leaves out gamma (g instead of g gamma)"),
    plant("K21", "for (i64 c = 0; c < s.C; c++) gx[c] += acc[c], gs[c] += acc[s.C + c];",
          "for (i64 c = 0; c < s.C; c++) gx[c] = acc[c], gs[c] = acc[s.C + c];",
          (cpp("affine-True-False", "float32", "channels_last"), cpp("affine-True-False", "float64", "channels_last")),
          "channels_last affine backward: each block of 256 rows overwrites the parameter sums instead of adding"),
    plant("K22", "if (runs && gi != expanded_group) {", "if (runs && expanded_group < 0) {", FAST,
          "NCHW S forward over small planes' runs: v, gamma and beta expanded for a thread's first group only"),
    plant("K23", "expand_planes(e + 2 * L, b.row(0) + c0, Cg, s.HW);", "expand_planes(e + 2 * L, b.row(0), Cg, s.HW);",
          FAST, "NCHW S forward over small planes' runs: every group gets the first group's betas"),
    plant("K24", "i64 expanded_group = -1;", "i64 expanded_group = runs && begin % s.N != 0 ? begin / s.N : -1;",
          f"{FAST}::test_s_forward_over_runs_of_small_planes_matches_paper_where_threads_split_a_group",
          "NCHW S forward over small planes' runs: a thread that starts inside a group takes it as already expanded"),
    plant("K25", "if (end <= j + WIDTH) {", "if (end < j + WIDTH) {", FAST,
          "AVX-512 run of planes: a plane that ends with a vector is not ended there; its sums run into the next"),
    plant("K26", "next_sums[k] = _mm512_mask_add_ps(next_sums[k], lanes::Mask(~here), next_sums[k], terms[k]);",
          "next_sums[k] = next_sums[k];", FAST,
          "AVX-512 S backward over a run of planes: a vector's lanes past a plane's end are dropped from the next's sums"),
    plant("K27", "next_ = splat(values_[std::min(p + 2, planes_ - 1)]);",
          "next_ = splat(values_[std::min(p + 1, planes_ - 1)]);", FAST,
          "AVX-512 run of planes: after a plane ends, the next-but-one plane's v (and gamma r) is the next one's"),
    plant("K28", "return _mm512_scalef_ps(p, k);", "return _mm512_scalef_ps(p, _mm512_sub_ps(k, splat(1.0f)));",
          FAST, "AVX-512 exp: 2^(k - 1) for 2^k, the vector S loops' sigmoid reads exp(-z) / 2 (K15 is the scalar one's)"),
    Plant("K29", EAGER, "if (saved[i].defined()) wanted[i] = ctx->needs_input_grad(edge++);",
          "if (saved[i].defined()) wanted[i] = ctx->needs_input_grad(i);", (EAGER_TEST,),
          "eager C++ autograd node: an input's edge taken as its argument index, wrong once an optional before it is absent"),
    Plant("K30", EAGER, "return through_registered_autograd(y, grad, saved, wanted, 7);\n        }\n        auto [dx, dweight, dbias, dv1] =",
          "}\n        auto [dx, dweight, dbias, dv1] =", (EAGER_TEST,),
          "eager S node: create_graph=True gets the first-order backward (gradients that cannot be differentiated again)"),
    Plant("K31", EAGER, "wanted[4] ? dvar : Tensor(),", "Tensor(),", (EAGER_TEST,),
          "eager B node: the gradient of a given batch variance (synchronized training, eval) is dropped"),
    plant("K32", "const i64 o = p * HW + j0 + j;", "const i64 o = j0 + j;", FAST,
          "AVX-512 S backward over planes of more than 256 values: every plane of a pair sums the first plane's values"),
    plant("K33", "lanes::sigmoid(_mm512_mul_ps(lanes::load(v + j, m), lanes::load(x + j, m)))",
          "lanes::sigmoid(_mm512_mul_ps(lanes::load(v, m), lanes::load(x + j, m)))", FAST,
          "AVX-512 sigmoid arrays (small planes' runs, channels_last rows): every vector takes the first 16 values' v"),
    plant("K34", "__m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);",
          "__m512i rounded = _mm512_srli_epi32(bits, 16);",
          f"{FAST}::test_s_forward_in_bfloat16_is_its_float32_forward_rounded_to_nearest_even",
          "AVX-512 lanes' bfloat16 store: float32 truncated to bfloat16 instead of rounded to nearest even"),
    plant("K35", "if (i0 == 0)\n                for (i64 c = 0; c < C; c++) out[c] = in[c];",
          "if (true)\n                for (i64 c = 0; c < C; c++) out[c] = in[c];", FAST,
          "channels_last B backward, samples of more than one block of rows: each block's sums replace the last's"),
    plant("K36", "double* __restrict out = sums + k * stride;", "double* __restrict out = sums + k * C;", FAST,
          "channels_last B backward: a sample's sums written at the sample's own width, over the next samples' sums"),
    plant("K37", "if (!_mm512_fpclass_ps_mask(v, 0x01 | 0x20 | 0x80)) {", "if (true) {", FAST,
          "AVX-512 lanes' bfloat16 store: vcvtneps2bf16 for every vector (subnormals flushed to zero, NaN payloads kept)"),
    plant("K38", "(l % 8) / G * 2 * G + (l % 8) % G + shift;", "(l % 8) / G * 2 * G + (l % 8) % G;", FAST,
          "AVX-512 B inference: each fold adds a lane to itself, so a plane's moments sum half its lanes twice"),
    plant("K39", "{ return number ? _mm512_max_ps(sb, u) : sb; }",
          "{ return _mm512_max_ps(sb, u); }",
          "tests/test_layers_bad_inputs.py::test_fused_and_reference_agree_on_a_bad_moving_variance_in_eval",
          "AVX-512 B operators: a NaN moving variance loses the max to the instance part (vmaxps returns its second "
          "operand), a finite output where the formula's is NaN"),
    plant("K40", "return static_cast<__mmask8>((1u << std::clamp<i64>(count - 8 * h, 0, 8)) - 1);",
          "return static_cast<__mmask8>((1u << std::clamp<i64>(count - 8 * h, 0, 7)) - 1);", FAST,
          "AVX-512 B training moments and backward sums: the last plane of each eight left unwritten (stale values)"),
    plant("K41", "for (i64 nc = nc0; nc < nc1; nc++) plane_q(nc);\n                    b_outputs_on_lanes",
          "for (i64 nc = nc0 + 1; nc < nc1; nc++) plane_q(nc);\n                    b_outputs_on_lanes", FAST,
          "AVX-512 B training output: the first plane of each run output with an unwritten q"),
    plant("K42", "t[1] = _mm512_mask3_fnmadd_ps(gwzr, xj, t[1], to_u);",
          "t[1] = _mm512_mask3_fnmadd_ps(gwzr, xj, t[1], to_sb);", FAST,
          "AVX-512 B backward: UX summed where the gradient goes to the batch side (B0's dv1, B1's dx wrong)"),
    plant("K43", "_mm512_add_ps(_mm512_fmadd_ps(kv, xj, _mm512_sub_ps(gd, toward_u)), k0v)",
          "_mm512_add_ps(_mm512_fmadd_ps(kv, xj, _mm512_sub_ps(gd, toward_u)), kv)", FAST,
          "AVX-512 B backward: dx adds k where k0 belongs (the mean's part of the gradient)"),
]


# ---- running the plants ------------------------------------------------------------------

def occurrences(p: Plant) -> int:
    """How often ``p``'s snippet occurs in its file in the working tree."""
    return (ROOT / p.file).read_text(encoding="utf-8").count(p.original)


def stale_reason(p: Plant) -> str:
    """The ``stale`` verdict's detail: the file and the snippet that is not found exactly once."""
    count = occurrences(p)
    where = f"{p.file} holds the snippet {count} times (expected once)" if count else f"{p.file} no longer holds it"
    return f"stale: {where}; update the plant. Snippet: {p.original!r}"


def copy_tree(destination: Path) -> None:
    """The library and the tests of the working tree (not the built kernels nor bytecode) in ``destination``."""
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=NOT_COPIED)
        else:
            shutil.copy2(source, destination / name)


def first_failure(output: str) -> str:
    """The first ``FAILED``/``ERROR`` line of pytest's short summary, else the last line (e.g. "3 passed in 9s")."""
    lines = output.strip().splitlines()
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:300]
    return lines[-1][:300] if lines else ""


def run_in_copy(tree: Path, command: list[str], timeout: float) -> tuple[int | None, str]:
    """``(exit status or None on timeout, output)`` of ``command`` run in ``tree``, whose library it imports
    (``python -m`` puts the working folder first on the path) and whose kernels it builds into ``tree/cache``;
    the whole process group dies with it."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "EVONORM_CACHE_DIR": str(tree / "cache"),
           "EVONORM_JIT": "1"}
    proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return None, proc.communicate()[0]
    finally:
        if proc.poll() is None:  # interrupted: our pytest and its children go too
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def pytest_command(tests: tuple[str, ...], stop_first: bool = True) -> list[str]:
    return [sys.executable, "-m", "pytest", *(["-x"] if stop_first else []), "-q", "-n", "0", "-p", "no:cacheprovider",
            "-p", "no:randomly", *tests]


def verdict_of(status: int | None) -> str:
    """pytest's exit status as a verdict (1: tests failed, 2: collection error; None: timed out)."""
    if status is None:
        return TIMEOUT
    return {0: MISSED, 1: CAUGHT, 2: CAUGHT}.get(status, ERROR)


def run_plant(p: Plant, timeout: float) -> Verdict:
    """Plant ``p`` in a fresh copy of the tree and run its tests there; a stale plant is not run."""
    if occurrences(p) != 1:
        return Verdict(p.id, STALE, 0.0, stale_reason(p))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"plant-{p.id}-") as folder:
        tree = Path(folder)
        copy_tree(tree)
        planted = tree / p.file
        planted.write_text(planted.read_text(encoding="utf-8").replace(p.original, p.replacement), encoding="utf-8")
        status, output = run_in_copy(tree, pytest_command(p.tests), timeout)
    return Verdict(p.id, verdict_of(status), round(time.monotonic() - start, 1), first_failure(output))


def clean_check(plants: list[Plant], timeout: float) -> None:
    """Run the union of ``plants``' tests on an unplanted copy; exit if any fails or the copy's library is not
    the one imported."""
    tests = tuple(dict.fromkeys(t for p in plants for t in p.tests))
    print(f"clean check: {len(tests)} test selections on an unplanted copy ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="plant-clean-") as folder:
        tree = Path(folder)
        copy_tree(tree)
        status, output = run_in_copy(tree, [sys.executable, "-c", "import evonorm_core; print(evonorm_core.__file__)"],
                                     timeout)
        if status != 0 or not output.strip().splitlines()[-1].startswith(str(tree)):
            sys.exit(f"the copy's library is not the one its tests would import:\n{output}")
        status, output = run_in_copy(tree, pytest_command(tests, stop_first=False), timeout * 3)
    if status != 0:
        sys.exit(f"clean check failed (pytest status {status}); fix the tree or the selections first:\n"
                 + "\n".join(output.strip().splitlines()[-30:]))


# ---- reporting -----------------------------------------------------------------------------

def tally(results: dict[str, str]) -> dict:
    """Counts of each verdict in ``results`` (plant id -> verdict) and the fraction caught."""
    counts = {k: sum(r == k for r in results.values()) for k in (CAUGHT, MISSED, TIMEOUT, ERROR, STALE)}
    total = len(results)
    return {"total": total, **counts, "caught_fraction": round(counts[CAUGHT] / total, 3) if total else 0.0}


def previous_results(path: Path) -> dict:
    """The results file a partial rerun updates (empty if there is none); exits with one line naming it if it is
    not one, before any plant runs."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(data, dict) and isinstance(data.get("runs", []), list)
                and all(isinstance(e, dict) and isinstance(e.get("id"), str) for e in data.get("plants", []))):
            raise ValueError("not an object with a runs list and plants that have an id")
    except (ValueError, UnicodeDecodeError) as error:  # json.JSONDecodeError included
        sys.exit(f"error: --json {path} cannot be updated ({error}); restore it (git checkout) or give another --json")
    return data


def write_json(path: Path, verdicts: list[Verdict], command: str, seconds: float, previous: dict) -> None:
    """Write (or update ``previous``, for a partial rerun) the results file, through a temporary file and a
    rename."""
    entries = {e["id"]: e for e in previous.get("plants", [])}
    by_id = {p.id: p for p in PLANTS}
    for v in verdicts:
        first = entries.get(v.id, {}).get("first_result", v.result)
        entries[v.id] = {**asdict(by_id[v.id]), "tests": list(by_id[v.id].tests), "result": v.result,
                         "first_result": first, "seconds": v.seconds, "detail": v.detail}
    ordered = [entries[p.id] for p in PLANTS if p.id in entries]
    run = {"command": command, "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "wall_seconds": round(seconds), "tally": tally({v.id: v.result for v in verdicts}),
           "results": {v.id: v.result for v in verdicts}}
    data = {
        "description": "tools/plant_bugs.py: bugs planted one at a time in the C++ CPU kernels (in a copy of the "
                       "tree); a plant is caught when its tests fail",
        "before": tally({e["id"]: e["first_result"] for e in ordered}),
        "after": tally({e["id"]: e["result"] for e in ordered}),
        "runs": [*previous.get("runs", []), run],
        "plants": ordered,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def print_line(p: Plant, v: Verdict) -> None:
    detail = f"  <- {v.detail}" if v.detail else ""
    print(f"{p.id:4} {v.result.upper():7} {v.seconds:6.1f}s  {p.description}{detail}", flush=True)


def select(only: list[str] | None) -> list[Plant]:
    """The plants named by ``--only`` (all without it), in their order; exits on an unknown id."""
    if not only:
        return list(PLANTS)
    unknown = sorted(set(only) - {p.id for p in PLANTS})
    if unknown:
        sys.exit(f"unknown plant id(s) {unknown}; --list shows them")
    return [p for p in PLANTS if p.id in only]


def validate(plants: list[Plant]) -> list[str]:
    """Every problem with ``plants``: an id used twice, a replacement that changes nothing, a test file that
    does not exist, a snippet not found exactly once (stale)."""
    ids = [p.id for p in PLANTS]
    problems = [f"plant id {i} is used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for p in plants:
        if p.original == p.replacement:
            problems.append(f"{p.id}: the replacement changes nothing")
        files = {t.split("::")[0] for t in p.tests}
        problems += [f"{p.id}: no test file {f}" for f in sorted(files) if not (ROOT / f).is_file()]
        if occurrences(p) != 1:
            problems.append(f"{p.id}: {stale_reason(p)}")
    return problems


def list_plants(plants: list[Plant]) -> None:
    for p in plants:
        print(f"{p.id:4} {p.file}: {p.description}\n     tests: {' '.join(p.tests)}")
    print(f"{len(plants)} plants")


def _terminate(signum: int, frame: object) -> None:  # SIGTERM unwinds like Ctrl-C: the copies are deleted
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these plants (ids from --list)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write (or update, with --only) the results here")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per plant, the kernel build included (default %(default)s)")
    parser.add_argument("--skip-clean-check", action="store_true",
                        help="do not run the tests on an unplanted copy first")
    parser.add_argument("--list", action="store_true", help="list the plants and exit")
    parser.add_argument("--validate", action="store_true",
                        help="check every plant (snippet exactly once in the source, test files exist), run nothing; "
                             "exit status 1 if any is stale or wrong")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plants = select(args.only)
    if args.list:
        list_plants(plants)
        return 0
    problems = validate(plants)
    if args.validate:
        print("\n".join(problems) or f"{len(plants)} plants valid")
        return 1 if problems else 0
    previous = previous_results(args.json) if args.json and args.only else {}
    signal.signal(signal.SIGTERM, _terminate)
    start = time.monotonic()
    if not args.skip_clean_check:
        clean_check([p for p in plants if occurrences(p) == 1], args.timeout)
    verdicts = []
    for p in plants:
        verdicts.append(run_plant(p, args.timeout))
        print_line(p, verdicts[-1])
    counts = tally({v.id: v.result for v in verdicts})
    print(f"\n{counts['caught']}/{counts['total']} caught ({100 * counts['caught_fraction']:.1f}%), "
          f"{counts['missed']} missed, {counts['timeout']} timed out, {counts['error']} errors, "
          f"{counts['stale']} stale (not run: update them, see --validate)")
    if args.json:
        command = shlex.join(["python3", "tools/plant_bugs.py", *(argv if argv is not None else sys.argv[1:])])
        write_json(args.json, verdicts, command, time.monotonic() - start, previous)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
