"""Run the layer search: ``python search/evolve.py`` (see ``--help`` and docs/search.md).

With no arguments: a B-mode evolution on the embedded digits proxy with the CPU preset
(about 15 minutes on 2 cores), writing to ``runs/search``. ``--data cifar10 --data-dir
PATH`` uses CIFAR-10, ``--preset paper`` the paper's settings, ``--backend ray`` Ray.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from classification.anchors import ANCHOR_NAMES
from evonorm_core.search.driver import LayerSearch, StopCondition, read_checkpoint
from evonorm_core.search.evolution import SELECTIONS, STRATEGIES, EvolutionConfig
from evonorm_core.search.expression import parse
from evonorm_core.search.primitives import MODES
from search.backends import BACKENDS, make_executor
from search.presets import PRESETS, preset_value
from search.progress import ProgressPrinter
from search.proxy import DATASETS, SCHEDULES, ProxyConfig, ProxyEvaluator, load_data
from search.report import print_report, write_progress_plot

BASELINES = {
    "bn_relu": "max(v1 * ((x - batch_mean(x)) / batch_std(x)) + v0, 0)",
    "evonorm_b0": "x / max(batch_std(x), v1 * x + instance_std(x))",
    "evonorm_s0": "x * sigmoid(v1 * x) / group_std(x)",
}
"""The reference layers measured on the same proxy, as genomes (BN-ReLU's own affine is
``v1``/``v0``; the trailing affine starts as the identity)."""


def parse_duration(text: str) -> float:
    """Seconds from ``"900"``, ``"900s"``, ``"15m"`` or ``"1h"``."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text[-1:].lower() in units:
            return float(text[:-1]) * units[text[-1].lower()]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 900, 15m or 1h)") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = p.add_argument
    add("--mode", choices=MODES, default="B", help="B: all of Table 1; S: no batch-dependent op (EvoNorm-S search)")
    add("--strategy", choices=STRATEGIES, default="evolution", help="evolution, or random search with the same rejection")
    add("--selection", choices=SELECTIONS, default="pareto", help="tournament winner: random Pareto-optimal, or best mean")
    add("--preset", choices=sorted(PRESETS), default="cpu", help="cpu: ~15 min on 2 cores; paper: Appendix B/C settings")
    add("--data", choices=DATASETS, default="digits", help="digits: embedded sklearn digits proxy; cifar10: needs --data-dir")
    add("--data-dir", help="folder holding cifar-10-batches-py (torchvision layout), for --data cifar10")
    add("--anchors", help=f"comma-separated anchors, from {', '.join(ANCHOR_NAMES)} (default: preset, all three)")
    add("--max-candidates", type=int, help="stop after this many candidates (default: no limit)")
    add("--time-budget", type=parse_duration, help="stop proposing after this long, e.g. 900, 15m, 1h "
        "(default: preset; cpu 780 s, paper none)")
    add("--workers", type=int, default=2, help="candidates trained at once (processes or Ray tasks)")
    add("--threads", type=int, help="torch threads per worker (default: max(1, 2 // workers))")
    add("--backend", choices=BACKENDS, default="local", help="local: in-process (1 worker) or a process pool; ray: Ray tasks")
    add("--ray-address", help="Ray cluster to join ('auto': the running one); default: start a local Ray")
    add("--output-dir", default="runs/search", help="checkpoint, candidates.jsonl, report and plot go here")
    add("--resume", action="store_true", help="continue the run checkpointed in --output-dir")
    add("--seed", type=int, default=0, help="seed of the search and of every candidate's training")
    add("--baselines", default="bn_relu,evonorm_b0,evonorm_s0",
        help=f"reference layers measured first on the same proxy ('none' to skip), from {', '.join(BASELINES)}")
    add("--time-limit", type=parse_duration, help="per-candidate limit; a candidate past it is rejected (default: preset)")
    knobs = p.add_argument_group("proxy task and evolution knobs (default: the preset's value)")
    for flag, kind, text in [
        ("--anchor-depth", float, "anchors' depth multiplier: blocks per stage, rounded up (paper: 1.0; cpu: 0.01, one block)"),
        ("--lr", float, "SGD learning rate (paper: 0.1)"),
        ("--image-size", int, "training and validation image size"),
        ("--crop-size", int, "random training crop (paper: 24 of 32)"),
        ("--batch-size", int, "training batch (paper: 128)"),
        ("--eval-batch-size", int, "validation batch (paper: 512)"),
        ("--train-steps", int, "steps of the fitness training (paper: 2000 B / 5000 S)"),
        ("--schedule", str, f"learning-rate schedule, one of {SCHEDULES} (paper: constant B / cosine S)"),
        ("--quality-steps", int, "steps before the quality test (paper: 100)"),
        ("--quality-threshold", float, "minimum accuracy on every anchor (paper: 0.2)"),
        ("--stability-steps", int, "adversarial ascent steps (paper: 100; 0 disables the test)"),
        ("--stability-threshold", float, "maximum worst-case gradient norm (paper: 1e8)"),
        ("--stability-batch-size", int, "images in the stability test's batch"),
        ("--stability-anchors", int, "run the stability test on the first N anchors (default: preset; paper: all)"),
        ("--bn-momentum", float, "moving-average momentum of the batch aggregations"),
        ("--recalibration-batches", int, "recompute the moving averages over N batches before validation (0: off)"),
        ("--window", int, "sliding window of the population (paper: 2500)"),
        ("--tournament-fraction", float, "tournament size as a fraction of the population (paper: 0.05)"),
        ("--initial-population", int, "random candidates in the population before tournaments start"),
    ]:
        knobs.add_argument(flag, type=kind, help=text)
    knobs.add_argument("--max-nodes", type=int, default=10, help="intermediate nodes per graph (paper: 10)")
    knobs.add_argument("--accepted-only", action="store_true",
                       help="keep quality-rejected candidates (with the accuracies they reached) out of the population")
    knobs.add_argument("--random-offspring-probability", type=float, default=0.5,
                       help="chance an offspring is replaced by a random graph (paper: 0.5)")
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill every knob left unset from the preset."""
    for key in PRESETS[args.preset]:
        if getattr(args, key, None) is None:
            setattr(args, key, preset_value(args.preset, key, args.mode))
    if args.threads is None:
        args.threads = max(1, 2 // args.workers)
    return args


def proxy_config(args: argparse.Namespace) -> ProxyConfig:
    return ProxyConfig(
        anchors=tuple(a.strip() for a in args.anchors.split(",") if a.strip()), anchor_depth=args.anchor_depth,
        lr=args.lr, data=args.data, data_dir=args.data_dir, image_size=args.image_size, crop_size=args.crop_size,
        batch_size=args.batch_size, eval_batch_size=args.eval_batch_size, train_steps=args.train_steps,
        schedule=args.schedule, quality_steps=args.quality_steps, quality_threshold=args.quality_threshold,
        stability_steps=args.stability_steps, stability_threshold=args.stability_threshold,
        stability_batch_size=args.stability_batch_size, stability_anchors=args.stability_anchors,
        recalibration_batches=args.recalibration_batches, seed=args.seed, threads=args.threads,
        layer_options={"momentum": args.bn_momentum},
    )


def evolution_config(args: argparse.Namespace) -> EvolutionConfig:
    return EvolutionConfig(
        mode=args.mode, strategy=args.strategy, selection=args.selection, max_nodes=args.max_nodes,
        window=args.window, tournament_fraction=args.tournament_fraction,
        initial_population=args.initial_population, random_offspring_probability=args.random_offspring_probability,
        admit_quality_rejected=not args.accepted_only,
    )


def baseline_genomes(names: str):
    if names.strip().lower() == "none":
        return {}
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baselines {unknown}; accepted: {list(BASELINES)} or 'none'")
    return {name: parse(BASELINES[name]) for name in chosen}


def build_search(args: argparse.Namespace, progress: ProgressPrinter) -> tuple[LayerSearch, ProxyConfig]:
    """A new search from ``args``, or with ``--resume`` the checkpointed one (its own settings)."""
    if args.resume:
        saved = read_checkpoint(args.output_dir)["metadata"]["proxy"]
        proxy = ProxyConfig(**{**saved, "anchors": tuple(saved["anchors"]), "threads": args.threads})
    else:
        proxy = proxy_config(args)
    load_data(proxy.data, proxy.data_dir, proxy.image_size)  # fail here, not in every candidate
    executor = make_executor(args.backend, ProxyEvaluator(proxy), args.workers, args.time_limit, args.ray_address)
    if args.resume:
        return LayerSearch.resume(executor, args.output_dir, on_record=progress), proxy
    metadata = {"proxy": asdict(proxy), "preset": args.preset, "argv": sys.argv[1:]}
    search = LayerSearch(evolution_config(args), executor, args.output_dir, args.seed,
                         baselines=baseline_genomes(args.baselines), on_record=progress, metadata=metadata)
    return search, proxy


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = resolve(parser.parse_args(argv))
    progress = ProgressPrinter(StopCondition(args.max_candidates, args.time_budget))
    try:
        search, proxy = build_search(args, progress)
    except (ValueError, OSError) as error:
        parser.error(str(error))
    data = "embedded sklearn digits proxy (no dataset given)" if proxy.data == "digits" else f"CIFAR-10 from {proxy.data_dir}"
    print(f"layer search: mode {search.config.mode}, {search.config.strategy}, data: {data}, anchors "
          f"{', '.join(proxy.anchors)}, {args.workers} worker(s) on {args.backend}, output {args.output_dir}", flush=True)
    try:
        search.run(progress.stop)
    except KeyboardInterrupt:
        print(f"\ninterrupted; finished candidates are checkpointed: add --resume to continue in {args.output_dir}")
        return 130
    finally:
        search.executor.close()
    print_report([args.output_dir])
    print(f"search progress plot: {write_progress_plot([args.output_dir], Path(args.output_dir) / 'progress.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
