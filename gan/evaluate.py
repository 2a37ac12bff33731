"""Compute IS and FID of a trained run's EMA generator with torch-fidelity.

    python gan/evaluate.py runs/gan/digits_evonorm_s0/seed0          # digits-classifier IS/FID, no download
    python gan/evaluate.py runs/gan/imagenet128_evonorm_s0/seed0 --inception-weights weights-inception-2015-12-05-6726825d.pth

Runs on the embedded digits are measured with the digits classifier of
:mod:`evonorm_suite.gan.digits_classifier` unless Inception weights are given ("digits-classifier IS/FID",
labelled so in every output; not comparable with ImageNet numbers); other data need the
Inception weight file (checked against its SHA-256 before use).

Samples ``--num-samples`` images (default: 50,000, standard for ImageNet 128; for the digits,
as many as the held-out digits, so the FID is comparable with the floor in docs/gan.md)
from ``G_ema`` in eval mode. Batch-statistics layers (BN-ReLU, EvoNorm-B0) use their
moving statistics unless ``--standing-stats N`` recomputes them over N batches first.
The real training images are the FID reference; their feature statistics are kept as plain
arrays (never pickles) under ``--cache-root`` and checked when read back. Each
evaluated checkpoint's numbers go to ``RUN_DIR/metrics/<checkpoint>.json`` and the peak
(``--all-snapshots``: over ``last.pt`` and every kept ``step_N.pt``; lowest FID unless
``--peak-by is``) to ``RUN_DIR/metrics.json``, with everything needed to read them
(sampling mode, sample count, feature extractor and the SHA-256 of its weight file, checkpoint,
its SHA-256, step, and the settings they were ``evaluated_with``). A kept ``step_N.pt`` never
changes, so its numbers are read back instead of measured again where its file holds them for the
same checkpoint file (by SHA-256) under the same settings (``--reevaluate`` measures again);
``last.pt`` moves with training and is always measured.
``--digits-classifier FILE`` measures with that classifier file instead of the cached one (a grid
pins one, so that runs evaluated on different machines share one scale). RUN_DIR must hold a run of
``gan/train_biggan.py``, whose lock the evaluation takes: it does not write into a run that is
still training. Installed as the ``evonorm-gan-eval`` command.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from evonorm_core.experiment.arguments import at_least, output_folder, positive_int
from evonorm_core.experiment.arguments import seed as seed_value
from evonorm_core.experiment.files import atomic_write_json
from evonorm_core.experiment.rundir import RunDirError, holds_run, open_run
from evonorm_core.running_stats import batch_statistics_layers
from evonorm_suite.gan import digits_classifier
from evonorm_suite.gan.checkpoint import (
    LAST,
    RUN_KIND,
    checkpoint_dir,
    load_ema_generator,
    resolve_checkpoint,
    seed_runs,
)
from evonorm_suite.gan.data import UInt8Images, build_dataset, digits_dataset
from evonorm_suite.gan.metrics import (
    DIGITS,
    INCEPTION,
    INCEPTION_FILE,
    GeneratorSampler,
    InceptionWeightsMissing,
    class_accuracy,
    fidelity_metrics,
    find_inception_weights,
)
from evonorm_suite.gan.reference_statistics import weights_digest
from evonorm_suite.gan.report import read_run_metrics
from evonorm_suite.gan.sampling import standing_statistics

PEAK_KEYS = {"fid": ("fid", -1), "is": ("is_mean", 1)}  # metric and the sign that makes larger better


def reference_cache_name(dataset: str, data_root: str | None, resolution: int, count: int) -> str:
    """A cache key naming the real data, so stats of different folders never mix."""
    digest = hashlib.sha1(os.path.abspath(data_root).encode()).hexdigest()[:8] if data_root else "builtin"
    return f"gan-{dataset}-{digest}-{resolution}px-{count}"


def prepare_sampling(generator: torch.nn.Module, standing_stats: int, standing_batch: int, seed: int) -> str:
    """Recompute standing statistics if asked; returns how batch-statistics layers will sample."""
    if standing_statistics(generator, standing_stats, standing_batch, seed):
        return f"eval mode, standing statistics over {standing_stats} batches of {standing_batch}"
    if batch_statistics_layers(generator):
        return "eval mode, moving statistics"
    return "eval mode, no batch statistics"


@dataclass
class EvalOptions:
    """How samples are drawn and compared (see ``--help``)."""

    num_samples: int | None = None  # None: 50,000 (Inception), the held-out count (digits)
    inception_weights: str | None = None
    digits_classifier: str | None = None  # None: the cached classifier of digits_classifier.weights_file
    standing_stats: int = 16
    standing_batch: int = 64
    reference_samples: int | None = None
    data_root: str | None = None
    cache_root: str | None = None
    batch_size: int = 64
    seed: int = 0
    verbose: bool = False


def evaluated_with(options: EvalOptions, weights: str | None) -> dict:
    """The settings that decide a checkpoint's numbers: the options, with the weight file's SHA-256 for its path."""
    settings = {key: value for key, value in asdict(options).items()
                if key not in ("verbose", "cache_root", "inception_weights", "digits_classifier")}
    return {**settings, "feature_extractor_sha256": weights_digest(weights)}


def metrics_file(run_dir: str, checkpoint: Path) -> Path:
    return Path(run_dir) / "metrics" / checkpoint.name.replace(".pt", ".json")


def evaluate_checkpoint(run_dir: str, checkpoint: str | None, options: EvalOptions, reuse: bool = False) -> dict:
    """IS/FID of one checkpoint's EMA generator, with everything needed to read the numbers; with ``reuse``, a kept
    snapshot's numbers from its metrics file where they were measured from the same file with the same settings."""
    path = resolve_checkpoint(run_dir, checkpoint)
    generator, config, meta = load_ema_generator(run_dir, path)
    if options.data_root and config.dataset == "digits":
        raise ValueError(f"--data-root {options.data_root}: {run_dir} trained on the built-in digits, which have no "
                         "location to give")
    extractor, weights = feature_extractor_for(config, options)
    settings, checkpoint_sha256 = evaluated_with(options, weights), weights_digest(str(path))
    if reuse and path.name != LAST and metrics_file(run_dir, path).is_file():
        previous = read_run_metrics(metrics_file(run_dir, path), what="snapshot metrics")
        if previous.get("evaluated_with") == settings and previous.get("checkpoint_sha256") == checkpoint_sha256:
            return previous
    num_samples = options.num_samples or (len(digits_dataset(config.resolution, "val")) if extractor == DIGITS else 50_000)
    generator.to("cuda" if torch.cuda.is_available() else "cpu")
    sampling = prepare_sampling(generator, options.standing_stats, options.standing_batch, options.seed)
    root = options.data_root or config.data_root
    reference = UInt8Images(build_dataset(config.dataset, root, config.resolution), options.reference_samples)
    cache_name = reference_cache_name(config.dataset, root, config.resolution, len(reference))
    metrics = fidelity_metrics(
        GeneratorSampler(generator, options.seed),
        reference,
        num_samples,
        feature_extractor=extractor,
        weights_path=weights,
        reference_cache_name=cache_name,  # the stored statistics' key adds the extractor and its weights' SHA-256
        cache_root=options.cache_root,
        batch_size=options.batch_size,
        seed=options.seed,
        verbose=options.verbose,
    )
    if extractor == DIGITS:
        classifier = digits_classifier.load_classifier(weights)
        metrics["class_accuracy"] = class_accuracy(generator, classifier, num_samples, options.seed)
    return {
        **metrics,
        "norm": config.norm,
        "norm_options": config.norm_options,
        "checkpoint": os.path.basename(path),
        "checkpoint_sha256": checkpoint_sha256,
        "step": meta["step"],
        "num_samples": num_samples,
        "reference_images": len(reference),
        "feature_extractor": extractor,
        "feature_extractor_sha256": settings["feature_extractor_sha256"],
        "evaluated_with": settings,
        "metric": METRIC_LABEL[extractor],
        "sampling": sampling,
        "seed": config.seed,
        "dataset": config.dataset,
        "resolution": config.resolution,
    }


METRIC_LABEL = {DIGITS: "digits-classifier IS/FID (not comparable with ImageNet numbers)",
                INCEPTION: "Inception IS/FID"}


def feature_extractor_for(config, options: EvalOptions) -> tuple[str, str | None]:
    """``(torch-fidelity extractor, weight file)``: Inception when its weights are given (or the
    data are not the digits: then they must be), the digits classifier for the digits (the file
    ``options.digits_classifier``, checked, or the cached one)."""
    if options.inception_weights or config.dataset != "digits":
        return INCEPTION, find_inception_weights(options.inception_weights)
    if options.digits_classifier:
        return DIGITS, str(digits_classifier.checked_weights_file(options.digits_classifier, config.resolution))
    return DIGITS, str(digits_classifier.weights_file(config.resolution))


def snapshots(run_dir: str) -> list[str]:
    """``last.pt`` and every kept ``step_N.pt`` of a run."""
    return sorted(glob.glob(str(checkpoint_dir(run_dir) / "step_*.pt"))) + [str(resolve_checkpoint(run_dir))]


def evaluate_run(
    run_dir: str, checkpoints: list[str] | None = None, peak_by: str = "fid", options: EvalOptions | None = None,
    reuse: bool = True,
) -> dict:
    """Evaluate ``checkpoints`` (default ``last.pt``) and keep the peak as ``RUN_DIR/metrics.json``.

    Each checkpoint's numbers go to ``RUN_DIR/metrics/<checkpoint>.json`` (with ``reuse``, a kept
    snapshot's numbers already there under the same settings are read back); the one with the
    lowest FID (``peak_by="fid"``) or highest IS (``"is"``) is the run's result, since the
    paper reports each run at its peak. Returns that result. Holds the run's lock meanwhile
    (``RunDirError`` if ``run_dir`` holds no GAN run or a process holds it).
    """
    if peak_by not in PEAK_KEYS:
        raise ValueError(f"peak_by must be one of {sorted(PEAK_KEYS)}, got {peak_by!r}")
    options = options or EvalOptions()
    seeds = [str(p) for p in seed_runs(run_dir).values()]
    if seeds and not holds_run(run_dir):  # train_biggan.py's --run-dir: a folder of seed<k> runs
        raise RunDirError(f"{str(run_dir)!r} holds the runs {', '.join(seeds)}: evaluate each of them "
                          f"(python gan/evaluate.py {seeds[0]} --all-snapshots)")
    with open_run(run_dir, RUN_KIND, resume=True, flag=None):
        results = []
        for checkpoint in checkpoints or [None]:
            result = evaluate_checkpoint(run_dir, checkpoint, options, reuse)
            atomic_write_json(metrics_file(run_dir, Path(result["checkpoint"])), result)
            results.append(result)
        key, sign = PEAK_KEYS[peak_by]
        peak = max(results, key=lambda r: sign * r[key])
        peak = {**peak, "peak_by": peak_by, "checkpoints_evaluated": len(results)}
        atomic_write_json(Path(run_dir) / "metrics.json", peak)
    return peak


sample_count = at_least(2)  # FID compares covariances: one image has none
generated_count = at_least(10)  # and IS averages over 10 splits (torch-fidelity's): fewer images leave one empty


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python gan/evaluate.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by gan/train_biggan.py (…/seed<k>)")
    parser.add_argument("--checkpoint", action="append", help="checkpoint file to evaluate, repeatable "
                        "(default: RUN_DIR/checkpoints/last.pt)")
    parser.add_argument("--all-snapshots", action="store_true",
                        help="evaluate last.pt and every kept step_N.pt; metrics.json is the peak")
    parser.add_argument("--peak-by", choices=sorted(PEAK_KEYS), default="fid",
                        help="which metric picks the peak checkpoint (default %(default)s: lowest FID)")
    parser.add_argument("--num-samples", type=generated_count, help="generated images, >= 10 (default: 50000 for "
                        "Inception, the number of held-out digits for the digits)")
    parser.add_argument("--inception-weights", help=f"local torch-fidelity Inception weights ({INCEPTION_FILE}; "
                        "checked by SHA-256); needed for any data but the digits")
    parser.add_argument("--reevaluate", action="store_true", help="measure every kept step_N.pt again even where "
                        "RUN_DIR/metrics holds its numbers under the same settings (default: read those back)")
    parser.add_argument("--digits-classifier", metavar="FILE", help="the digits classifier file to measure with "
                        "(default: the cached one, trained on first use; gan/table5.py pins one per grid)")
    parser.add_argument("--standing-stats", type=int, default=16, metavar="N",
                        help="BigGAN's standing statistics: recompute batch-statistics layers' moving averages over "
                        "N batches of samples first (default %(default)s; 0: use the moving averages as trained)")
    parser.add_argument("--standing-batch", type=positive_int, default=64,
                        help="batch size of the standing-stats passes (default %(default)s)")
    parser.add_argument("--reference-samples", type=sample_count,
                        help="real images for the FID reference, >= 2 (default: all)")
    parser.add_argument("--data-root", help="real data location if it moved since training")
    parser.add_argument("--cache-root", type=output_folder, help="where the real images' feature statistics are "
                        "kept, as plain arrays (default: ~/.cache/evonorm_core/fid_reference)")
    parser.add_argument("--batch-size", type=positive_int, default=64,
                        help="batch size of generation and feature extraction (default %(default)s)")
    parser.add_argument("--seed", type=seed_value, default=0, help="sampling seed (latents and labels; default %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.standing_stats < 0:
        build_parser().error(f"--standing-stats must be >= 0, got {args.standing_stats}")
    options = EvalOptions(
        num_samples=args.num_samples,
        inception_weights=args.inception_weights,
        digits_classifier=args.digits_classifier,
        standing_stats=args.standing_stats,
        standing_batch=args.standing_batch,
        reference_samples=args.reference_samples,
        data_root=args.data_root,
        cache_root=str(args.cache_root) if args.cache_root else None,
        batch_size=args.batch_size,
        seed=args.seed,
        verbose=True,
    )
    try:
        checkpoints = snapshots(args.run_dir) if args.all_snapshots else args.checkpoint
        result = evaluate_run(args.run_dir, checkpoints, args.peak_by, options, reuse=not args.reevaluate)
    except InceptionWeightsMissing as error:
        raise SystemExit(f"cannot compute IS/FID: {error}") from None
    except (FileNotFoundError, ValueError, RunDirError) as error:
        raise SystemExit(f"error: {error}") from None
    except KeyboardInterrupt:
        print(f"python gan/evaluate.py: interrupted; the snapshots measured so far are in "
              f"{Path(args.run_dir) / 'metrics'}, and the same command reuses them", file=sys.stderr)
        return 130
    print(f"{args.run_dir}: {result['metric']}: IS {result['is_mean']:.2f} ± {result['is_std']:.2f}, FID {result['fid']:.2f} "
          f"({result['num_samples']} samples, {result['sampling']}, {result['checkpoint']} at step {result['step']}, "
          f"peak by {result['peak_by']} of {result['checkpoints_evaluated']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
