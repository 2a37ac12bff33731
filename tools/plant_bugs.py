#!/usr/bin/env python3
"""Plant small, realistic bugs one at a time and check that the tests meant for them fail.

    nice -n 5 python3 tools/plant_bugs.py                          # every plant, one line each, then the tally
    nice -n 5 python3 tools/plant_bugs.py --only K3 G2             # some plants again
    nice -n 5 python3 tools/plant_bugs.py --json docs/results/planted_bugs.json
    python3 tools/plant_bugs.py --list                             # what would be planted, nothing run
    python3 tools/plant_bugs.py --set fresh2 --validate            # does every snippet still apply? nothing run
    nice -n 5 python3 tools/plant_bugs.py --set fresh2 --json docs/results/planted_bugs_fresh2.json
    nice -n 19 python3 tools/plant_bugs.py --set fresh3 --json docs/results/planted_bugs_fresh3.json
    nice -n 19 python3 tools/plant_bugs.py --set fresh4 --json docs/results/planted_bugs_fresh4.json
    nice -n 19 python3 tools/plant_bugs.py --set fresh5 --json docs/results/planted_bugs_fresh5.json
    nice -n 19 python3 tools/plant_bugs.py --set fresh6 --json docs/results/planted_bugs_fresh6.json

Six sets (``--set``, :data:`PLANT_SETS`), one line each:

* ``original`` (:data:`PLANTS`, the default): tests written against its misses; it measures nothing fresh;
* ``fresh2`` (:data:`FRESH2`): new bugs of the same kinds, fixed before its first run; tests since written for its misses;
* ``fresh3`` (:data:`FRESH3`): a third such set, fixed before its first run; tests since written against its misses;
* ``fresh4`` (:data:`FRESH4`): a fourth such set, fixed before its first run; tests since written against its misses;
* ``fresh5`` (:data:`FRESH5`): a fifth such set, fixed before its first run; tests since written against its misses;
* ``fresh6`` (:data:`FRESH6`): a sixth such set, fixed before its first run; tests since written against its misses.

Each plant names a file, an exact snippet of it (found exactly once), its
replacement, the tests that should notice (pytest node ids, a few per plant) and what the
bug is. For each plant the snippet is replaced in this working tree, ``python3 -m pytest -x -q
<its tests>`` runs with a time limit, and the file is written back in a ``finally`` (also on
Ctrl-C and SIGTERM); nothing is copied anywhere else. Verdicts: ``caught`` (pytest reported a
failed test or a collection error: exit status 1 or 2), ``missed`` (every test passed),
``timeout`` and ``error`` (pytest could not run the selection: status 3-5), and ``stale``.

Refactors move code: a plant whose snippet is no longer exactly once in its file but is
exactly once in one other file of the library (``evonorm_core/`` and the task folders) is
planted there, and its line says so. A plant whose snippet is found in no such place (the
code was rewritten) is not run: its verdict is ``stale`` and its line names the file and the
snippet to update. ``--validate`` lists both kinds, run nothing, and exits 1 if there are
any; ``tests/mutation/test_plant_bugs.py`` (not part of the default test run) checks that
every set validates: ``python3 -m pytest tests/mutation``.

Safety: the run refuses to start when tracked files have uncommitted changes, and ends by
checking ``git diff --quiet`` (exit status 3 if a file was not restored). Before the first
plant, the union of the selected plants' tests runs once on the unplanted tree: a test that
fails there would turn every plant it guards into a false catch (``--skip-clean-check``
skips this). Bytecode is not written during plant runs (``PYTHONDONTWRITEBYTECODE``), so a
planted module never leaves a cache file behind. A plant of the C++ kernels is built just in
time (a minute or two) into a temporary cache folder that is deleted afterwards.

``--json PATH`` writes every plant with its verdict, the test that failed and the time taken,
and the tally. When PATH exists and ``--only`` is given, the file is updated: the rerun plants'
verdicts replace their earlier ones, ``before`` is the tally of each plant's first verdict (so
a first run may be split over several ``--only`` runs) and ``after`` the tally now; every run
is listed under ``runs``.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from evonorm_core.experiment.config import command_line

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT = 900.0
CAUGHT, MISSED, TIMEOUT, ERROR, STALE = "caught", "missed", "timeout", "error", "stale"
# where a moved snippet is looked for: the library and the task packages (not tools/ or tests/)
LIBRARY_FOLDERS = ("evonorm_core", "search", "gan", "detection", "classification")


@dataclass(frozen=True)
class Plant:
    """One planted bug: ``original`` (exactly once in ``file``) becomes ``replacement``."""

    id: str
    area: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    description: str
    note: str = ""  # for a plant the first run missed: the test added for it, or why it is not a bug


@dataclass
class Verdict:
    """What running a plant's tests gave."""

    id: str
    result: str
    seconds: float
    detail: str = ""  # the first failing test, pytest's summary line when nothing failed, or why it is stale
    file: str = ""  # where the plant was planted (its own file, or where its snippet moved)


def plant(id: str, area: str, file: str, original: str, replacement: str, tests: tuple[str, ...] | str,
          description: str, note: str = "") -> Plant:
    """A :class:`Plant`; ``tests`` may be one node id."""
    return Plant(id, area, file, original, replacement, (tests,) if isinstance(tests, str) else tuple(tests),
                 description, note)


FAST = "tests/test_fast_layers.py"
LAYERS = "tests/test_layers.py"
PRIMS = "tests/test_search_primitives.py"
DRIVER = "tests/test_search_driver.py"
SEARCH_CONFIG = "tests/test_search_config.py"
TRAIN = "tests/test_classification_train.py"
TRAINER = "tests/test_classifiers_trainer.py"
TABLES = "tests/test_classification_tables.py"
DETECTION = "tests/test_detection_model.py"
GAN = "tests/test_gan_training.py"


def cpp(mode: str, dtype: str, layout: str) -> str:
    """The C++-kernel test of ``mode`` (layer-training-given) with per-channel affine."""
    return f"{FAST}::test_cpp_kernels_match_paper[{mode}-torch.{dtype}-{layout}-channel]"


def generic(mode: str, layout: str) -> str:
    """The device-generic implementation's test of ``mode`` (layer-training-given) in ``layout``."""
    return f"{FAST}::test_generic_implementation_matches_paper[{mode}-{layout}]"


def formula(name: str, impl: str, training: bool = True, nonlinearity: bool = True) -> str:
    """test_layers' comparison of a registered layer with its float64 paper formula."""
    return f"{LAYERS}::test_matches_paper_formula[{name}-{impl}-{training}-{nonlinearity}]"


CPP = "evonorm_core/ops/csrc/evonorm_ops.cpp"
LIBRARY = "evonorm_core/ops/library.py"
FUNCTIONAL = "evonorm_core/functional.py"
FORMULAS = "evonorm_core/formulas.py"

PLANTS: list[Plant] = [
    # ---- CPU kernels: sums over several blocks, both layouts, float32 paths -----------------
    plant("K1", "cpu-kernels", CPP, "var[ng] = (within + between) / Cg;", "var[ng] = within / Cg;",
          (cpp("evonorm_s0-True-False", "float32", "channels_last"),
           cpp("evonorm_s1-True-False", "float64", "channels_last")),
          "channels_last group variance drops the spread of the channel means (Chan's between-term)"),
    plant("K2", "cpu-kernels", CPP, "const double M = static_cast<double>(Cg * s.HW);",
          "const double M = static_cast<double>(s.HW);",
          (cpp("evonorm_s0-True-False", "float32", "nchw"), cpp("evonorm_s2-True-False", "float64", "nchw")),
          "S backward divides the group-statistic gradient by H W instead of C/G H W"),
    plant("K3", "cpu-kernels", CPP, "const double kb = dsb[c] / (sbd[c] * static_cast<double>(s.N * s.HW));",
          "const double kb = dsb[c] / (sbd[c] * static_cast<double>(s.HW));",
          (cpp("evonorm_b0-True-False", "float32", "nchw"), cpp("evonorm_b1-True-False", "float64", "channels_last")),
          "B backward: the batch-variance term of dx forgets the batch size N"),
    plant("K4", "cpu-kernels", CPP, "r * (1.0f / 24 + ", "r * (1.0f / 12 + ",
          (cpp("evonorm_s0-True-False", "float32", "nchw"), cpp("evonorm_s1-True-False", "bfloat16", "channels_last")),
          "float exp polynomial: wrong 4th-order Taylor coefficient (float32/half paths only; float64 uses std::exp)"),
    # ---- fused operators: device-generic implementation, autograd, fake tensors ---------------
    plant("G1", "fused-ops", LIBRARY, "k = -dr * rstd.pow(3) / (cg * h * w)", "k = -dr * rstd.pow(3) / (h * w)",
          (generic("evonorm_s0-True-False", "nchw"), generic("evonorm_s2-True-False", "channels_last")),
          "generic S backward divides by H W instead of the group's C/G H W elements"),
    plant("G2", "fused-ops", LIBRARY, "b_var = var.mean(0) + (mean - b_mean).square().mean(0)", "b_var = var.mean(0)",
          (generic("evonorm_b0-True-False", "nchw"), generic("evonorm_b2-True-False", "channels_last")),
          "generic B forward: batch variance as the mean of instance variances (between-sample term lost)"),
    plant("G3", "fused-ops", LIBRARY, "torch.var(xa, dim=(0, 2, 3), unbiased=False)",
          "torch.var(xa, dim=(0, 2, 3), unbiased=True)",
          (f"{FAST}::test_gradgradcheck_float64[evonorm_b0-True]",
           f"{FAST}::test_gradient_penalty_matches_reference_in_float32"),
          "double backward of the B series recomputes an unbiased batch variance"),
    plant("G4", "fused-ops", LIBRARY, "batch = (0,) if batch_var is not None else (c,)",
          "batch = (c,) if batch_var is not None else (0,)",
          (f"{FAST}::test_opcheck[b_forward-<lambda>0]", f"{FAST}::test_opcheck[b_forward-<lambda>1]"),
          "fake b_forward gives the batch statistics the wrong shapes (torch.compile/export)"),
    plant("G5", "fused-ops", LIBRARY, "dvar = (dsb / (2 * sb_c)).to(batch_var.dtype)",
          "dvar = (dsb / sb_c).to(batch_var.dtype)",
          (generic("evonorm_b0-False-True", "nchw"), generic("evonorm_b0-True-True", "channels_last")),
          "generic B backward: gradient of a given batch variance misses d sqrt(v)/dv's 1/2"),
    # ---- the functional (composed formulas, dispatch) ---------------------------------------
    plant("F1", "functional", FUNCTIONAL, "training=False, momentum=0.0, eps=0.0)",
          "training=False, momentum=0.0, eps=1e-5)",
          (formula("evonorm_s0", "fused", True, False), f"{FAST}::test_nonlinearity_off_is_cheap_affine[evonorm_b0]"),
          "the affine x * gamma + beta (nonlinearity off) divides by sqrt(1 + 1e-5)"),
    plant("F2", "functional", FORMULAS, 'return (x + 1) * rms if variant == "b1" else rms - x',
          'return (x + 1) * rms if variant == "b1" else x - rms',
          (formula("evonorm_b2", "reference"), f"{FAST}::test_gradgradcheck_float64[evonorm_b2-True]"),
          "EvoNorm-B2's instance term sqrt(mu(x^2)) - x with the sign flipped (composed formula)"),
    plant("F3", "functional", FUNCTIONAL, "    count = x.numel() // c", "    count = x.numel()",
          (f"{LAYERS}::test_moving_average_update[evonorm_b0]",
           f"{LAYERS}::test_momentum_none_is_a_cumulative_average[evonorm_b1]"),
          "B series: unbiased moving variance uses all elements instead of those per channel"),
    plant("F4", "functional", FORMULAS, "gate = x if v1 is None else x * to_nchw(v1, x.dtype)",
          "gate = x if v1 is None else to_nchw(v1, x.dtype)",
          (formula("evonorm_s0", "reference"), f"{FAST}::test_gradgradcheck_float64[evonorm_s0-True]"),
          "EvoNorm-S0 gates with sigmoid(v1) instead of sigmoid(v1 x) (composed formula)"),
    # ---- layers and statistics ---------------------------------------------------------------
    plant("L1", "layers", "evonorm_core/layers/baselines.py",
          "return x / torch.sqrt(stats.instance_mean_square(x) + self.eps)",
          "return x / torch.sqrt(stats.instance_var(x) + self.eps)",
          (formula("frn", "None"), formula("frn", "None", False)),
          "FRN normalizes by the instance variance instead of the mean square nu^2"),
    plant("L2", "layers", "evonorm_core/layers/baselines.py",
          "scale = gamma / torch.sqrt(self.running_var.to(gamma.dtype) + self.eps)",
          "scale = gamma / torch.sqrt(self.running_var.to(gamma.dtype))",
          (f"{LAYERS}::test_folded_affine[bn_relu-True-False]",
           "tests/test_classification_tradeoff.py::test_folding_is_exact_in_float64"),
          "BN inference folding forgets eps"),
    plant("L3", "layers", "evonorm_core/layers/baselines.py",
          "return numerator / torch.sqrt(var + mean.square() + self.eps)",
          "return numerator / torch.sqrt(var + self.eps)",
          (formula("rs_rej", "None"), formula("rs_rej", "None", False)),
          "RS + rej divides by the batch std instead of the batch root second moment"),
    plant("L4", "layers", "evonorm_core/layers/conditional.py", "return 1 + self.gain(cond), self.bias(cond)",
          "return self.gain(cond), self.bias(cond)",
          ("tests/test_layers_conditional.py::test_matches_paper_formula_with_class_conditional_gamma_beta",
           "tests/test_layers_conditional.py::test_zero_projections_give_the_layer_at_gamma_1_beta_0"),
          "conditional gamma is W_g c instead of 1 + W_g c"),
    plant("L5", "layers", "evonorm_core/statistics.py",
          "return stat.view(n, groups, 1).expand(n, groups, num_channels // groups).reshape(n, num_channels, 1, 1)",
          "return stat.view(n, 1, groups).expand(n, num_channels // groups, groups).reshape(n, num_channels, 1, 1)",
          (formula("evonorm_s0", "reference"), f"{PRIMS}::test_unary_op_matches_formula[group_std]"),
          "group statistics handed back to interleaved channels instead of each group's own"),
    plant("L6", "layers", "evonorm_core/statistics.py", "while num_channels % groups:\n            groups -= 1",
          "while num_channels % groups:\n            groups //= 2",
          f"{LAYERS}::test_default_groups_lowered_until_they_divide",
          "default groups halved until they divide (48 channels: 16 groups instead of 24)"),
    # ---- moving averages ---------------------------------------------------------------------
    plant("R1", "running-stats", "evonorm_core/running_stats.py", "return 1.0 / max(tracked, 1)",
          "return 1.0 / (tracked + 1)",
          ("tests/test_running_stats.py::test_momentum_factor_and_counting",
           f"{LAYERS}::test_momentum_none_is_a_cumulative_average[evonorm_b0]"),
          "cumulative average (momentum=None) weighs the batch 1/(n+1) after counting it"),
    plant("R2", "running-stats", "evonorm_core/running_stats.py", "running.lerp_(value.to(running.dtype), factor)",
          "running.lerp_(value.to(running.dtype), 1 - factor)",
          ("tests/test_running_stats.py::test_update_running_is_batchnorms_rule",
           f"{LAYERS}::test_moving_average_update[evonorm_b0]"),
          "moving average keeps momentum of the old value instead of 1 - momentum"),
    plant("R3", "running-stats", "evonorm_core/running_stats.py",
          "        layer.reset_running_stats()\n        layer.momentum = None", "        layer.momentum = None",
          "tests/test_running_stats.py::test_recalibrate_is_the_plain_average_over_the_batches",
          "recalibration does not reset the averages before the plain average"),
    plant("R4", "running-stats", "evonorm_core/search/layer.py",
          'running_stats.update_running_(running, stat, factor, count if kind == "var" else None)',
          "running_stats.update_running_(running, stat, factor, count)",
          f"{PRIMS}::test_batch_ops_use_moving_averages_in_eval",
          "searched layers store the batch mean and mean square 'unbiased' too"),
    # ---- layer search ------------------------------------------------------------------------
    plant("Q1", "search", "evonorm_core/search/primitives.py", "return a / (b + ctx.eps * torch.sign(b))",
          "return a / (b + ctx.eps)",
          (f"{PRIMS}::test_binary_ops_match_formulas", f"{PRIMS}::test_div_by_zero_is_not_finite_and_sqrt_is_signed"),
          "Table 1's safe division adds +eps instead of eps sign(b)"),
    plant("Q2", "search", "evonorm_core/search/primitives.py", "return torch.sign(a) * torch.log(a.abs() + ctx.eps)",
          "return torch.log(a.abs() + ctx.eps)", f"{PRIMS}::test_unary_op_matches_formula[log]",
          "Table 1's safe log loses its sign(x)"),
    plant("Q3", "search", "evonorm_core/search/genome.py",
          "nodes.append(Node(op, _random_inputs(rng, op, len(INITIAL_NODES) + k)))",
          "nodes.append(Node(op, _random_inputs(rng, op, len(INITIAL_NODES))))",
          ("tests/test_search_genome.py::test_random_genomes_are_valid_and_respect_s_mode",
           "tests/test_search_genome.py::test_mutation_changes_one_node_keeps_validity_and_mode",
           "tests/test_search_genome.py::test_random_genomes_draw_inputs_uniformly_from_every_earlier_node"),
          "random graphs draw inputs from the 4 initial nodes only, never from earlier intermediate nodes",
          "new test_random_genomes_draw_inputs_uniformly_from_every_earlier_node (section 3.1: inputs uniform over "
          "all earlier nodes, counted over 3000 graphs); validity alone cannot tell"),
    plant("Q4", "search", "evonorm_core/search/evolution.py",
          "if self.rng.random() < self.config.random_offspring_probability:",
          "if self.rng.random() > self.config.random_offspring_probability:",
          (f"{SEARCH_CONFIG}::test_tournament_samples_the_stated_fraction_uniformly",
           f"{DRIVER}::test_resume_continues_exactly",
           f"{SEARCH_CONFIG}::test_offspring_is_replaced_by_a_random_graph_with_the_stated_probability"),
          "offspring replaced by a random graph with probability 1 - p instead of p",
          "new test_offspring_is_replaced_by_a_random_graph_with_the_stated_probability (Appendix C's probability, at "
          "0, 0.3 and 1: at the paper's 0.5 the inverted comparison is indistinguishable)"),
    plant("Q5", "search", "evonorm_core/search/evolution.py",
          "return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)",
          "return all(x > y for x, y in pairs)",
          (f"{DRIVER}::test_pareto_tournament_and_average_selection",
           f"{DRIVER}::test_missing_anchor_accuracies_count_as_zero"),
          "Pareto dominance requires > on every anchor (ties keep dominated members on the frontier)"),
    plant("Q6", "search", "evonorm_core/search/evolution.py", "self.population.append(member)",
          "self.population.appendleft(member)", f"{DRIVER}::test_sliding_window_keeps_the_most_recent",
          "the sliding window drops the newest member instead of the oldest"),
    plant("Q7", "search", "evonorm_core/search/equivalence.py", "_DECIMALS = 6", "_DECIMALS = 15",
          ("tests/test_search_equivalence.py",
           f"{DRIVER}::test_equivalent_graphs_share_a_fingerprint_and_others_do_not"),
          "fingerprints rounded to 15 digits: float noise splits equal functions, the cache stops hitting",
          "new test_search_equivalence.py::test_float_noise_does_not_split_equal_functions (reassociated arithmetic, a "
          "few ulps apart, shares a fingerprint); the equal pairs tested before were bit-identical"),
    plant("Q8", "search", "evonorm_core/search/rejection.py",
          "worst = max(worst, value if math.isfinite(value) else math.inf)", "worst = max(worst, value)",
          ("tests/test_search_rejection.py::test_stability_rejects_an_exploding_layer_and_passes_bn_relu",
           f"{SEARCH_CONFIG}::test_stability_test_ascends_the_gradient_norm"),
          "stability test: a NaN gradient norm is ignored by max() instead of counting as infinite"),
    plant("Q9", "search", "evonorm_core/classifiers/proxy_task.py", "lr=0.1, weight_decay=1e-4)",
          "lr=0.1, weight_decay=5e-4)",
          f"{SEARCH_CONFIG}::test_paper_preset_is_the_papers_proxy_and_evolution",
          "proxy weight decay 5e-4 instead of the paper's 1e-4"),
    plant("Q10", "search", "search/proxy.py",
          "return OptimizerSettings(PROXY_TRAINING.optimizer.name, lr=self.lr, weight_decay",
          "return OptimizerSettings(PROXY_TRAINING.optimizer.name, lr=self.lr * self.batch_size / 256, weight_decay",
          (f"{SEARCH_CONFIG}::test_paper_preset_is_the_papers_proxy_and_evolution",
           "tests/test_search_rejection.py::test_quality_rejects_a_constant_zero_layer",
           f"{SEARCH_CONFIG}::test_proxy_trains_with_the_papers_optimizer"),
          "proxy reads --lr as the per-256 base LR: it trains at lr * batch / 256 (0.05, not 0.1, at batch 128)",
          "new test_proxy_trains_with_the_papers_optimizer (Appendix C: an anchor run's optimizer holds lr 0.1, "
          "Nesterov momentum 0.9, decay 1e-4 on conv/linear weights); the preset's fields were right, the wiring not"),
    plant("Q11", "search", "search/proxy.py",
          "return train_x[order[cut:]], train_y[order[cut:]], train_x[order[:cut]], train_y[order[:cut]]",
          "return train_x[order[cut:]], train_y[order[cut:]], train_x[order[cut:2 * cut]], train_y[order[cut:2 * cut]]",
          ("tests/test_search_runs.py", "tests/test_search_rejection.py"),
          "rerank holdout validates on images that are also in the training split",
          "new test_classification_data.py::test_rerank_holdout_is_a_tenth_of_the_training_set_kept_out_of_training "
          "(Appendix C: 90% / 10% of the training set, each image in exactly one part); holdout was untested"),
    # ---- classification ----------------------------------------------------------------------
    plant("P1", "classification", "classification/paper_tables.py",
          '"EvoNorm-S1": (78.2, 78.2, 78.3, 78.1, 78.1, 78.2),',
          '"EvoNorm-S1": (78.2, 78.2, 78.3, 78.1, 78.1, 78.1),',
          f"{TABLES}::test_every_cell_holds_the_papers_number[table12]",
          "Table 12, EvoNorm-S1 at 4 images/worker mistyped"),
    plant("P2", "classification", "classification/recipes.py", 'MOBILE = Recipe(base_lr=0.1, schedule="cosine"',
          'MOBILE = Recipe(base_lr=0.1, schedule="polynomial"',
          (f"{TRAIN}::test_paper_base_learning_rates_and_batches",
           f"{TABLES}::test_every_cell_trains_with_the_papers_whole_recipe[table13-mobilenetv2-EvoNorm-S0-4]"),
          "MobileNetV2/MnasNet trained with the polynomial schedule instead of the paper's cosine"),
    plant("P3", "classification", "classification/recipes.py",
          'if model == "mobilenetv2" and norm_act is not None and not uses_batch_statistics(norm_act):',
          'if model == "mobilenetv2" and norm_act is not None and uses_batch_statistics(norm_act):',
          f"{TRAIN}::test_paper_base_learning_rates_and_batches",
          "MobileNetV2's lowered LR 0.03 given to layers with batch statistics instead of those without"),
    plant("P4", "classification", "evonorm_core/classifiers/schedule.py",
          "progress = min(step / self.total_steps, 1.0)",
          "progress = min((step - self.warmup_steps) / self.total_steps, 1.0)",
          (f"{TRAIN}::test_schedules_warmup_and_decay", f"{TRAIN}::test_scheduler_is_per_step"),
          "cosine/polynomial decay starts its clock after warmup but still spans all epochs (never reaches 0)",
          "test_schedules_warmup_and_decay extended: after a 5-epoch warmup, cosine and polynomial still end at 0; the "
          "decays were tested without warmup only"),
    plant("P5", "classification", "evonorm_core/classifiers/optimizer.py",
          "momentum=0.9, nesterov=True)", "momentum=0.9, nesterov=False)",
          (f"{TRAINER}::test_every_setting_reaches_the_optimizer_and_schedule",
           f"{TRAINER}::test_optimizers_are_those_of_the_cited_recipes"),
          "SGD without the paper's Nesterov momentum",
          "new test_optimizers_are_those_of_the_cited_recipes (Appendix C: Nesterov momentum 0.9); also caught through "
          "the proxy by test_proxy_trains_with_the_papers_optimizer"),
    plant("P6", "classification", "evonorm_core/classifiers/optimizer.py", "alpha=0.9, momentum=0.9, eps=1e-3)",
          "alpha=0.99, momentum=0.9, eps=1e-3)",
          (f"{TRAINER}::test_every_setting_reaches_the_optimizer_and_schedule",
           f"{TRAINER}::test_optimizers_are_those_of_the_cited_recipes"),
          "EfficientNet's RMSProp with PyTorch's default decay 0.99 instead of 0.9",
          "new test_optimizers_are_those_of_the_cited_recipes (official EfficientNet training: RMSProp decay 0.9, "
          "momentum 0.9, epsilon 1e-3)"),
    plant("P7", "classification", "evonorm_core/classifiers/trainer.py",
          "        self.optimizer.step()\n        self.scheduler.step()",
          "        self.scheduler.step()\n        self.optimizer.step()",
          (f"{TRAINER}::test_every_setting_reaches_the_optimizer_and_schedule",
           f"{TRAIN}::test_scheduler_is_per_step"),
          "each step updates with the next step's learning rate (scheduler stepped first)",
          "test_every_recipe_field_reaches_the_optimizer_and_schedule extended: the LR each update runs with (an "
          "optimizer pre-hook) against the milestones by hand; the LR read after a step cannot tell"),
    plant("P8", "classification", "evonorm_core/classifiers/trainer.py",
          "cols = (left[:, None] + steps)", "cols = (top[:, None] + steps)",
          f"{TRAINER}::test_random_crops_are_the_slices_they_claim",
          "random crops take their column offset from the row offset"),
    plant("P9", "classification", "evonorm_core/classifiers/mbconv.py",
          "SqueezeExcitation(hidden, max(1, int(in_channels * se_ratio))",
          "SqueezeExcitation(hidden, max(1, int(hidden * se_ratio))",
          "tests/test_classifiers_models.py::test_mbconv_param_counts_match_torchvision",
          "EfficientNet's squeeze width from the expanded instead of the block's input channels"),
    plant("P10", "classification", "evonorm_core/classifiers/resnet.py",
          "shortcut = x if self.shortcut is None else self.shortcut(out)",
          "shortcut = x if self.shortcut is None else self.shortcut(x)",
          ("tests/test_classifiers_models.py::test_preact_resnet_matches_torchvision_up_to_norm_placement",
           "tests/test_classifiers_models.py::test_projection_shortcut_reads_the_pre_activated_input"),
          "pre-activation ResNet's projection shortcut reads the raw input instead of the pre-activated one",
          "new test_projection_shortcut_reads_the_pre_activated_input (TensorFlow's official _bottleneck_block_v2, "
          "timm's PreActBottleneck); parameter counts cannot tell"),
    plant("P11", "classification", "evonorm_core/classifiers/optimizer.py",
          "    decay = [p for p in model.parameters() if p.ndim > 1]\n"
          "    no_decay = [p for p in model.parameters() if p.ndim <= 1]",
          '    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]\n'
          '    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]',
          f"{TRAINER}::test_every_setting_reaches_the_optimizer_and_schedule",
          "weight decay exempts biases only (norm-act gamma and v decayed)"),
    # ---- detection ---------------------------------------------------------------------------
    plant("D1", "detection", "detection/backbone.py",
          "self.conv3 = conv_norm_act(bottleneck_channels, out_channels, 1, make, False)",
          "self.conv3 = conv_norm_act(bottleneck_channels, out_channels, 1, make, True)",
          f"{DETECTION}::test_paper_config_places_norm_act_everywhere[mask_rcnn_R50_evonorm_b0]",
          "bottleneck's last norm carries the activation (before the residual add)"),
    plant("D2", "detection", "detection/configs/mask_rcnn_R101_gn.yaml", "GROUPS: 32", "GROUPS: 16",
          f"{DETECTION}::test_every_paper_config_follows_the_papers_schedule_and_layer[mask_rcnn_R101_gn]",
          "R-101 GN config with 16 groups instead of 32"),
    plant("D3", "detection", "detection/norm.py",
          "if not buffers_finite(self.layer):", "if buffers_finite(self.layer):",
          (f"{DETECTION}::test_zero_rois_give_no_nan_and_keep_statistics[True-evonorm_b0]",
           f"{DETECTION}::test_zero_rois_give_no_nan_and_keep_statistics[True-bn_relu]",
           f"{DETECTION}::test_synchronized_b0_with_zero_rois_on_one_process"),
          "zero RoIs: NaN moving statistics kept, finite ones restored (test inverted)",
          "no new test: with one process an empty batch never changes the buffers, so the bug only shows when another "
          "process had RoIs; test_synchronized_b0_with_zero_rois_on_one_process (2 gloo processes) catches it and was "
          "missing from the selection"),
    plant("D4", "detection", "detection/optimizer.py",
          '**({"weight_decay": cfg.SOLVER.WEIGHT_DECAY_NORM} if param in norms else {})',
          '**({"weight_decay": cfg.SOLVER.WEIGHT_DECAY} if param in norms else {})',
          f"{DETECTION}::test_weight_decay_norm_applies_to_evonorm_parameters",
          "norm-act parameters get the ordinary weight decay instead of WEIGHT_DECAY_NORM"),
    plant("D5", "detection", "detection/norm.py", '    if node.SYNC:\n        options["sync"] = True\n', "",
          f"{DETECTION}::test_paper_config_places_norm_act_everywhere[mask_rcnn_R50_bn]",
          "MODEL.NORM_ACT.SYNC ignored: batch statistics of BN/EvoNorm-B0 not synchronized"),
    # ---- GAN ---------------------------------------------------------------------------------
    plant("N1", "gan", "gan/losses.py", "return -fake_logits.mean()", "return F.relu(1 - fake_logits).mean()",
          (f"{GAN}::test_hinge_losses_by_hand", f"{GAN}::test_generator_step_pushes_the_discriminator_score_up"),
          "generator loss as a hinge instead of BigGAN's -mean D(G(z))"),
    plant("N2", "gan", "gan/ema.py", "decay = self.decay if step >= self.start else 0.0",
          "decay = self.decay if step > self.start else 0.0", f"{GAN}::test_ema_update",
          "EMA starts averaging one step after ema_start"),
    plant("N3", "gan", "gan/config.py",
          '(16 if self.norm == "gn_relu" else None)', '(32 if self.norm == "gn_relu" else None)',
          (f"{GAN}::test_paper_preset_is_biggan_deep_as_the_paper_trains_it",
           "tests/test_gan_models.py::test_gn_relu_defaults_and_bad_options"),
          "GN-ReLU generator with 32 groups instead of Table 5's 16"),
    plant("N4", "gan", "gan/trainer.py", "logits = self.d_train(torch.cat([x, fake]), torch.cat([y, y_fake]))",
          "logits = self.d_train(torch.cat([x, fake]), torch.cat([y, y]))",
          f"{GAN}::test_discriminator_step_follows_the_hinge_loss_computed_by_hand",
          "D judges the fakes under the real images' labels instead of the classes they were generated for",
          "test_discriminator_step_follows_the_hinge_loss_computed_by_hand extended: the labels D sees for the fakes "
          "are those G drew them for (hooks on G and D); the loss from D's own logits cannot tell"),
    plant("N5", "gan", "gan/sampling.py", "y = torch.randint(num_classes, (num,), generator=generator).to(device)",
          "y = torch.randint(num_classes - 1, (num,), generator=generator).to(device)", f"{GAN}::test_latents",
          "latent labels never draw the last class",
          "test_latents extended: 4000 draws over 4 classes give each class 1000 +- 100"),
    # ---- conversion --------------------------------------------------------------------------
    plant("C1", "conversion", "evonorm_core/convert.py", 'F.relu6: "relu6", ', "",
          ("tests/test_convert.py::test_functional_activation_and_shared_use",
           "tests/test_convert.py::test_mobilenet_and_efficientnet"),
          "F.relu6 after a BatchNorm is not folded (nonlinearity=False plus a separate ReLU6)",
          "test_functional_activation_and_shared_use extended with F.relu6 and x.relu_() after BatchNorms (folded, "
          "gone from the graph); torchvision's models use nn.ReLU6/nn.ReLU modules only"),
    plant("C2", "conversion", "evonorm_core/convert.py", '_ACTIVATION_METHODS = {"relu": "relu", "relu_": "relu"}',
          '_ACTIVATION_METHODS = {"relu": "relu"}',
          ("tests/test_convert.py::test_functional_activation_and_shared_use", "tests/test_convert.py::test_resnet50"),
          "in-place x.relu_() after a BatchNorm is not folded",
          "test_functional_activation_and_shared_use extended (see C1)"),
]

# ---- the second set ("fresh2"): new bugs of the same kinds, fixed before its first run -----
#
# Designed from the source and the paper, not from the tests: each plant's tests are the test
# file(s) a developer would run for the module it touches (whole files, ``-x`` stops at the
# first failure), not a test known to catch it. No plant repeats a line or a mistake of
# :data:`PLANTS`; ids continue their numbering, so an id names one plant in every set.

BASELINES = "evonorm_core/layers/baselines.py"
STATISTICS = "evonorm_core/statistics.py"
RUNNING = "tests/test_running_stats.py"
CONVERT = "tests/test_convert.py"
GAN_MODELS = "tests/test_gan_models.py"
EXPERIMENT = "tests/test_experiment.py"
DETECTION_BASE = "detection/configs/Base-MaskRCNN-NormAct-FPN.yaml"

FRESH2: list[Plant] = [
    # ---- CPU kernels --------------------------------------------------------------------------
    plant("K5", "cpu-kernels", CPP, "var[ng] = std::max(s2 / L - offset * offset, 0.0);",
          "var[ng] = std::max(s2 / L, 0.0);", FAST,
          "NCHW group variance: the second moment about the group's first value, its shift not taken out"),
    plant("K6", "cpu-kernels", CPP, "kk0 = centered ? -kk * mean[ng] : 0.0", "kk0 = centered ? kk * mean[ng] : 0.0",
          FAST, "S backward (S0/S1): the group mean's term of dx with the wrong sign"),
    plant("K7", "cpu-kernels", CPP, "dv = param_grad(slice(1), *v1, s.N, s.C)", "dv = param_grad(slice(0), *v1, s.N, s.C)",
          FAST, "B0 backward: dv1 summed from U (sum dd) instead of UX (sum dd x)"),
    # ---- fused operators: the device-generic implementation ---------------------------------
    plant("G6", "fused-ops", LIBRARY, "r = rstd.repeat_interleave(c // groups, dim=1)[:, :, None, None]",
          "r = rstd.repeat(1, c // groups)[:, :, None, None]", FAST,
          "generic S forward: group rstd tiled over the channels instead of repeated per group"),
    plant("G7", "fused-ops", LIBRARY, "dgate = s * (1 + vx * (1 - s))", "dgate = s * (1 + xa * (1 - s))", FAST,
          "generic S backward: d[x sigmoid(v x)]/dx drops v in the sigmoid's derivative term"),
    # ---- the functional and statistics --------------------------------------------------------
    plant("F5", "functional", FORMULAS, "batch_std = torch.sqrt(batch_var.to(x.dtype).view(1, -1, 1, 1) + eps)",
          "batch_std = torch.sqrt(batch_var.to(x.dtype).view(1, -1, 1, 1)) + eps",
          ("tests/test_functional.py", LAYERS),
          "composed B formula: eps added outside the square root of the batch variance"),
    plant("F6", "functional", STATISTICS, "return _per_group(_grouped(x, groups).square().mean(dim=2), c)",
          "return _per_group(_grouped(x, groups).mean(dim=2).square(), c)", (LAYERS, PRIMS),
          "group mean square computed as the square of the group mean"),
    plant("F7", "functional", STATISTICS,
          "return mean, (mean_square - mean.square()).clamp_min(0), int(total.item())",
          "return mean, mean_square.clamp_min(0), int(total.item())",
          ("tests/test_sync_batch_stats.py", "tests/test_sync_fused.py"),
          "synchronized batch variance: the all-reduced mean square without the squared mean taken off"),
    # ---- layers ---------------------------------------------------------------------------------
    plant("L7", "layers", "evonorm_core/layers/evonorm.py", "    centered = False\n", "", LAYERS,
          "EvoNorm-S2 normalizes by the group variance (S1's denominator) instead of the group mean square"),
    plant("L8", "layers", BASELINES,
          "second_moment = self.running_var.to(gamma.dtype) + self.running_mean.to(gamma.dtype).square()",
          "second_moment = self.running_var.to(gamma.dtype) + self.running_mean.to(gamma.dtype)",
          (LAYERS, "tests/test_classification_tradeoff.py"),
          "RS + rej inference folding adds the moving mean instead of its square to the second moment"),
    plant("L9", "layers", "evonorm_core/layers/base.py", '"swish": (_swish, ("v1", 1.0)),',
          '"swish": (_swish, ("v1", 0.0)),', (LAYERS, "tests/test_registry.py"),
          "BN-Swish/GN-Swish: v1 initialised to 0 (z sigmoid(0) = z / 2) instead of 1"),
    plant("L10", "layers", BASELINES, "return x / torch.sqrt(stats.pixel_mean_square(x) + self.eps)",
          "return x / (torch.sqrt(stats.pixel_mean_square(x)) + self.eps)", LAYERS,
          "PixelNorm: eps added to the root mean square instead of under the square root"),
    # ---- moving averages --------------------------------------------------------------------------
    plant("R5", "running-stats", "evonorm_core/running_stats.py", "value = value * (count / (count - 1))",
          "value = value * ((count - 1) / count)", (RUNNING, LAYERS),
          "moving variance 'unbiased' by (n - 1) / n instead of n / (n - 1)"),
    plant("R6", "running-stats", FUNCTIONAL, "training=training, momentum=factor, eps=eps,",
          "training=training, momentum=1 - factor, eps=eps,", (RUNNING, LAYERS),
          "BN-ReLU hands F.batch_norm TensorFlow's momentum convention (weight of the old average)"),
    # ---- conversion ---------------------------------------------------------------------------------
    plant("C3", "conversion", "evonorm_core/convert.py", "    gm.train(model.training)\n", "", CONVERT,
          "a converted eval-mode model comes back with its new layers in training mode",
          "new test_an_eval_model_converts_to_an_eval_model (every module in eval, same output as the original BN-ReLU "
          "model); only training-mode conversion was tested"),
    plant("C4", "conversion", "evonorm_core/convert.py", "_ACTIVATION_MODULES = (nn.ReLU, nn.ReLU6, nn.SiLU)",
          "_ACTIVATION_MODULES = (nn.ReLU, nn.ReLU6)", CONVERT,
          "nn.SiLU after a BatchNorm (EfficientNet) is not folded into the layer"),
    # ---- layer search ---------------------------------------------------------------------------------
    plant("Q12", "search", "evonorm_core/search/primitives.py",
          '"channel": lambda a, ctx: a.square().mean(dim=(1, 2, 3), keepdim=True),',
          '"channel": lambda a, ctx: a.square().mean(dim=(2, 3), keepdim=True),', PRIMS,
          "channel_rms aggregates over (w, h) only, not Table 1's (w, h, c)"),
    plant("Q13", "search", "evonorm_core/search/genome.py",
          "ops = [op for op in ops_for_mode(mode) if op != genome.nodes[k].op]", "ops = list(ops_for_mode(mode))",
          "tests/test_search_genome.py", "mutation may redraw the node's own op (section 4.3: a different op)"),
    plant("Q14", "search", "evonorm_core/search/evolution.py",
          "return max(tournament, key=lambda m: sum(m.accuracies))",
          "return min(tournament, key=lambda m: sum(m.accuracies))", (DRIVER, SEARCH_CONFIG),
          "selection='average' picks the tournament's worst mean accuracy"),
    plant("Q15", "search", "evonorm_core/search/evolution.py",
          "len(self.population) < self.config.initial_population",
          "len(self.population) <= self.config.initial_population", (DRIVER, SEARCH_CONFIG),
          "one more random proposal than initial_population before tournaments start",
          "new test_search_config.py::test_tournaments_start_once_the_population_holds_initial_population (random proposals "
          "until the population holds initial_population, then tournaments; checked at 1, 3, 25)"),
    plant("Q16", "search", "evonorm_core/search/equivalence.py", "        layer.eval()\n", "",
          ("tests/test_search_equivalence.py", DRIVER),
          "fingerprint's third probe runs in training mode: moving averages never count"),
    plant("Q17", "search", "evonorm_core/search/rejection.py",
          "if torch.allclose(first, second, rtol=1e-6, atol=1e-9):",
          "if torch.allclose(first, evaluated, rtol=1e-6, atol=1e-9):", "tests/test_search_rejection.py",
          "static rejection compares the first probe with itself in eval mode (rejects every batch-free layer)"),
    plant("Q18", "search", "search/presets.py", 'proxy = ProxyConfig(train_steps=2000 if mode == "B" else 5000,',
          "proxy = ProxyConfig(train_steps=2000,", SEARCH_CONFIG,
          "paper preset trains S candidates 2000 steps instead of Appendix C's 5000"),
    # ---- classification ---------------------------------------------------------------------------------
    plant("P12", "classification", "evonorm_core/classifiers/schedule.py",
          "return 0.1 ** sum(step >= m for m in self.milestones)",
          "return 0.1 ** sum(step > m for m in self.milestones)", (TRAIN, TRAINER),
          "multistep decay starts one step after each milestone"),
    plant("P13", "classification", "evonorm_core/classifiers/schedule.py", "return step / self.warmup_steps",
          "return (step + 1) / self.warmup_steps", (TRAIN, TRAINER),
          "linear warmup starts at 1/warmup instead of 0 (and overshoots the peak)"),
    plant("P14", "classification", "evonorm_core/classifiers/trainer.py",
          "loss = F.cross_entropy(self.module(images), labels, label_smoothing=self.label_smoothing)",
          "loss = F.cross_entropy(self.module(images), labels)", (TRAINER, TRAIN),
          "the recipe's label smoothing (EfficientNet 0.1) never reaches the loss",
          "new test_step_trains_on_the_recipes_label_smoothing (the smoothed cross-entropy by hand, float64); the recipe "
          "test set label_smoothing=0.1 but looked at learning rates only"),
    plant("P15", "classification", "evonorm_core/classifiers/trainer.py", 'reduction="sum"', 'reduction="mean"',
          TRAINER,
          "evaluate's mean loss sums batch means and divides by the image count",
          "new test_evaluate_reports_accuracy_and_mean_loss_over_every_image (by hand, 10 images in batches of 4); "
          "evaluate's loss was never compared with a value"),
    plant("P16", "classification", "evonorm_core/classifiers/trainer.py", "images.flip(-1)", "images.flip(-2)",
          (TRAINER, "tests/test_classifiers_data.py"), "random flips mirror vertically instead of horizontally"),
    plant("P17", "classification", "classification/paper_tables.py", 'WORKERS = {"resnet50": 8, "resnet101": 8}',
          'WORKERS = {"resnet50": 8}', TABLES, "ResNet-101 table cells trained on 32 workers instead of 8"),
    # ---- detection --------------------------------------------------------------------------------------
    plant("D6", "detection", "detection/backbone.py",
          "stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)",
          "stride_1x1, stride_3x3 = (1, stride) if stride_in_1x1 else (stride, 1)", DETECTION,
          "bottleneck stride in the 1x1 conv when STRIDE_IN_1X1 is False (and the reverse)",
          "new test_bottlenecks_stride_in_the_3x3_conv_as_the_tensorflow_reference (res3-res5 downsample in the 3x3 "
          "conv); parameter counts and output shapes are the same either way"),
    plant("D7", "detection", DETECTION_BASE, "STEPS: (120000, 125000)", "STEPS: (120000, 130000)", DETECTION,
          "second LR drop at 130K instead of the paper's 125K"),
    plant("D8", "detection", "detection/heads.py", "            conv.norm = conv_norm(conv.out_channels)\n", "",
          DETECTION, "RPN head's hidden conv gets no norm-act (and, its ReLU dropped, no activation)"),
    plant("D9", "detection", DETECTION_BASE, "WEIGHT_DECAY: 4.0e-5", "WEIGHT_DECAY: 1.0e-4", DETECTION,
          "weight decay 1e-4 (detectron2's default) instead of the paper's 4e-5"),
    # ---- GAN ---------------------------------------------------------------------------------------------
    plant("N6", "gan", "gan/trainer.py", "real_logits, fake_logits = logits.split([len(x), len(fake)])",
          "fake_logits, real_logits = logits.split([len(fake), len(x)])", GAN,
          "D step takes the real images' logits as the fakes' and the reverse"),
    plant("N7", "gan", "gan/ema.py", "average.lerp_(current, 1 - decay)", "average.lerp_(current, decay)", GAN,
          "EMA keeps 1 - decay of the average instead of decay"),
    plant("N8", "gan", "gan/biggan_deep.py",
          "return self.linear(h) + torch.sum(self.embed(y) * h, dim=1, keepdim=True)", "return self.linear(h)",
          (GAN_MODELS, GAN), "discriminator without its class projection term (unconditional D)",
          "new test_gan_models.py::test_discriminator_is_a_projection_discriminator (Miyato & Koyama: logits of two "
          "classes differ by (embed(y1) - embed(y2)) . h); shapes and spectral norms could not tell"),
    plant("N9", "gan", "gan/biggan_deep.py", "h = torch.sum(F.relu(h), dim=(2, 3))",
          "h = torch.mean(F.relu(h), dim=(2, 3))", GAN_MODELS,
          "discriminator pools by the spatial mean instead of BigGAN's global sum",
          "new test_gan_models.py::test_discriminator_sum_pools_its_last_features (h = sum_hw relu(features), read "
          "by hooks)"),
    plant("N10", "gan", "gan/metrics.py", "self.generator = generator.eval()", "self.generator = generator",
          "tests/test_gan_metrics.py", "IS/FID samples from a generator left in training mode (batch statistics)",
          "new test_gan_metrics.py::test_generator_sampler_samples_with_moving_statistics (a train-mode BN-ReLU "
          "generator samples as its eval-mode copy); the sampler test used an EMA generator already in eval"),
    plant("N11", "gan", "gan/trainer.py",
          "self.latent_rng.manual_seed(self.config.seed * 1_000_003 + self.ctx.rank * 10_007 + self.step)",
          "self.latent_rng.manual_seed(self.config.seed * 1_000_003 + self.ctx.rank * 10_007)", GAN,
          "a resumed GAN run replays the latents of step 0 instead of continuing the stream",
          "test_run_folder_checkpoint_and_resume extended: the resumed run's first latents differ from a fresh run's "
          "step-0 latents; the resume test compared weights, EMA and optimizer state only"),
    # ---- experiment plumbing --------------------------------------------------------------------------------
    plant("E1", "experiment", "evonorm_core/experiment/files.py",
          "        if os.path.exists(tmp):\n            os.unlink(tmp)\n", "", EXPERIMENT,
          "a failed atomic write leaves its temporary file in the run folder",
          "new test_experiment.py::test_a_failed_atomic_write_leaves_the_old_file_and_nothing_else (old file kept, "
          "no temporary file); interrupted writes were tested by what they leave in the target only"),
    plant("E2", "experiment", "evonorm_core/experiment/files.py",
          "if limit is not None and len(records) >= limit:", "if limit is not None and len(records) > limit:",
          EXPERIMENT, "read_jsonl(limit=n) returns n + 1 records"),
    plant("E3", "experiment", "evonorm_core/experiment/files.py",
          "state = torch.load(path, map_location=map_location, weights_only=True)",
          "state = torch.load(path, map_location=map_location, weights_only=False)",
          (EXPERIMENT, "tests/test_bad_inputs.py"), "checkpoints unpickled with weights_only=False (runs code)"),
    plant("E4", "experiment", "evonorm_core/experiment/config.py",
          'too_low = low is not None and (value <= low if m.get("min_open") else value < low)',
          'too_low = low is not None and (value < low if m.get("min_open") else value <= low)',
          (EXPERIMENT, SEARCH_CONFIG), "config lower bounds: open and closed swapped (lr=0 accepted, min=0 refuses 0)"),
]

# ---- the third set ("fresh3"): new bugs of the same kinds, fixed before its first run -----
#
# Made as FRESH2 was (from the source and the paper, not from the tests; whole test files per
# plant; no line or mistake of PLANTS or FRESH2 repeated), after FRESH2's misses got their tests.

SYNC_TESTS = ("tests/test_sync_batch_stats.py", "tests/test_sync_fused.py")
GAN_DATA = "tests/test_gan_data.py"
RUNDIR = "evonorm_core/experiment/rundir.py"

FRESH3: list[Plant] = [
    # ---- CPU kernels --------------------------------------------------------------------------
    plant("K8", "cpu-kernels", CPP, "const bool per_sample = d.dim() == 2;", "const bool per_sample = d.dim() > 2;",
          FAST, "per-sample (N, C) gamma/beta read as per channel: every sample gets the first sample's row"),
    plant("K9", "cpu-kernels", CPP, "double kk = (variant == 1 ? sums[nc] + sums[NC + nc] : sums[nc]) / (q[nc] * s.HW);",
          "double kk = sums[nc] / (q[nc] * s.HW);", FAST,
          "B1 backward: p = q depends on x too, but the UX term of q's gradient is dropped"),
    plant("K10", "cpu-kernels", CPP, "a[nc] = static_cast<A>(w[nc] * r);", "a[nc] = static_cast<A>(r);", FAST,
          "S backward: dx leaves out gamma (g r s' instead of g r gamma s')"),
    # ---- fused operators: generic implementation, fake tensors ------------------------------
    plant("G8", "fused-ops", LIBRARY, "dv = ((gxs * xa * (1 - s)).sum((2, 3)) * a[:, :, 0, 0]).sum(0)",
          "dv = ((gxs * xa * (1 - s)).sum((2, 3)) * w_nc).sum(0)", FAST,
          "generic S backward: dv1 without the group rstd r"),
    plant("G9", "fused-ops", LIBRARY, "stat = x.new_empty((x.shape[0], groups), dtype=compute_dtype(x))",
          "stat = x.new_empty((x.shape[0], groups))", FAST,
          "fake s_forward: statistics in the input's dtype (half) instead of float32 (torch.compile/export)",
          "new test_fast_layers.py::test_fake_tensors_match_the_kernels_in_half_precision (fake outputs' dtypes and "
          "shapes under FakeTensorMode against the kernel's, float16 and bfloat16, + opcheck); opcheck ran float32 only"),
    # ---- the functional and statistics --------------------------------------------------------
    plant("F8", "functional", STATISTICS, "mean, mean_square = sums[1:1 + c] / total, sums[1 + c:] / total",
          "mean, mean_square = sums[1:1 + c] / count, sums[1 + c:] / count", SYNC_TESTS,
          "synchronized batch moments divided by this process's element count instead of the all-reduced total"),
    plant("F9", "functional", FUNCTIONAL, "return op(x, weight, bias, v1, running_var, index, float(eps))[0]",
          "return op(x, weight, bias, v1, None, index, float(eps))[0]", ("tests/test_functional.py", LAYERS),
          "fused B series in eval normalizes by the batch's own variance instead of the moving average"),
    plant("F10", "functional", STATISTICS, "var, mean = _var_mean(_grouped(x, groups), 2)",
          "mean, var = _var_mean(_grouped(x, groups), 2)", (LAYERS, PRIMS),
          "group moments unpacked in the wrong order (torch.var_mean returns the variance first)"),
    # ---- layers and the registry ---------------------------------------------------------------
    plant("L11", "layers", BASELINES, "return scale, beta - self.running_mean.to(gamma.dtype) * scale",
          "return scale, beta - self.running_mean.to(gamma.dtype)", (LAYERS, "tests/test_classification_tradeoff.py"),
          "BN inference folding shifts by the moving mean unscaled (beta - mu instead of beta - mu gamma / sigma)"),
    plant("L12", "layers", FUNCTIONAL, "return apply_affine(F.group_norm(x, groups, None, None, eps), weight, bias)",
          "return F.group_norm(x, groups, None, None, eps)", (LAYERS, "tests/test_layers_conditional.py"),
          "GroupNorm with per-sample (class-conditional) gamma/beta drops them"),
    plant("L13", "layers", "evonorm_core/layers/base.py",
          "self.activation = activation if self.nonlinearity else None", "self.activation = activation", LAYERS,
          "baselines built with nonlinearity=False keep their activation (Appendix A: none)"),
    plant("L14", "layers", BASELINES, 'affine=affine, activation="max_v0", device=device',
          'affine=affine, activation="relu", device=device', LAYERS,
          "FRN ends with a ReLU instead of its TLU max(z, tau) (no learnable tau)"),
    plant("L15", "registry", "evonorm_core/registry.py", 'return re.sub(r"[^a-z0-9]", "", name.lower())',
          'return re.sub(r"[^a-z0-9]", "", name).lower()', "tests/test_registry.py",
          "name lookup strips capitals before lowering: EvoNormS0 is not evonorm_s0"),
    # ---- moving averages and recalibration -------------------------------------------------------
    plant("R7", "running-stats", "evonorm_core/running_stats.py", "    model.eval()\n    for layer in layers:",
          "    for layer in layers:", RUNNING,
          "recalibration runs the rest of a training-mode model in training mode (dropout, ...)",
          "new test_running_stats.py::test_recalibrate_averages_batches_passed_with_dropout_in_eval (train-mode "
          "conv-dropout-BN, averages by hand from the conv's outputs); the dropout=1.0 test saw the conv bias, not zero"),
    plant("R8", "running-stats", "evonorm_core/running_stats.py",
          "        for layer, momentum in zip(layers, momenta):\n            layer.momentum = momentum\n", "", RUNNING,
          "after recalibration the layers keep momentum=None (a cumulative average) instead of their own"),
    # ---- conversion ---------------------------------------------------------------------------------
    plant("C5", "conversion", "evonorm_core/convert.py",
          "activation = _activation_name(users[0], modules) if len(users) == 1 else None",
          "activation = _activation_name(users[0], modules) if users else None", CONVERT,
          "a BatchNorm read by an activation and something else gets the activation folded in (the other reads it too)"),
    plant("C6", "conversion", "evonorm_core/convert.py",
          "layer = make(bn.num_features, activation is not None).to(**state)",
          "layer = make(bn.num_features, activation is not None)", CONVERT,
          "layers from a callable maker stay float32 on the CPU whatever the BatchNorm's dtype and device"),
    # ---- layer search ---------------------------------------------------------------------------------
    plant("Q19", "search", "evonorm_core/search/evolution.py",
          "tournament = self.rng.sample(list(self.population), size)",
          "tournament = self.rng.choices(list(self.population), k=size)", (DRIVER, SEARCH_CONFIG),
          "tournaments drawn with replacement (a member can fill several places)"),
    plant("Q20", "search", "evonorm_core/search/genome.py", "k = rng.randrange(len(genome.nodes))",
          "k = rng.randrange(len(genome.nodes) - 1)", "tests/test_search_genome.py",
          "mutation never picks the last (output) node"),
    plant("Q21", "search", "evonorm_core/search/primitives.py",
          'f"{axis}_rms", 1, _std(_MEAN_SQUARES[axis])', 'f"{axis}_rms", 1, _std(_VARIANCES[axis])', PRIMS,
          "every *_rms aggregation is the std (variance instead of Table 1's mean square)"),
    plant("Q23", "search", "evonorm_core/search/equivalence.py",
          "            value = torch.randn(c, generator=generator, dtype=torch.float64)\n"
          "            if random_parameters and hasattr(layer, name):\n                getattr(layer, name).copy_(value)",
          "            if random_parameters and hasattr(layer, name):\n"
          "                getattr(layer, name).copy_(torch.randn(c, generator=generator, dtype=torch.float64))",
          ("tests/test_search_equivalence.py", DRIVER),
          "fingerprint draws v0/v1 only when the layer has them: x * v0 and x * v1 get the same values"),
    plant("Q24", "search", "evonorm_core/search/rejection.py",
          "grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)",
          "grads = torch.autograd.grad(loss, params, create_graph=False, allow_unused=True)",
          "tests/test_search_rejection.py", "stability test never ascends (gradient norm not differentiable)"),
    plant("Q25", "search", "evonorm_core/search/driver.py",
          "return self.config.admit_quality_rejected and record.stage is Stage.QUALITY and bool(record.accuracies)",
          "return self.config.admit_quality_rejected and bool(record.accuracies)", DRIVER,
          "admit_quality_rejected also admits candidates rejected by the stability test",
          "new test_search_driver.py::test_stability_rejections_stay_out_of_the_population_even_with_accuracies"),
    plant("Q26", "search", "evonorm_core/search/driver.py",
          '        atomic_write_text(search.output_dir / LOG, "".join(_line(r) for r in search.records))\n', "", DRIVER,
          "resume keeps the log lines written after the checkpoint (they are then recorded twice)"),
    plant("Q27", "search", "search/proxy.py", "quality_threshold: float = option(0.2,",
          "quality_threshold: float = option(0.1,", SEARCH_CONFIG,
          "quality test threshold 10% instead of section 4.4's 20%"),
    # ---- classification ---------------------------------------------------------------------------------
    plant("P18", "classification", "classification/recipes.py", "MOBILENETV2_BATCH_FREE_LR = 0.03",
          "MOBILENETV2_BATCH_FREE_LR = 0.01", (TRAIN, TRAINER),
          "MobileNetV2 without batch statistics at base LR 0.01 instead of section 5.1's 0.03"),
    plant("P19", "classification", "classification/paper_tables.py",
          '_180_EPOCHS = {"randaugment": True, "epochs": 180,', '_180_EPOCHS = {"epochs": 180,', TABLES,
          "Table 11's 180-epoch cells trained without RandAugment"),
    plant("P20", "classification", "evonorm_core/classifiers/trainer.py", "    model.train(was_training)\n    count =",
          "    count =", TRAINER, "evaluate leaves a training model in eval mode",
          "new test_classification_trainer.py::test_evaluate_restores_the_models_mode (train and eval)"),
    plant("P21", "classification", "evonorm_core/classifiers/trainer.py", "top = torch.randint(0, h - size + 1, (n,)",
          "top = torch.randint(0, h - size, (n,)", (TRAINER, "tests/test_classifiers_data.py"),
          "random crops never start at the last row offset"),
    plant("P22", "classification", "classification/imagenet.py", "T.Resize(int(round(resolution / 0.875)))",
          "T.Resize(resolution)", "tests/test_classification_imagenet.py",
          "ImageNet evaluation resizes to the crop size instead of resolution / 0.875 before the center crop",
          "new test_classification_data.py::test_imagenet_evaluation_resizes_to_resolution_over_0875_then_center_crops "
          "(224: resize 256 then crop 224, done by hand with torchvision's functional ops)"),
    # ---- detection --------------------------------------------------------------------------------------
    plant("D10", "detection", DETECTION_BASE, "BASE_LR: 0.1", "BASE_LR: 0.02", DETECTION,
          "base LR 0.02 (detectron2's default) instead of the paper's 0.1"),
    plant("D11", "detection", "detection/configs/mask_rcnn_R101_evonorm_s0.yaml", "DEPTH: 101", "DEPTH: 50",
          DETECTION, "the R-101 EvoNorm-S0 config builds a ResNet-50"),
    plant("D12", "detection", "detection/backbone.py", "norm=lambda channels: make(channels, False),",
          "norm=lambda channels: make(channels, True),", DETECTION,
          "FPN norms carry an activation (detectron2's FPN has none after its norms)"),
    plant("D13", "detection", "detection/heads.py",
          "conv_dims=conv_dims, fc_dims=fc_dims, conv_norm=conv_norm)\n        drop_activations(self.conv_norm_relus)\n",
          "conv_dims=conv_dims, fc_dims=fc_dims, conv_norm=conv_norm)\n", DETECTION,
          "box head keeps detectron2's ReLU after each norm-act (a second activation)"),
    # ---- GAN ---------------------------------------------------------------------------------------------
    plant("N12", "gan", "gan/losses.py", "+ F.relu(1 + fake_logits).mean()", "+ F.relu(1 - fake_logits).mean()", GAN,
          "D's hinge loss on fakes with the wrong sign: relu(1 - D(G(z)))"),
    plant("N13", "gan", "gan/ema.py", "self.model = copy.deepcopy(model).eval().requires_grad_(False)",
          "self.model = copy.deepcopy(model).requires_grad_(False)", GAN,
          "the EMA generator is left in training mode (samples update and use batch statistics)",
          "new test_gan_training.py::test_ema_generator_is_in_eval_mode (every module in eval, BN averages unchanged "
          "by a forward pass)"),
    plant("N14", "gan", "gan/biggan_deep.py",
          "conditional_norm_act_factory(norm_act, cond_dim, sn_linear_no_bias, **norm_options)",
          "conditional_norm_act_factory(norm_act, cond_dim, **norm_options)", (GAN_MODELS, GAN),
          "G's class-conditional gamma/beta projections without spectral norm"),
    plant("N15", "gan", "gan/data.py", "((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)",
          "((images.clamp(-1, 1) + 1) * 127.5).to(torch.uint8)", (GAN_DATA, "tests/test_gan_metrics.py"),
          "images for IS/FID truncated to uint8 instead of rounded"),
    plant("N16", "gan", "gan/data.py", "return int(dataset.tensors[1].max()) + 1", "return int(dataset.tensors[1].max())",
          GAN_DATA, "class count of a tensor dataset one short (the largest label)"),
    plant("N17", "gan", "gan/config.py", "adam_eps: float = option(1e-6,", "adam_eps: float = option(1e-8,", GAN,
          "Adam epsilon 1e-8 (PyTorch's default) instead of BigGAN-deep's 1e-6"),
    # ---- experiment plumbing --------------------------------------------------------------------------------
    plant("E5", "experiment", "evonorm_core/experiment/config.py",
          "if inner in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):",
          "if inner in (int, float) and not isinstance(value, (int, float)):", (EXPERIMENT, SEARCH_CONFIG),
          "numeric settings accept true/false (bool is an int)",
          "new test_experiment.py::test_booleans_are_not_numbers and ::test_booleans_in_a_json_config_are_not_numbers "
          "(steps=True, budget=False, lr=True and JSON true: '--steps must be a number, got True')"),
    plant("E7", "experiment", RUNDIR, "sorted(p.name for p in self.path.iterdir() if p.name != LOCK_FILE)",
          "sorted(p.name for p in self.path.iterdir())", EXPERIMENT,
          "a folder holding only a run's lock file counts as not empty (refused without --resume)"),
    plant("E8", "experiment", RUNDIR, "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)",
          "fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)", EXPERIMENT,
          "the run folder's lock is shared: a second process writing the same folder is not refused"),
]

# ---- the fourth set ("fresh4"): new bugs of the same kinds, fixed before its first run -----
#
# Made as FRESH2 and FRESH3 were (from the source and the paper, not from the tests; whole test
# files per plant; no line or mistake of PLANTS, FRESH2 or FRESH3 repeated), after FRESH3's
# misses got their tests.

TRAIN_DATA = "tests/test_classifiers_data.py"

FRESH4: list[Plant] = [
    # ---- CPU kernels --------------------------------------------------------------------------
    plant("K11", "cpu-kernels", CPP,
          "q[nc] = std::sqrt((variant == 0 ? var[nc] : var[nc] + mean[nc] * mean[nc]) + eps);",
          "q[nc] = std::sqrt(var[nc] + eps);", FAST,
          "B1/B2 forward: q from the instance variance instead of the mean square mu_wh(x^2)"),
    plant("K12", "cpu-kernels", CPP,
          "for (i64 c = 0; c < width; c++) out[k * NC + n * s.C + c0 + c] += block[k * CHANNEL_CHUNK + c];",
          "for (i64 c = 0; c < width; c++) out[k * NC + n * s.C + c0 + c] = block[k * CHANNEL_CHUNK + c];", FAST,
          "channels_last plane sums: each block of 256 pixels overwrites the sum instead of adding to it"),
    plant("K13", "cpu-kernels", CPP, "mean[ng] = k + offset;", "mean[ng] = offset;", FAST,
          "NCHW group mean without the shift (the group's first value) added back: S2's rstd, S0/S1's backward"),
    plant("K14", "cpu-kernels", CPP, "double kk0 = variant == 0 ? -kk * mean[nc] : 0.0;",
          "double kk0 = variant != 2 ? -kk * mean[nc] : 0.0;", FAST,
          "B backward: B1 gets the instance-mean term of dx that only B0's centered q has"),
    # ---- fused operators: generic implementation, autograd ---------------------------------
    plant("G10", "fused-ops", LIBRARY, "dx = gd - torch.where(take_u, gd * xa / d * p, 0)",
          "dx = gd - torch.where(take_u, gd * xa / d, 0)", FAST,
          "generic B backward: the instance branch's term of dx drops p (v1 for B0, q for B1, -1 for B2)"),
    plant("G11", "fused-ops", LIBRARY, "_reduce_like((g * xa / d).sum((2, 3)), weight, output_mask[0], x)",
          "_reduce_like((g / d).sum((2, 3)), weight, output_mask[0], x)", FAST,
          "generic B backward: dgamma sums g / d instead of g x / d (the normalized z without its x)"),
    plant("G12", "fused-ops", LIBRARY, "given = None if ctx.from_x else batch_var", "given = batch_var", FAST,
          "double backward of the B series treats the batch's own variance as a constant"),
    # ---- the functional and statistics --------------------------------------------------------
    plant("F11", "functional", FORMULAS, "return x / torch.maximum(batch_std, b_instance_term(x, v1, variant, eps))",
          "return x / torch.minimum(batch_std, b_instance_term(x, v1, variant, eps))",
          ("tests/test_functional.py", LAYERS),
          "composed B formula divides by the min of the batch std and the instance term instead of the max"),
    plant("F12", "functional", FUNCTIONAL, "running_stats.update_running_(running_var, batch_var, factor, count)",
          "running_stats.update_running_(running_var, batch_var, factor)", ("tests/test_functional.py", LAYERS),
          "B series: the moving variance stores the biased batch variance (no n / (n - 1), unlike nn.BatchNorm2d)"),
    plant("F13", "functional", FUNCTIONAL, "y, _, _, _, batch_var = op(x, weight, bias, v1, None, index, float(eps))",
          "y, _, _, batch_var, _ = op(x, weight, bias, v1, None, index, float(eps))",
          ("tests/test_functional.py", LAYERS),
          "fused B series in training folds the batch mean into the moving variance (outputs unpacked one off)"),
    # ---- layers and the registry ---------------------------------------------------------------
    plant("L16", "layers", FUNCTIONAL,
          "z = (x - mean.view(1, -1, 1, 1)) / torch.sqrt(var.view(1, -1, 1, 1) + eps)",
          "z = x / torch.sqrt(var.view(1, -1, 1, 1) + eps)", LAYERS,
          "BN's composed path (buffers in another dtype, synchronized, one value per channel) does not center"),
    plant("L17", "layers", BASELINES,
          "z = functional.group_norm(formulas.upcast(x), 1, weight, bias, self.eps)",
          "z = functional.group_norm(formulas.upcast(x), self.num_channels, weight, bias, self.eps)",
          LAYERS, "LayerNorm-ReLU normalizes each channel on its own (C groups: instance norm) instead of one group"),
    plant("L18", "layers", "evonorm_core/layers/base.py", "self.running_var.fill_(1)", "self.running_var.zero_()",
          (LAYERS, RUNNING), "reset_running_stats sets the moving variance to 0 instead of 1"),
    plant("L19", "layers", BASELINES, "numerator = torch.relu(x) if self.nonlinearity else x",
          "numerator = x if self.nonlinearity else torch.relu(x)", LAYERS,
          "RS + rej applies its ReLU only when nonlinearity=False (condition inverted)"),
    plant("L20", "layers", "evonorm_core/layers/evonorm.py",
          "return bool(nonlinearity)  # without it, the affine x * gamma + beta", "return cls.batch_statistics",
          (LAYERS, "tests/test_registry.py"),
          "EvoNorm-B built with nonlinearity=False (a plain affine) still declares batch statistics and keeps buffers"),
    # ---- moving averages and recalibration -------------------------------------------------------
    plant("R9", "running-stats", "evonorm_core/running_stats.py", "return bool(module.track_running_stats)",
          "return True", (RUNNING, "tests/test_registry.py"),
          "a native BatchNorm with track_running_stats=False counts as keeping moving averages"),
    plant("R10", "running-stats", "evonorm_core/running_stats.py", "        layer.train()\n", "", RUNNING,
          "recalibration runs the batch-statistics layers in eval: the averages stay at their reset values"),
    # ---- conversion ---------------------------------------------------------------------------------
    plant("C7", "conversion", "evonorm_core/convert.py",
          'calls = Counter(n.target for n in graph.nodes if n.op == "call_module")',
          'calls = Counter(n.target for n in graph.nodes if n.op == "call_function")', CONVERT,
          "a BatchNorm called twice is converted instead of refused (calls counted over function nodes)"),
    plant("C8", "conversion", "evonorm_core/convert.py",
          "return [e for e in self.entries if not e.nonlinearity]",
          "return [e for e in self.entries if e.nonlinearity]", CONVERT,
          "the conversion report's unfolded list holds the folded BatchNorms (copy of folded)"),
    # ---- layer search ---------------------------------------------------------------------------------
    plant("Q28", "search", "evonorm_core/search/evolution.py",
          "return min(population, max(2, round(self.tournament_fraction * population)))",
          "return min(population, max(1, round(self.tournament_fraction * population)))", (DRIVER, SEARCH_CONFIG),
          "tournaments of a small population have one member (at least 1 instead of 2): the winner is random"),
    plant("Q29", "search", "evonorm_core/search/evolution.py", "for _ in range(self.config.mutations):",
          "for _ in range(self.config.mutations - 1):", (DRIVER, SEARCH_CONFIG),
          "tournament winners are mutated once instead of section 4.3's twice (mutations - 1)"),
    plant("Q30", "search", "evonorm_core/search/primitives.py", "return stats.group_moments(a, ctx.groups)[0]",
          "return stats.group_moments(a, ctx.groups)[1]", PRIMS,
          "group_mean returns the group variance (wrong element of the moments)"),
    plant("Q31", "search", "evonorm_core/search/equivalence.py", "neginf=-8.88e88)", "neginf=8.88e88)",
          ("tests/test_search_equivalence.py", DRIVER),
          "fingerprints map -inf to +inf's value: functions differing in the sign of an overflow share one"),
    plant("Q32", "search", "evonorm_core/search/rejection.py",
          "norm = torch.sqrt(sum(g.square().sum() for g in grads if g is not None) + torch.zeros(()))",
          "norm = sum(g.square().sum() for g in grads if g is not None) + torch.zeros(())",
          "tests/test_search_rejection.py",
          "stability test measures (and ascends) the squared gradient norm against the 1e8 threshold"),
    plant("Q33", "search", "evonorm_core/search/driver.py",
          '        self.resubmit = [_Pending.from_dict(p) for p in state["in_flight"]]\n', "", DRIVER,
          "resume drops the candidates in flight at the checkpoint (never evaluated, their ids skipped)"),
    plant("Q34", "search", "evonorm_core/classifiers/proxy_task.py", 'crop_size: int = 24',
          'crop_size: int = 32', SEARCH_CONFIG,
          "proxy trains on full 32 px images instead of Appendix B's 24 px random crops"),
    plant("Q35", "search", "search/rerank.py",
          'return sorted(rows, key=lambda r: -r["mean"] if r["mean"] is not None else 1.0)',
          'return sorted(rows, key=lambda r: r["mean"] if r["mean"] is not None else 1.0)', "tests/test_search_runs.py",
          "rerank ranks the worst mean held-out accuracy first"),
    # ---- classification ---------------------------------------------------------------------------------
    plant("P23", "classification", "evonorm_core/classifiers/schedule.py", "return (1.0 - progress) ** self.poly_power",
          "return 1.0 - progress ** self.poly_power", (TRAIN, TRAINER),
          "polynomial decay 1 - p^2 instead of (1 - p)^2 (precedence)"),
    plant("P24", "classification", "evonorm_core/classifiers/optimizer.py",
          'groups = [{"params": decay, "weight_decay": settings.weight_decay}, '
          '{"params": no_decay, "weight_decay": 0.0}]',
          'groups = [{"params": decay, "weight_decay": 0.0}, '
          '{"params": no_decay, "weight_decay": settings.weight_decay}]',
          (TRAINER, TRAIN),
          "weight decay on the norm-act vectors and biases, none on conv/linear weights (groups swapped)"),
    plant("P25", "classification", "classification/paper_tables.py",
          '"MobileNetV2": "mobilenetv2", "MnasNet-B1": "mnasnet_b1",',
          '"MobileNetV2": "mnasnet_b1", "MnasNet-B1": "mobilenetv2",', TABLES,
          "Table 2's MobileNetV2 and MnasNet-B1 columns swapped"),
    plant("P26", "classification", "classification/train.py", '"top1": 100.0 * correct / max(count, 1)',
          '"top1": correct / max(count, 1)', TRAIN,
          "training's evaluation reports top-1 as a fraction, not a percentage"),
    plant("P27", "classification", "classification/imagenet.py", "IMAGENET_MEAN = (0.485, 0.456, 0.406)",
          "IMAGENET_MEAN = (0.406, 0.456, 0.485)", "tests/test_classification_imagenet.py",
          "ImageNet transforms subtract the channel means in BGR order from RGB images"),
    # ---- detection --------------------------------------------------------------------------------------
    plant("D14", "detection", DETECTION_BASE, "MAX_ITER: 135000", "MAX_ITER: 125000", DETECTION,
          "training stops at 125K steps instead of the paper's 135K"),
    plant("D15", "detection", "detection/config.py", "cfg.MODEL.NORM_ACT.EPS = 0.0", "cfg.MODEL.NORM_ACT.EPS = 1e-3",
          DETECTION, "MODEL.NORM_ACT.EPS defaults to 1e-3 (TensorFlow's BN epsilon) instead of the layer's own 1e-5"),
    plant("D16", "detection", "detection/backbone.py",
          "self.conv1 = conv_norm_act(in_channels, out_channels, 7, make, True, stride=2)",
          "self.conv1 = conv_norm_act(in_channels, out_channels, 7, make, False, stride=2)", DETECTION,
          "the stem's norm has no activation (BN-ReLU's ReLU before the max-pool lost)"),
    plant("D17", "detection", "detection/heads.py", "return lambda channels: make(channels, True)",
          "return lambda channels: make(channels, False)", DETECTION,
          "RPN, box and mask heads' norm-acts without activation (their ReLUs removed: the heads' convs are linear)"),
    # ---- GAN ---------------------------------------------------------------------------------------------
    plant("N18", "gan", "gan/trainer.py", "for _ in range(self.config.d_steps):",
          "for _ in range(self.config.d_steps - 1):", GAN, "one D step fewer per G step than d_steps (1 instead of 2)"),
    plant("N19", "gan", "gan/ema.py",
          "        for average, current in zip(self.model.buffers(), model.buffers()):\n"
          "            average.copy_(current)\n", "", GAN,
          "the EMA generator keeps its first buffers (moving statistics, spectral-norm vectors) forever"),
    plant("N20", "gan", "gan/sampling.py", "y = classes.repeat_interleave(per_class)", "y = classes.repeat(per_class)",
          GAN, "sample grids cycle through the classes in each row instead of one row per class"),
    plant("N21", "gan", "gan/data.py", "return TensorDataset(images * 2 - 1, labels)",
          "return TensorDataset(images, labels)", GAN_DATA,
          "digits for the GAN in [0, 1] instead of G's tanh range [-1, 1]"),
    plant("N22", "gan", "gan/config.py", "betas: tuple[float, ...] = option((0.0, 0.999),",
          "betas: tuple[float, ...] = option((0.5, 0.999),", GAN,
          "Adam betas (0.5, 0.999) (DCGAN's) instead of BigGAN-deep's (0, 0.999)"),
    # ---- experiment plumbing --------------------------------------------------------------------------------
    plant("E9", "experiment", RUNDIR, "fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)",
          "fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)", EXPERIMENT,
          "the lock file is truncated before locking: a refused run cannot name the process holding the folder"),
    plant("E10", "experiment", "evonorm_core/experiment/files.py", 'with open(path, "a", encoding="utf-8") as f:',
          'with open(path, "w", encoding="utf-8") as f:', EXPERIMENT,
          "append_jsonl overwrites the log with the new record instead of appending it"),
    plant("E11", "experiment", "evonorm_core/experiment/config.py",
          "if inner is int and not isinstance(value, int):", "if inner is int and not isinstance(value, (int, float)):",
          (EXPERIMENT, SEARCH_CONFIG), "integer settings accept floats (steps=1.5)"),
]

# ---- the fifth set ("fresh5"): new bugs of the same kinds, fixed before its first run -----
#
# Made as FRESH2-FRESH4 were (from the source and the paper, not from the tests; whole test
# files per plant; no line or mistake of PLANTS, FRESH2, FRESH3 or FRESH4 repeated), after
# FRESH4's misses got their tests; more of its plants sit in the code around the core
# (GAN trainer/sampling/metrics/report, search driver/report/rerank/compare/proxy/front end,
# classification training and tables, detection config/optimizer/data/report, run files).

SEARCH_RUNS = "tests/test_search_runs.py"
GAN_REPORT = "tests/test_gan_report.py"
GAN_METRICS = "tests/test_gan_metrics.py"
DETECTION_TRAIN = "tests/test_detection_train.py"

FRESH5: list[Plant] = [
    # ---- CPU kernels --------------------------------------------------------------------------
    plant("K15", "cpu-kernels", CPP, "const int32_t scale_bits = (static_cast<int32_t>(k) + 127) << 23;",
          "const int32_t scale_bits = (static_cast<int32_t>(k) + 126) << 23;", FAST,
          "float exp: exponent bias 126 instead of 127, every float32/half sigmoid reads exp(-z) / 2"),
    plant("K16", "cpu-kernels", CPP, "dgamma[nc] = sums[nc] * r;", "dgamma[nc] = sums[nc];", FAST,
          "S backward: dgamma sums g x s without the group rstd r"),
    plant("K17", "cpu-kernels", CPP, "for (i64 n = 0; n < N; n++) per_c[c] += per_nc_sum[n * C + c];",
          "for (i64 n = 0; n < N; n++) per_c[c] += per_nc_sum[c * N + n];", FAST,
          "per-channel parameter gradients summed over (n, c) sums indexed as (c, n): wrong elements added"),
    # ---- fused operators: generic implementation, autograd ---------------------------------
    plant("G13", "fused-ops", LIBRARY, "k0 = -k * mean if centered else torch.zeros_like(k)", "k0 = -k * mean", FAST,
          "generic S backward: S2 (group mean square, not centered) gets the group mean's term of dx"),
    plant("G14", "fused-ops", LIBRARY, "        return dx, dw, db, dv, None, None, None\n",
          "        return dx, dw, dv, db, None, None, None\n", FAST,
          "double backward of the S series returns v1's gradient as the bias's and the bias's as v1's"),
    # ---- the functional and statistics --------------------------------------------------------
    plant("F14", "functional", FORMULAS,
          "return to_nchw(v1, x.dtype) * x + torch.sqrt(stats.instance_var(x) + eps)",
          "return to_nchw(v1, x.dtype) * x + torch.sqrt(stats.instance_mean_square(x) + eps)",
          ("tests/test_functional.py", LAYERS),
          "composed EvoNorm-B0: instance term from the mean square mu_wh(x^2) instead of the variance s2_wh"),
    plant("F15", "functional", STATISTICS, "return torch.var_mean(x, dim=dim, unbiased=False, keepdim=keepdim)",
          "return torch.var_mean(x, dim=dim, unbiased=True, keepdim=keepdim)", (LAYERS, PRIMS),
          "instance, group and layer variances unbiased (n - 1) instead of the paper's population s^2"),
    plant("F16", "functional", FORMULAS,
          "m2 = stats.group_var(x, groups) if centered else stats.group_mean_square(x, groups)",
          "m2 = stats.group_mean_square(x, groups) if centered else stats.group_var(x, groups)",
          ("tests/test_functional.py", LAYERS),
          "composed S series: centered flag inverted (S0/S1 by the group mean square, S2 by the group variance)"),
    # ---- layers -----------------------------------------------------------------------------------
    plant("L21", "layers", "evonorm_core/layers/evonorm.py", "if self.nonlinearity and self.has_v1:",
          "if self.has_v1:", (LAYERS, "tests/test_registry.py"),
          "EvoNorm-B0/S0 built with nonlinearity=False (a plain affine) still get a learnable v1"),
    plant("L22", "layers", "evonorm_core/layers/evonorm.py", "momentum: float | None = 0.1,",
          "momentum: float | None = 0.01,", (LAYERS, RUNNING),
          "EvoNorm-B layers default to momentum 0.01 (TensorFlow's 0.99 decay read as PyTorch's) instead of 0.1"),
    plant("L23", "layers", "evonorm_core/layers/conditional.py",
          "for module in (self.norm, self.gain, self.bias):", "for module in (self.gain, self.bias):",
          "tests/test_layers_conditional.py",
          "conditional layer's reset_parameters leaves the wrapped layer (v0/v1, moving averages) as it is"),
    plant("L24", "layers", "evonorm_core/layers/base.py",
          "        super().reset_parameters()\n        self.reset_running_stats()\n",
          "        super().reset_parameters()\n", (LAYERS, RUNNING),
          "reset_parameters of batch-statistics layers keeps the old moving averages and batch count"),
    # ---- moving averages -------------------------------------------------------------------------
    plant("R11", "running-stats", "evonorm_core/running_stats.py",
          "        for module, mode in modes.items():\n            module.training = mode\n", "", RUNNING,
          "after recalibration the model stays in eval with its batch-statistics layers in train mode"),
    plant("R12", "running-stats", "evonorm_core/running_stats.py", "not 0 < momentum <= 1:", "not 0 < momentum < 1:",
          (RUNNING, LAYERS), "momentum=1 (each average is the last batch's) refused: (0, 1) instead of (0, 1]"),
    # ---- conversion ---------------------------------------------------------------------------------
    plant("C9", "conversion", "evonorm_core/convert.py", "**{**state, **options})", "**{**options, **state})",
          CONVERT, "an explicit device/dtype option is overridden by each BatchNorm's own"),
    plant("C10", "conversion", "evonorm_core/convert.py",
          "return isinstance(m, (NormAct2d, ConditionalNormAct2d)) or super().is_leaf_module(m, qualname)",
          "return isinstance(m, ConditionalNormAct2d) or super().is_leaf_module(m, qualname)", CONVERT,
          "the tracer steps into the suite's own norm-act layers (a model already holding one is not kept opaque)"),
    # ---- layer search: engine ---------------------------------------------------------------------------
    plant("Q36", "search", "evonorm_core/search/evolution.py", "return self.rng.choice(pareto_frontier(tournament))",
          "return pareto_frontier(tournament)[0]", (DRIVER, SEARCH_CONFIG),
          "Pareto tournaments always return the frontier's first member instead of a uniform draw from it"),
    plant("Q37", "search", "evonorm_core/search/driver.py",
          "(self.max_candidates is not None and proposed >= self.max_candidates)",
          "(self.max_candidates is not None and proposed > self.max_candidates)", DRIVER,
          "--max-candidates N proposes N + 1 candidates"),
    # ---- layer search: front end (report, rerank, compare, proxy, config, evolve) ------------------------
    plant("Q38", "search", "search/report.py",
          "if record.accepted and seen.add(record.candidate_id, layer_response(record)):\n            best = sorted(",
          "if record.accepted:\n            best = sorted(", SEARCH_RUNS,
          "top-10 curve counts a function accepted again (the same layer) once per repeat"),
    plant("Q39", "search", "search/report.py",
          "for record in accepted(records):\n        if layers.add(record.candidate_id, layer_response(record)):\n"
          "            first.append(record)",
          "for record in reversed(accepted(records)):\n        if layers.add(record.candidate_id, layer_response(record)):\n"
          "            first.insert(0, record)", SEARCH_RUNS,
          "distinct accepted layers keep the last candidate of each function instead of the first"),
    plant("Q40", "search", "search/rerank.py", "train_steps=train_steps or 2 * proxy.train_steps,",
          "train_steps=train_steps or proxy.train_steps,", SEARCH_RUNS,
          "rerank trains as long as the search instead of twice as long by default"),
    plant("Q41", "search", "search/rerank.py",
          'row["anchors"][a]["mean"] >= reference["anchors"][a]["mean"] for a in anchors)',
          'row["anchors"][a]["mean"] > reference["anchors"][a]["mean"] for a in anchors)', SEARCH_RUNS,
          "'at least BN-ReLU on every anchor' demands strictly better (BN-ReLU is not at least itself)"),
    plant("Q42", "search", "search/compare.py", "before = [mean for x, mean in curve if x <= candidates]",
          "before = [mean for x, mean in curve if x < candidates]", SEARCH_RUNS,
          "Fig. 10 comparison reads the top-10 mean one candidate before the budget"),
    plant("Q43", "search", "search/proxy.py",
          "        torch.manual_seed(self.seed)\n        return build_anchor(", "        return build_anchor(",
          (SEARCH_CONFIG, SEARCH_RUNS),
          "proxy models initialized from the global RNG state, not the seed: equal layers get different scores"),
    plant("Q44", "search", "search/config.py", '"evonorm_b1": "x / max(batch_std(x), (x + v1) * instance_rms(x))",',
          '"evonorm_b1": "x / max(batch_std(x), (x + v1) * instance_std(x))",',
          (SEARCH_CONFIG, "tests/test_search_layer.py"),
          "EvoNorm-B1 reference genome uses the instance std instead of Table 2's sqrt(mu_wh(x^2))"),
    plant("Q45", "search", "search/evolve.py", "return replace_config(saved, explicit, fixed=fixed_on_resume())",
          "return replace_config(saved, explicit)", (SEARCH_CONFIG, SEARCH_RUNS),
          "--resume lets any setting change (proxy, evolution, seed), not only the stop conditions and workers"),
    # ---- classification ---------------------------------------------------------------------------------
    plant("P28", "classification", "evonorm_core/classifiers/trainer.py",
          "        self.optimizer.zero_grad(set_to_none=True)\n",
          "", (TRAINER, TRAIN), "gradients are never cleared: each step adds to every earlier step's gradients"),
    plant("P29", "classification", "classification/recipes.py", "milestones=(30, 60, 80))",
          "milestones=(30, 60, 90))", (TRAIN, TRAINER),
          "ResNet schedule's last LR drop at epoch 90 (never reached) instead of Goyal et al.'s 80"),
    plant("P30", "classification", "classification/train.py", '"trainer": trainer.state_dict(), "epoch": epoch + 1,',
          '"trainer": trainer.state_dict(), "epoch": epoch,', TRAIN,
          "checkpoint records the finished epoch's index: a resumed run trains that epoch again"),
    plant("P31", "classification", "classification/train.py", '"best_top1": max((h["top1"] for h in history)',
          '"best_top1": min((h["top1"] for h in history)', TRAIN, "result.json's best_top1 is the worst epoch's"),
    plant("P32", "classification", "classification/tables.py",
          'f"--nnodes={nodes}", f"--nproc_per_node={per_node}"',
          'f"--nnodes={per_node}", f"--nproc_per_node={nodes}"', TABLES,
          "paper-scale torchrun commands swap nodes and processes per node (ResNet: 8 nodes of 1 GPU)"),
    plant("P33", "classification", "evonorm_core/classifiers/data.py",
          "    mean, std = split.train_images.mean(), split.train_images.std()\n"
          "    return (split.train_images - mean) / std, split.train_labels, (split.val_images - mean) / std, "
          "split.val_labels",
          "    mean, std = split.train_images.mean(), split.train_images.std()\n"
          "    val_mean, val_std = split.val_images.mean(), split.val_images.std()\n"
          "    return (split.train_images - mean) / std, split.train_labels, (split.val_images - val_mean) / val_std, "
          "split.val_labels",
          TRAIN_DATA, "digits validation images standardized with their own mean and std, not the training split's"),
    # ---- detection --------------------------------------------------------------------------------------
    plant("D18", "detection", DETECTION_BASE, "IMS_PER_BATCH: 64", "IMS_PER_BATCH: 32", DETECTION,
          "32 images per step instead of the paper's 8 workers x 8 images"),
    plant("D19", "detection", "detection/optimizer.py", "weight_decay_bias=cfg.SOLVER.WEIGHT_DECAY_BIAS,",
          "weight_decay_bias=cfg.SOLVER.WEIGHT_DECAY_NORM,", (DETECTION, DETECTION_TRAIN),
          "conv/fc biases get the norm-act weight decay (0) instead of the ordinary one"),
    plant("D20", "detection", "detection/report.py", "for key, value in evaluations[-1].items():",
          "for key, value in evaluations[0].items():", (DETECTION_TRAIN, DETECTION),
          "report without final_results.json reads a run's first logged evaluation instead of its last"),
    plant("D21", "detection", "detection/norm.py", "if node.GROUPS > 0:", "if node.GROUPS >= 0:", DETECTION,
          "MODEL.NORM_ACT.GROUPS 0 ('the layer's default') is passed on as groups=0"),
    plant("D22", "detection", "detection/data.py", "recompute_boxes=cfg.MODEL.MASK_ON)", "recompute_boxes=False)",
          (DETECTION_TRAIN, DETECTION), "after the scale-jitter crop, boxes are not recomputed from the cropped masks"),
    # ---- GAN ---------------------------------------------------------------------------------------------
    plant("N23", "gan", "gan/trainer.py", 'kept = [r for r in read_jsonl(log) if r["step"] <= self.step]',
          'kept = [r for r in read_jsonl(log) if r["step"] < self.step]', GAN,
          "resume drops the log line of the checkpoint's own step"),
    plant("N24", "gan", "gan/trainer.py", "        self.discriminator.requires_grad_(True)\n", "", GAN,
          "D's parameters stay frozen after the first G step (requires_grad never turned back on): D never trains again"),
    plant("N25", "gan", "gan/config.py", 'g_lr: float = option(5e-5,', 'g_lr: float = option(1e-4,', GAN,
          "G learning rate 1e-4 (BigGAN's 256x8 script) instead of BigGAN-deep's 5e-5"),
    plant("N26", "gan", "gan/report.py", '"fid_median": statistics.median(fids), "fid_best": min(fids),',
          '"fid_median": statistics.median(fids), "fid_best": max(fids),', GAN_REPORT,
          "Table 5 report's best FID is the highest over seeds instead of the lowest"),
    plant("N27", "gan", "gan/report.py", '("ln_relu",): (91.56, None, 8.35, None),',
          '("ln_relu",): (91.56, None, 8.53, None),', GAN_REPORT,
          "Table 5's LayerNorm-ReLU FID mistyped 8.53 (paper 8.35)"),
    plant("N28", "gan", "gan/sampling.py", "nrow=per_row, normalize=True, value_range=(-1, 1))",
          "nrow=per_row, normalize=True, value_range=(0, 1))", GAN,
          "sample grids clamp G's [-1, 1] images to [0, 1]: everything below mid-grey is black"),
    plant("N29", "gan", "gan/metrics.py", '"is_std": float(result["inception_score_std"]),',
          '"is_std": float(result["inception_score_mean"]),', GAN_METRICS, "is_std reports the Inception Score's mean"),
    # ---- experiment plumbing --------------------------------------------------------------------------------
    plant("E12", "experiment", "evonorm_core/experiment/progress.py",
          "return (self.done - self.start_count) / max(self.elapsed, 1e-9)",
          "return self.done / max(self.elapsed, 1e-9)", EXPERIMENT,
          "a resumed job's rate (and ETA) counts the units done before the resume as done now"),
    plant("E13", "experiment", "evonorm_core/experiment/tables.py",
          "std = statistics.stdev(values) if len(values) > 1 else None",
          "std = statistics.pstdev(values) if len(values) > 1 else None", (EXPERIMENT, TABLES),
          "mean +- std over seeds reports the population std instead of the sample std (n - 1)"),
    plant("E14", "experiment", "evonorm_core/experiment/files.py", "    if limit == 0:\n        return records\n", "",
          EXPERIMENT, "read_jsonl(limit=0) returns the first record"),
    plant("E15", "experiment", "evonorm_core/experiment/config.py",
          "if path in overrides and overrides[path] != get_path(config, path):", "if path in overrides:",
          (EXPERIMENT, SEARCH_CONFIG), "resuming refuses a fixed setting given again with its own value"),
]

# ---- the sixth set ("fresh6"): new bugs of the same kinds, fixed before its first run -----
#
# Made as FRESH2-FRESH5 were (from the source and the paper, not from the tests; whole test
# files per plant; no line or mistake of PLANTS or FRESH2-FRESH5 repeated), after FRESH5's
# misses got their tests; more of its plants sit in modules no earlier set touched (search
# progress and genome, conditional layers, GAN layers/EMA/checkpoints, ResNet/MBConv/model
# building, the synthetic shapes and detection cost, the digits data and seeding).

SEARCH_GENOME = "tests/test_search_genome.py"
SEARCH_LAYER = "tests/test_search_layer.py"
CONDITIONAL = "tests/test_layers_conditional.py"
REGISTRY = "tests/test_registry.py"
MODELS = "tests/test_classifiers_models.py"

FRESH6: list[Plant] = [
    # ---- CPU kernels --------------------------------------------------------------------------
    plant("K18", "cpu-kernels", CPP, "var[nc] = std::max(sums[NC + nc] / s.HW - offset * offset, 0.0);",
          "var[nc] = std::max(sums[NC + nc] / (s.HW - 1) - offset * offset, 0.0);", FAST,
          "per-(n, c) instance moments: the mean square divided by HW - 1 instead of HW"),
    plant("K19", "cpu-kernels", CPP, "yp[j] = static_cast<scalar_t>(xj * sigmoid(vp[c] * xj) * ap[nc] + bp[nc]);",
          "yp[j] = static_cast<scalar_t>(xj * sigmoid(xj) * ap[nc] + bp[nc]);", FAST,
          "S forward kernel: the gate is sigmoid(x), v1 ignored"),
    # ---- fused operators: generic implementation, autograd ---------------------------------
    plant("G15", "fused-ops", LIBRARY, "rstd = torch.rsqrt((var if centered else var + mean.square()) + eps)",
          "rstd = torch.rsqrt((var + mean.square() if centered else var) + eps)", FAST,
          "generic S forward: centered flag inverted (S0/S1 by the mean square, S2 by the variance)"),
    # ---- the functional and statistics --------------------------------------------------------
    plant("F17", "functional", FORMULAS, "return x * torch.sigmoid(gate) * torch.rsqrt(m2 + eps)",
          "return x * torch.sigmoid(gate) / (torch.sqrt(m2) + eps)", ("tests/test_functional.py", LAYERS),
          "composed S series: eps added to the standard deviation instead of under the square root"),
    # ---- layers -------------------------------------------------------------------------------
    plant("L25", "layers", "evonorm_core/layers/conditional.py", "return self.norm.forward_affine(x, gamma, beta)",
          "return self.norm.forward_affine(x, beta, gamma)", (CONDITIONAL, GAN_MODELS),
          "conditional norm-act passes the conditional beta as gamma and gamma as beta"),
    plant("L26", "layers", "evonorm_core/layers/conditional.py", "options = {\"affine\": False, **options}",
          "options = {\"affine\": True, **options}", (CONDITIONAL, GAN_MODELS),
          "conditional factory builds the inner layer with its own affine gamma/beta besides the conditional ones"),
    plant("L27", "layers", "evonorm_core/layers/conditional.py",
          "return ConditionalNormAct2d(make_layer(num_channels, True), cond_dim, make_linear)",
          "return ConditionalNormAct2d(make_layer(num_channels, False), cond_dim, make_linear)",
          (CONDITIONAL, GAN_MODELS), "conditional factory builds the inner layer without its nonlinearity"),
    plant("L28", "layers", "evonorm_core/layers/evonorm.py", "eps=eps, groups=groups, affine=affine",
          "eps=eps, groups=None, affine=affine", (LAYERS, FAST),
          "EvoNorm-S layers ignore their groups option (always the default grouping)"),
    # ---- registry and running statistics -------------------------------------------------------
    plant("R13", "registry", "evonorm_core/registry.py", "if batch_statistics is not None:",
          "if batch_statistics:", (REGISTRY, RUNNING),
          "register(batch_statistics=False) ignored: the class's own declaration (or none) is kept"),
    # ---- search: engine and front end ---------------------------------------------------------
    plant("Q46", "search", "search/progress.py",
          "self.top = dict(sorted(self.top.items(), key=lambda kv: -kv[1])[:self.k])",
          "self.top = dict(sorted(self.top.items(), key=lambda kv: kv[1])[:self.k])", (DRIVER, SEARCH_RUNS),
          "progress line keeps the k worst accepted layers as its 'top k'"),
    plant("Q47", "search", "search/progress.py", "rate = self.trained / max(elapsed, 1e-9) * 60",
          "rate = self.trained / max(elapsed, 1e-9)", (DRIVER, SEARCH_RUNS),
          "progress rate of trained candidates per second reported as per minute"),
    plant("Q48", "search", "search/progress.py", "self.counted = len(records)", "self.counted = 0",
          (DRIVER, SEARCH_RUNS), "progress never remembers which records it counted: every update counts them all again"),
    plant("Q49", "search", "evonorm_core/search/genome.py", "if any(not 0 <= i < index for i in node.inputs):",
          "if any(not 0 <= i <= index for i in node.inputs):", (SEARCH_GENOME, PRIMS),
          "genome validation accepts a node that reads its own output"),
    plant("Q50", "search", "evonorm_core/search/genome.py",
          "return tuple(rng.randrange(index) for _ in range(PRIMITIVES[op].arity))",
          "return tuple(rng.randrange(index - 1) for _ in range(PRIMITIVES[op].arity))", (SEARCH_GENOME, DRIVER),
          "random inputs never pick the node just before (off by one in randrange)"),
    plant("Q51", "search", "search/progress.py", "self.rejected[str(record.stage)] += 1",
          "self.rejected[str(record.reason)] += 1", (DRIVER, SEARCH_RUNS),
          "progress counts rejections by their reason text instead of by stage"),
    plant("Q52", "search", "evonorm_core/search/genome.py", "            if index >= len(INITIAL_NODES):\n",
          "            if index > len(INITIAL_NODES):\n", (SEARCH_GENOME, SEARCH_LAYER),
          "live-node walk does not follow the inputs of the first op node"),
    plant("Q53", "search", "evonorm_core/search/genome.py",
          "bad = sorted({node.op for node in genome.nodes} - allowed)",
          "bad = sorted({node.op for node in genome.nodes[1:]} - allowed)", (SEARCH_GENOME, DRIVER),
          "the mode check of a genome's ops skips its first node"),
    plant("Q54", "search", "search/calibrate.py",
          "means = [r[\"mean_accuracy\"] for r in runs if r[\"status\"] == \"accepted\"]",
          "means = [r[\"mean_accuracy\"] for r in runs]", (SEARCH_RUNS, DRIVER),
          "calibration summary averages rejected runs' accuracies into a reference layer's mean"),
    plant("Q55", "search", "search/calibrate.py", "random_runs = [r for r in rows if r[\"layer\"] not in references]",
          "random_runs = [r for r in rows if r[\"layer\"] in references]", (SEARCH_RUNS, DRIVER),
          "calibration summary takes the reference layers' runs as the random layers'"),
    # ---- classification ---------------------------------------------------------------------------
    plant("P34", "classification", "evonorm_core/classifiers/resnet.py",
          "needs_projection = stride != 1 or in_channels != out_channels",
          "needs_projection = stride != 1 and in_channels != out_channels", MODELS,
          "ResNet block: a projection shortcut only when both stride and channels change"),
    plant("P35", "classification", "evonorm_core/classifiers/resnet.py",
          "stride = strides.next(2 if stage > 0 and index == 0 else 1)",
          "stride = strides.next(2 if stage >= 0 and index == 0 else 1)", MODELS,
          "ResNet's first stage downsamples too (stride 2 in its first block)"),
    plant("P36", "classification", "evonorm_core/classifiers/resnet.py",
          "for index in range(math.ceil(depth * depth_multiplier)):",
          "for index in range(int(depth * depth_multiplier)):", MODELS,
          "ResNet depth multiplier truncates the blocks per stage instead of rounding up"),
    plant("P37", "classification", "evonorm_core/classifiers/mbconv.py",
          "head = make_divisible(config.head_channels * max(config.head_min_width, width_multiplier))",
          "head = make_divisible(config.head_channels * width_multiplier)", MODELS,
          "MBConv nets: the head's channels shrink below the minimum width with a width multiplier < 1"),
    plant("P38", "classification", "evonorm_core/classifiers/mbconv.py",
          "repeats = [math.ceil(stage.repeats * depth_multiplier) for stage in config.stages]",
          "repeats = [int(stage.repeats * depth_multiplier) for stage in config.stages]", MODELS,
          "MBConv depth multiplier truncates each stage's repeats instead of rounding up"),
    plant("P39", "classification", "evonorm_core/classifiers/models.py",
          "config, width, depth, _ = efficientnet_config(key.split(\"_\")[1])",
          "config, depth, width, _ = efficientnet_config(key.split(\"_\")[1])", MODELS,
          "EfficientNet variants built with the width and depth coefficients swapped"),
    # ---- detection --------------------------------------------------------------------------------
    plant("D23", "detection", "detection/shapes.py",
          "return float(abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))) / 2)",
          "return float(abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))", (DETECTION_TRAIN, DETECTION),
          "synthetic shapes: polygon area (shoelace) not halved, every COCO area doubled"),
    plant("D24", "detection", "detection/shapes.py", "return [min(x), min(y), max(x) - min(x), max(y) - min(y)]",
          "return [min(x), min(y), max(x), max(y)]", (DETECTION_TRAIN, DETECTION),
          "synthetic shapes: boxes written XYXY where COCO wants XYWH"),
    plant("D25", "detection", "detection/shapes.py", "angles = start + np.arange(vertices) * 2 * math.pi / vertices",
          "angles = start + np.arange(vertices) * 2 * math.pi / (vertices - 1)", (DETECTION_TRAIN, DETECTION),
          "synthetic shapes: polygon vertices spread over 2 pi / (n - 1), the last one repeats the first"),
    plant("D26", "detection", "detection/shapes.py",
          "if not json_path.exists() or json.loads(json_path.read_text())[\"info\"].get(\"image_size\") != size:",
          "if not json_path.exists():", (DETECTION_TRAIN, DETECTION),
          "an existing shapes split of another image size is reused instead of regenerated"),
    plant("D27", "detection", "detection/cost.py",
          "return ModelCost(total / 1e9, count_parameters(model) / 1e6, dict(uncounted))",
          "return ModelCost(total / 1e6, count_parameters(model) / 1e6, dict(uncounted))", (DETECTION, DETECTION_TRAIN),
          "detection cost: MAdds reported in millions under the billions column"),
    # ---- GAN ---------------------------------------------------------------------------------------
    plant("N30", "gan", "gan/layers.py", "padding=kernel_size // 2", "padding=1", (GAN_MODELS, GAN),
          "'same' convolutions always padded by 1: a 1x1 convolution grows the feature map"),
    plant("N31", "gan", "gan/layers.py", "return orthogonal_spectral(nn.Embedding(num_embeddings, dim))",
          "return nn.Embedding(num_embeddings, dim)", (GAN_MODELS, GAN),
          "the class embedding is neither orthogonally initialised nor spectrally normalized"),
    plant("N32", "gan", "gan/layers.py", "self.gamma = nn.Parameter(torch.zeros(()))",
          "self.gamma = nn.Parameter(torch.ones(()))", (GAN_MODELS, GAN),
          "self-attention's gamma starts at 1 instead of BigGAN's 0 (attention active at init)"),
    plant("N33", "gan", "gan/layers.py", "return sn_linear(in_features, out_features, bias=False)",
          "return sn_linear(in_features, out_features, bias=True)", (GAN_MODELS, GAN),
          "the conditional norm-act projections W_g, W_b get a bias"),
    plant("N34", "gan", "gan/checkpoint.py", "return generator.eval(), config, meta",
          "return generator, config, meta", (GAN_METRICS, GAN_REPORT, GAN),
          "load_ema_generator returns the generator in training mode (batch statistics at evaluation)"),
    plant("N35", "gan", "gan/checkpoint.py", "path = Path(checkpoint) if checkpoint else checkpoint_dir(run_dir) / LAST",
          "path = checkpoint_dir(run_dir) / LAST", (GAN_METRICS, GAN_REPORT, GAN),
          "an explicit checkpoint (a snapshot) is ignored: last.pt is always loaded"),
    plant("N36", "gan", "gan/checkpoint.py", "return Generator(spec, config.norm, **config.norm_options)",
          "return Generator(spec, config.norm)", (GAN, GAN_MODELS),
          "the generator is built without the configuration's norm options"),
    # ---- experiment plumbing ---------------------------------------------------------------------
    plant("E16", "experiment", "evonorm_core/experiment/seeding.py", "    random.seed(seed)\n", "", EXPERIMENT,
          "seed_everything leaves Python's random generator unseeded"),
    plant("E17", "experiment", "evonorm_core/experiment/data.py",
          "val, train = order[:num_val], order[num_val:]", "val, train = order[:num_val], order[num_val - 1:]",
          (TRAIN_DATA, EXPERIMENT), "digits split: the last validation image is also in the training set"),
    plant("E18", "experiment", "evonorm_core/experiment/data.py",
          "images = torch.from_numpy(raw.images).float().div(16.0).unsqueeze(1)",
          "images = torch.from_numpy(raw.images).float().div(15.0).unsqueeze(1)", (TRAIN_DATA, EXPERIMENT),
          "digits scaled by 1/15 instead of 1/16: the 16 grey level exceeds 1"),
    plant("E19", "experiment", "evonorm_core/experiment/data.py",
          "return int(torch.cat([self.train_labels, self.val_labels]).max()) + 1",
          "return int(torch.cat([self.train_labels, self.val_labels]).max())", (TRAIN_DATA, EXPERIMENT),
          "ImageSplit.num_classes is the largest label, one short"),
]

PLANT_SETS: dict[str, list[Plant]] = {"original": PLANTS, "fresh2": FRESH2, "fresh3": FRESH3,
                                      "fresh4": FRESH4, "fresh5": FRESH5, "fresh6": FRESH6}
DEFAULT_SET = "original"


# ---- running the plants ------------------------------------------------------------------

def git(*args: str) -> subprocess.CompletedProcess:
    """``git args`` in the repository, output captured."""
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def tracked_changes() -> str:
    """``git status`` lines of tracked files with uncommitted changes (empty: clean)."""
    return git("status", "--porcelain", "--untracked-files=no").stdout.strip()


@functools.cache
def library_files() -> tuple[str, ...]:
    """The tracked files of :data:`LIBRARY_FOLDERS` (paths relative to the repository)."""
    return tuple(git("ls-files", "--", *LIBRARY_FOLDERS).stdout.split())


def occurrences(file: str, snippet: str) -> int:
    """How often ``snippet`` occurs in ``file`` (0 when there is no such text file)."""
    try:
        return (ROOT / file).read_text().count(snippet)
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
        return 0


def locate(p: Plant) -> str | None:
    """The file to plant ``p`` in: its own file when the snippet is there exactly once, else the
    one library file that holds it exactly once (the code moved there); None when there is no
    such file (stale: the code was rewritten, or the snippet became ambiguous)."""
    own = occurrences(p.file, p.original)
    if own:
        return p.file if own == 1 else None
    found = [f for f in library_files() if f != p.file and occurrences(f, p.original)]
    return found[0] if len(found) == 1 and occurrences(found[0], p.original) == 1 else None


def stale_reason(p: Plant) -> str:
    """The ``stale`` verdict's detail: the file and the snippet that is not found exactly once."""
    own = occurrences(p.file, p.original)
    where = (f"{p.file} holds the snippet {own} times (expected once)" if own else
             f"{p.file} no longer holds the snippet and no other library file holds it exactly once")
    return f"stale (target moved): {where}; update the plant. Snippet: {p.original!r}"


def planted_text(p: Plant, text: str) -> str:
    """``text`` (of ``p.file``) with ``p`` planted; ``ValueError`` unless the snippet is there exactly once."""
    count = text.count(p.original)
    if count != 1:
        raise ValueError(f"{p.id}: the snippet occurs {count} times in {p.file} (expected once); update the plant")
    return text.replace(p.original, p.replacement)


def first_failure(output: str) -> str:
    """The first ``FAILED``/``ERROR`` line of pytest's short summary, else the last line (e.g. "3 passed in 9s")."""
    lines = output.strip().splitlines()
    for line in lines:
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:300]
    return lines[-1][:300] if lines else ""


def run_pytest(tests: tuple[str, ...], timeout: float, env: dict[str, str],
               stop_first: bool = True) -> tuple[int | None, str]:
    """``(exit status or None on timeout, output)`` of pytest on ``tests``; the whole process group dies with it."""
    cmd = [sys.executable, "-m", "pytest", *(["-x"] if stop_first else []), "-q", "-p", "no:cacheprovider", *tests]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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


def plant_env(cache: str | None = None) -> dict[str, str]:
    """The tests' environment: no bytecode written; C++ kernels built into ``cache`` if given."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if cache is not None:
        env["EVONORM_CACHE_DIR"] = cache
    return env


def verdict_of(status: int | None) -> str:
    """pytest's exit status as a verdict (1: tests failed, 2: collection error; None: timed out)."""
    if status is None:
        return TIMEOUT
    return {0: MISSED, 1: CAUGHT, 2: CAUGHT}.get(status, ERROR)


def run_plant(p: Plant, timeout: float) -> Verdict:
    """Plant ``p`` where :func:`locate` finds its snippet, run its tests, restore the file
    (always: the write itself is inside the ``try``); a stale plant is not run."""
    file = locate(p)
    if file is None:
        return Verdict(p.id, STALE, 0.0, stale_reason(p), p.file)
    path, start = ROOT / file, time.monotonic()
    original = path.read_text()
    planted = planted_text(p, original)
    cache = tempfile.mkdtemp(prefix="plant-kernels-") if file.endswith(".cpp") else None
    try:
        path.write_text(planted)
        status, output = run_pytest(p.tests, timeout, plant_env(cache))
    finally:
        path.write_text(original)
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    return Verdict(p.id, verdict_of(status), round(time.monotonic() - start, 1), first_failure(output), file)


def clean_check(plants: list[Plant], timeout: float) -> None:
    """Run the union of ``plants``' tests on the unplanted tree; exit if any fails."""
    tests = tuple(dict.fromkeys(t for p in plants for t in p.tests))
    print(f"clean check: {len(tests)} test selections on the unplanted tree ...", flush=True)
    status, output = run_pytest(tests, timeout * 3, plant_env(), stop_first=False)
    if status != 0:
        sys.exit(f"clean check failed (pytest status {status}); fix the tree or the selections first:\n"
                 + "\n".join(output.strip().splitlines()[-30:]))


# ---- reporting -----------------------------------------------------------------------------

def tally(results: dict[str, str]) -> dict:
    """Counts of each verdict in ``results`` (plant id -> verdict) and the fraction caught."""
    counts = {k: sum(r == k for r in results.values()) for k in (CAUGHT, MISSED, TIMEOUT, ERROR, STALE)}
    total = len(results)
    return {"total": total, **counts, "caught_fraction": round(counts[CAUGHT] / total, 3) if total else 0.0}


def load_previous(path: Path) -> dict | None:
    """The results file's content, or None if there is none."""
    return json.loads(path.read_text()) if path.is_file() else None


def write_json(path: Path, plants: list[Plant], verdicts: list[Verdict], command: str, seconds: float,
               partial: bool) -> dict:
    """Write (or, for a partial rerun, update) the results file of the set ``plants``; returns its content."""
    previous = load_previous(path) if partial else None
    entries = {e["id"]: e for e in (previous or {}).get("plants", [])}
    by_id = {p.id: p for p in plants}
    for v in verdicts:
        p = by_id[v.id]
        first = entries.get(v.id, {}).get("first_result", v.result)
        entries[v.id] = {**asdict(p), "file": v.file, "tests": list(p.tests), "result": v.result,
                         "first_result": first, "seconds": v.seconds, "detail": v.detail}
    ordered = [entries[p.id] for p in plants if p.id in entries]
    now = tally({e["id"]: e["result"] for e in ordered})
    run = {"command": command, "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "wall_seconds": round(seconds), "plant_seconds": round(sum(v.seconds for v in verdicts)),
           "tally": tally({v.id: v.result for v in verdicts}),
           "results": {v.id: v.result for v in verdicts}}
    data = {
        "description": "tools/plant_bugs.py: small realistic bugs planted one at a time; a plant is caught "
                       "when its tests fail",
        "before": tally({e["id"]: e["first_result"] for e in ordered}),  # each plant's first verdict
        "after": now,
        "runs": [*(previous or {}).get("runs", []), run],
        "plants": ordered,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def print_line(p: Plant, v: Verdict) -> None:
    """One line per plant: id, area, verdict, seconds, what the bug is, where it was planted if its
    snippet moved, the failing test or the summary (a stale plant: the file and the snippet)."""
    moved = f" [planted in {v.file}: the snippet moved there]" if v.file != p.file and v.result != STALE else ""
    detail = f"  <- {v.detail}" if v.detail else ""
    print(f"{p.id:4} {p.area:15} {v.result.upper():7} {v.seconds:6.1f}s  {p.description}{moved}{detail}", flush=True)


def select(plants: list[Plant], only: list[str] | None) -> list[Plant]:
    """The plants named by ``--only`` (all without it), in the set's order; exits on an id not in ``plants``."""
    if not only:
        return list(plants)
    unknown = sorted(set(only) - {p.id for p in plants})
    if unknown:
        sys.exit(f"unknown plant id(s) {unknown} in this set; --list (with the same --set) shows them")
    return [p for p in plants if p.id in only]


def definition_problems(plants: list[Plant]) -> list[str]:
    """Mistakes in the plants themselves, which stop a run: ids used twice in any set (an id names
    one plant in every set), a replacement that changes nothing or does not compile, an unknown
    test file."""
    every = [p.id for ps in PLANT_SETS.values() for p in ps]
    problems = [f"plant id {i} is used twice" for i in sorted({i for i in every if every.count(i) > 1})]
    for p in plants:
        file = locate(p)
        if p.original == p.replacement:
            problems.append(f"{p.id}: the replacement changes nothing")
        elif file is not None and file.endswith(".py"):  # a syntax error would be a catch no test earned
            try:
                compile((ROOT / file).read_text().replace(p.original, p.replacement), file, "exec")
            except SyntaxError as error:
                problems.append(f"{p.id}: the planted file does not compile: {error}")
        files = {t.split("::")[0] for t in p.tests}
        problems += [f"{p.id}: no test file {f}" for f in sorted(files) if not (ROOT / f).is_file()]
    return problems


def location_problems(plants: list[Plant]) -> list[str]:
    """Plants whose snippet moved to another file (they still run there) or is stale (they do not)."""
    problems = []
    for p in plants:
        file = locate(p)
        if file is None:
            problems.append(f"{p.id}: {stale_reason(p)}")
        elif file != p.file:
            problems.append(f"{p.id}: the snippet moved from {p.file} to {file}; update the plant's file")
    return problems


def validate(plants: list[Plant]) -> list[str]:
    """Every problem with ``plants``: :func:`definition_problems` and :func:`location_problems`."""
    return definition_problems(plants) + location_problems(plants)


def list_plants(plants: list[Plant]) -> None:
    """Print every plant with its tests, then the count per area."""
    for p in plants:
        print(f"{p.id:4} {p.area:15} {p.file}: {p.description}\n     tests: {' '.join(p.tests)}")
    areas: dict[str, int] = {}
    for p in plants:
        areas[p.area] = areas.get(p.area, 0) + 1
    print(f"{len(plants)} plants: " + ", ".join(f"{a} {n}" for a, n in areas.items()))


def _terminate(signum: int, frame: object) -> None:  # SIGTERM unwinds like Ctrl-C: every finally restores its file
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="plant_set", choices=sorted(PLANT_SETS), default=DEFAULT_SET,
                        help="which set of plants: 'original' (the first 57, tests since written against them), "
                             "'fresh2' (a second set, fixed before its first run, tests since written against its "
                             "misses), 'fresh3' (a third set, likewise, tests since written against its misses), "
                             "'fresh4', 'fresh5' and 'fresh6' (a fourth, fifth and sixth set, likewise, tests since "
                             "written against their misses; default %(default)s)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these plants (ids from --list)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write (or update, with --only) the results here")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per plant (default %(default)s)")
    parser.add_argument("--skip-clean-check", action="store_true",
                        help="do not run the tests on the unplanted tree first")
    parser.add_argument("--list", action="store_true", help="list the plants and exit")
    parser.add_argument("--validate", action="store_true",
                        help="check every plant of the set (snippet where the plant says, replacement compiles, "
                             "test files exist), run nothing; exit status 1 if any is moved, stale or wrong")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plant_set = PLANT_SETS[args.plant_set]
    if args.list:
        list_plants(plant_set)
        return 0
    if args.validate:
        problems = validate(plant_set)
        print("\n".join(problems) or f"{len(plant_set)} plants valid")
        return 1 if problems else 0
    plants = select(plant_set, args.only)
    problems = definition_problems(plants)
    if problems:
        sys.exit("the plants are wrong, nothing was run:\n" + "\n".join(problems))
    if tracked_changes():
        sys.exit(f"refusing to plant bugs in a tree with uncommitted changes:\n{tracked_changes()}")
    signal.signal(signal.SIGTERM, _terminate)
    start = time.monotonic()
    if not args.skip_clean_check:
        clean_check(plants, args.timeout)
    verdicts = []
    try:
        for p in plants:
            verdicts.append(run_plant(p, args.timeout))
            print_line(p, verdicts[-1])
    finally:
        if git("diff", "--quiet").returncode != 0:
            print("ERROR: the working tree differs from HEAD after planting:\n" + git("diff", "--stat").stdout,
                  file=sys.stderr)
            sys.exit(3)
    counts = tally({v.id: v.result for v in verdicts})
    print(f"\n{counts['caught']}/{counts['total']} caught ({100 * counts['caught_fraction']:.1f}%), "
          f"{counts['missed']} missed, {counts['timeout']} timed out, {counts['error']} errors, "
          f"{counts['stale']} stale (not run: update them, see --validate)")
    if args.json:
        command = command_line("python3 tools/plant_bugs.py", argv)
        write_json(args.json, plant_set, verdicts, command, time.monotonic() - start, partial=bool(args.only))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
