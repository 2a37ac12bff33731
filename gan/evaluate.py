"""Compute IS and FID of a trained run's EMA generator with torch-fidelity.

    python gan/evaluate.py runs/gan/imagenet128_evonorm_s0/seed0 --inception-weights weights-inception-2015-12-05-6726825d.pth

Samples ``--num-samples`` images (50,000 by default, as is standard for ImageNet 128)
from ``G_ema`` in eval mode. Batch-statistics layers (BN-ReLU, EvoNorm-B0) use their
moving statistics unless ``--standing-stats N`` recomputes them over N batches first.
The real training images are the FID reference; their statistics are cached. Results
go to ``RUN_DIR/metrics.json`` with everything needed to read them (sampling mode,
sample count, feature extractor, step). Without Inception weights it stops and says that
real IS/FID need them.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import torch

from gan.checkpoint import load_ema_generator
from gan.data import UInt8Images, build_dataset
from gan.metrics import INCEPTION, INCEPTION_FILE, GeneratorSampler, InceptionWeightsMissing, fidelity_metrics, find_inception_weights
from gan.sampling import batch_stat_layers, standing_statistics


def reference_cache_name(dataset: str, data_root: str | None, resolution: int, count: int) -> str:
    """A cache key naming the real data, so stats of different folders never mix."""
    digest = hashlib.sha1(os.path.abspath(data_root).encode()).hexdigest()[:8] if data_root else "builtin"
    return f"gan-{dataset}-{digest}-{resolution}px-{count}"


def prepare_sampling(generator: torch.nn.Module, standing_stats: int, standing_batch: int, seed: int) -> str:
    """Recompute standing statistics if asked; returns how batch-statistics layers will sample."""
    if standing_statistics(generator, standing_stats, standing_batch, seed):
        return f"eval mode, standing statistics over {standing_stats} batches of {standing_batch}"
    if batch_stat_layers(generator):
        return "eval mode, moving statistics"
    return "eval mode, no batch statistics"


def evaluate_run(
    run_dir: str,
    checkpoint: str | None = None,
    num_samples: int = 50_000,
    inception_weights: str | None = None,
    feature_extractor: str = INCEPTION,
    standing_stats: int = 0,
    standing_batch: int = 256,
    reference_samples: int | None = None,
    data_root: str | None = None,
    cache_root: str | None = None,
    batch_size: int = 64,
    seed: int = 0,
    verbose: bool = False,
) -> dict:
    """Evaluate a run, write ``RUN_DIR/metrics.json`` and return its content."""
    weights = find_inception_weights(inception_weights) if feature_extractor == INCEPTION else None
    generator, config, meta = load_ema_generator(run_dir, checkpoint)
    generator.to("cuda" if torch.cuda.is_available() else "cpu")
    sampling = prepare_sampling(generator, standing_stats, standing_batch, seed)
    root = data_root or config.data_root
    dataset = build_dataset(config.dataset, root, config.resolution)
    reference = UInt8Images(dataset, reference_samples)
    metrics = fidelity_metrics(
        GeneratorSampler(generator, seed),
        reference,
        num_samples,
        feature_extractor=feature_extractor,
        weights_path=weights,
        reference_cache_name=reference_cache_name(config.dataset, root, config.resolution, len(reference)),
        cache_root=cache_root,
        batch_size=batch_size,
        seed=seed,
        verbose=verbose,
    )
    result = {
        **metrics,
        "norm": config.norm,
        "norm_options": config.norm_options,
        "step": meta["step"],
        "num_samples": num_samples,
        "reference_images": len(reference),
        "feature_extractor": feature_extractor,
        "sampling": sampling,
        "seed": config.seed,
        "dataset": config.dataset,
        "resolution": config.resolution,
    }
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by gan/train_biggan.py (…/seed<k>)")
    parser.add_argument("--checkpoint", help="checkpoint file to evaluate (default: RUN_DIR/checkpoints/last.pt)")
    parser.add_argument("--num-samples", type=int, default=50_000, help="generated images (default 50000)")
    parser.add_argument("--inception-weights", help=f"local torch-fidelity Inception weights ({INCEPTION_FILE}); required")
    parser.add_argument("--standing-stats", type=int, default=0, metavar="N",
                        help="recompute batch-statistics layers' running stats over N batches first (default 0: off)")
    parser.add_argument("--standing-batch", type=int, default=256, help="batch size of the standing-stats passes")
    parser.add_argument("--reference-samples", type=int, help="real images for the FID reference (default: all)")
    parser.add_argument("--data-root", help="real data location if it moved since training")
    parser.add_argument("--cache-root", help="where reference statistics are cached (default: $TORCH_HOME/fidelity_cache)")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size of generation and feature extraction")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (latents and labels)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        result = evaluate_run(
            args.run_dir,
            checkpoint=args.checkpoint,
            num_samples=args.num_samples,
            inception_weights=args.inception_weights,
            standing_stats=args.standing_stats,
            standing_batch=args.standing_batch,
            reference_samples=args.reference_samples,
            data_root=args.data_root,
            cache_root=args.cache_root,
            batch_size=args.batch_size,
            seed=args.seed,
            verbose=True,
        )
    except InceptionWeightsMissing as error:
        raise SystemExit(f"cannot compute IS/FID: {error}") from None
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"error: {error}") from None
    print(f"{args.run_dir}: IS {result['is_mean']:.2f} ± {result['is_std']:.2f}, FID {result['fid']:.2f} "
          f"({result['num_samples']} samples, {result['sampling']}, step {result['step']})")


if __name__ == "__main__":
    sys.exit(main())
