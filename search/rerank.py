"""Rerank a search's top candidates with longer training: ``python search/rerank.py DIR``.

Paper section 5.2: the top-10 layers are trained with full models on 90% of the training
set and ranked by their mean accuracy on the held-out 10%. Here each of the top ``--top``
candidates of the run in DIR (and the reference layers the run measured) is trained for
``--train-steps`` (default: 4x the search's) on every anchor of the run (or ``--anchors``)
on 90% of the run's training images and scored on the other 10%; no rejection stages.
Results go to DIR/rerank.json and are printed best first.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evonorm_core.search.driver import read_checkpoint
from search.backends import make_executor
from search.proxy import ProxyConfig, ProxyEvaluator
from search.report import mean_accuracy, top_k


def rerank_config(saved: dict, args: argparse.Namespace) -> ProxyConfig:
    """The search's proxy settings with longer training, the 90/10 split and no rejection."""
    anchors = tuple(a for a in args.anchors.split(",") if a) if args.anchors else tuple(saved["anchors"])
    steps = args.train_steps or 4 * saved["train_steps"]
    return ProxyConfig(**{**saved, "anchors": anchors, "train_steps": steps, "quality_steps": 0, "quality_threshold": 0.0,
                          "stability_steps": 0, "holdout": True, "threads": args.threads})


def candidates(state: dict, k: int, with_baselines: bool) -> dict[str, dict]:
    """name -> record: the top-``k`` candidates, then the measured reference layers."""
    chosen = {f"#{r['id']}": r for r in top_k(state["records"], k)}
    if with_baselines:
        chosen.update({name: r for name, r in sorted(state["baselines"].items())})
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", metavar="DIR", help="output directory of a search/evolve.py run")
    parser.add_argument("--top", type=int, default=10, help="how many of the best candidates to rerank (paper: 10)")
    parser.add_argument("--train-steps", type=int, help="training steps per model (default: 4x the search's)")
    parser.add_argument("--anchors", help="comma-separated anchors (default: the search's)")
    parser.add_argument("--no-baselines", action="store_true", help="do not retrain the run's reference layers")
    parser.add_argument("--workers", type=int, default=2, help="models trained at once (local process pool)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    args = parser.parse_args(argv)
    try:
        state = read_checkpoint(args.output_dir)
        config = rerank_config(state["metadata"]["proxy"], args)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    chosen = candidates(state, args.top, not args.no_baselines)
    if not chosen:
        parser.error(f"{args.output_dir} has no accepted candidate and no reference layer to rerank")
    print(f"reranking {len(chosen)} layers: {config.train_steps} steps on {', '.join(config.anchors)}, "
          f"90% of the training images, scored on the held-out 10%", flush=True)
    executor = make_executor("local", ProxyEvaluator(config), args.workers, None)
    names = list(chosen)
    for i, name in enumerate(names):
        executor.submit(i, chosen[name]["genome"])
    results: dict[str, dict] = {}
    while len(results) < len(names):
        for i, result in executor.wait():
            results[names[i]] = {"expression": chosen[names[i]]["expression"], **result}
            print(f"  {names[i]}: {result['status']} {result['accuracies']}", flush=True)
    executor.close()
    ranked = sorted(results.items(), key=lambda kv: -mean_accuracy(kv[1]) if kv[1]["accuracies"] else 1.0)
    (Path(args.output_dir) / "rerank.json").write_text(json.dumps(dict(ranked), indent=1))
    print("reranked by mean held-out accuracy:")
    for rank, (name, result) in enumerate(ranked, 1):
        mean = f"{mean_accuracy(result):.3f}" if result["accuracies"] else "  -  "
        print(f"{rank:3d}. {name:<12} {mean}  {result['expression']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
