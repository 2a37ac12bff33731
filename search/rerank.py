"""Rerank a search's top layers with longer training: ``python search/rerank.py DIR``.

Paper section 5.2 / Appendix B: the top-10 layers are trained with fully-fledged models on
90% of the training set and ranked by their mean accuracy on the held-out 10%. Here each of
the top ``--top`` layers of the run in DIR, and the reference layers the run measured, is
trained for ``--train-steps`` (default: 4x the search's) on every anchor of the run with
each of ``--seeds`` (default 0 1 2), on 90% of the run's training images, and scored on the
other 10%; no rejection stages. Every (layer, seed) result is appended to
DIR/rerank.jsonl as it finishes (run the same command again to continue after a kill); the
ranking (mean and sample std over seeds, per anchor and overall, and which layers match or beat
BN-ReLU on every anchor) goes to DIR/rerank.json and is printed best first, with the rank
check of the search's proxy: Kendall's tau-b between the accuracy the search gave each layer
and its reranked mean (does the short proxy rank layers as longer training does?).
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import dataclasses
import sys
from pathlib import Path

from scipy.stats import kendalltau

from evonorm_core.experiment.arguments import DistinctValues, seed
from evonorm_core.experiment.children import training_pool
from evonorm_core.experiment.config import ConfigError, command_line
from evonorm_core.experiment.files import CorruptFileError, append_jsonl, atomic_write_json, read_jsonl
from evonorm_core.experiment.progress import Progress
from evonorm_core.experiment.rundir import RunDirError, open_run
from evonorm_core.experiment.stopping import stop_signal, stop_signals_interrupt
from evonorm_core.experiment.tables import mean_std_fields
from evonorm_core.search.driver import read_checkpoint
from evonorm_core.search.results import CandidateResult
from evonorm_suite.search.backends import evaluate_safely
from evonorm_suite.search.config import RUN_KIND, read_run_config
from evonorm_suite.search.proxy import ProxyConfig, ProxyEvaluator
from evonorm_suite.search.report import reference_layers, top_k

RESULTS, RANKING = "rerank.jsonl", "rerank.json"
RERANK_STEPS_FACTOR = 4


def rerank_proxy(proxy: ProxyConfig, train_steps: int | None) -> ProxyConfig:
    """The search's proxy with longer training, the 90/10 split and no rejection stage."""
    steps = train_steps or RERANK_STEPS_FACTOR * proxy.train_steps
    return dataclasses.replace(proxy, train_steps=steps, quality_steps=0,
                               quality_threshold=0.0, stability_steps=0, holdout=True)


def candidates(state: dict, k: int, with_references: bool) -> dict[str, dict]:
    """name -> {"expression", "genome", "search_accuracy"}: the top-``k`` layers, then the measured
    reference layers (with them, a top layer that is a reference found again is reranked once, as
    the reference); ``search_accuracy``: the mean accuracy the search's proxy gave it (None if
    the search rejected it)."""
    known = reference_layers(state) if with_references else None
    chosen = {f"#{r.candidate_id}": r for r in top_k(state["records"], k, exclude=known)}
    if with_references:
        chosen.update(state["baselines"])
    return {name: {"expression": r.expression, "genome": r.genome,
                   "search_accuracy": round(r.mean_accuracy, 4) if r.accepted else None} for name, r in chosen.items()}


def rank_agreement(chosen: dict[str, dict], ranked: list[dict]) -> dict:
    """Kendall's tau-b between the search's mean accuracy and the rerank's mean over seeds, over the
    layers that have both: does the short proxy rank layers as the longer training does?"""
    pairs = [(chosen[row["name"]]["search_accuracy"], row["mean"]) for row in ranked
             if chosen[row["name"]]["search_accuracy"] is not None and row["mean"] is not None]
    if len(pairs) < 2:
        return {"layers": len(pairs), "kendall_tau_b": None, "p_value": None}
    result = kendalltau(*zip(*pairs))
    return {"layers": len(pairs), "kendall_tau_b": round(float(result.statistic), 3),
            "p_value": float(f"{result.pvalue:.3g}")}  # three significant digits: a small p is not 0


def _evaluate(proxy: ProxyConfig, seed: int, threads: int, genome: dict) -> CandidateResult:
    return evaluate_safely(ProxyEvaluator(proxy, seed=seed, threads=threads), genome, None)


def read_rerank_log(path: Path) -> list[dict]:
    """The rows of ``rerank.jsonl`` (none before the first run finished); :class:`CorruptFileError` naming the
    line of one that is not a rerank result."""
    rows = read_jsonl(path, what="rerank log") if path.is_file() else []
    for line, row in enumerate(rows, 1):
        try:
            if not isinstance(row, dict) or not isinstance(row.get("name"), str) or type(row.get("seed")) is not int:
                raise ValueError("no layer name and seed")
            CandidateResult.from_dict(row["result"])
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptFileError(f"rerank log {str(path)!r}, line {line}: not a rerank result ({error}); delete "
                                   "that line (its run trains again), or the file to rerank from the start") from None
    return rows


def _format(summary: dict) -> str:
    return f"{summary['mean']:.3f}" + ("" if summary["std"] is None else f"+-{summary['std']:.3f}")


def rank(chosen: dict[str, dict], results: list[dict], anchors: tuple[str, ...]) -> list[dict]:
    """Per layer: mean and std over seeds of each anchor's and of the mean accuracy, whether
    every seed finished, and (if BN-ReLU was reranked) whether it is >= BN-ReLU on every anchor."""
    rows = []
    for name, layer in chosen.items():
        runs = [r for r in results if r["name"] == name]
        finished = [CandidateResult.from_dict(r["result"]) for r in runs]
        good = [r for r in finished if r.accuracies and len(r.accuracies) == len(anchors)]
        per_anchor = {a: [r.accuracies[a] for r in good] for a in anchors}
        rows.append({
            "name": name, "expression": layer["expression"], "seeds": [r["seed"] for r in runs],
            "failed": [f"seed {r['seed']}: {r['result']['stage']}: {f.reason}" for r, f in zip(runs, finished)
                       if f not in good],
            "anchors": {a: {**mean_std_fields(v, 4), "values": v} for a, v in per_anchor.items() if v},
            **mean_std_fields([r.mean_accuracy for r in good], 4),
        })
    reference = next((r for r in rows if r["name"] == "bn_relu" and r["mean"] is not None), None)
    for row in rows:
        if reference is not None and row is not reference and row["mean"] is not None:
            row["at_least_bn_relu_on_every_anchor"] = all(
                row["anchors"][a]["mean"] >= reference["anchors"][a]["mean"] for a in anchors)
    return sorted(rows, key=lambda r: -r["mean"] if r["mean"] is not None else 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python search/rerank.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", metavar="DIR", help="output folder of a search/evolve.py run")
    parser.add_argument("--top", type=int, default=10, help="how many of the best layers to rerank (paper: 10)")
    parser.add_argument("--seeds", type=seed, nargs="+", action=DistinctValues, default=[0, 1, 2],
                        help="training seeds, distinct (default: 0 1 2)")
    parser.add_argument("--train-steps", type=int,
                        help=f"training steps per model (default: {RERANK_STEPS_FACTOR}x the search's)")
    parser.add_argument("--no-references", action="store_true", help="do not retrain the run's reference layers")
    parser.add_argument("--workers", type=int, default=2, help="models trained at once (processes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    args = parser.parse_args(argv)
    for flag, value, low in (("--top", args.top, 1), ("--train-steps", args.train_steps, 1), ("--workers", args.workers, 1),
                             ("--threads", args.threads, 1)):
        if value is not None and value < low:
            parser.error(f"{flag} must be >= {low}, got {value}")
    folder = Path(args.output_dir)
    try:
        state = read_checkpoint(folder)
        config = read_run_config(folder)
        proxy = rerank_proxy(config.proxy, args.train_steps)
        # a search run's folder, locked: the search or a second rerank cannot write here meanwhile
        run_dir = open_run(folder, RUN_KIND, resume=True, flag=None)
        done = read_rerank_log(folder / RESULTS)
    except (FileNotFoundError, CorruptFileError, ConfigError, RunDirError) as error:
        parser.error(str(error))
    chosen = candidates(state, args.top, not args.no_references)
    if not chosen:
        parser.error(f"{args.output_dir} has no accepted layer and no reference layer to rerank")
    stale = [r for r in done if r.get("train_steps") != proxy.train_steps]
    if stale:
        parser.error(f"{folder / RESULTS} holds results of {stale[0].get('train_steps')} training steps, not "
                     f"{proxy.train_steps}: pass the same --train-steps, or delete it to start over")
    finished = {(r["name"], r["seed"]) for r in done}
    todo = [(name, run_seed) for name in chosen for run_seed in args.seeds if (name, run_seed) not in finished]
    print(f"reranking {len(chosen)} layers x {len(args.seeds)} seeds ({len(todo)} to train): {proxy.train_steps} "
          f"steps on {', '.join(proxy.anchors)}, 90% of the training images, scored on the held-out 10%", flush=True)
    pool = training_pool(args.workers, "the reranked layers' training runs")
    progress = Progress(len(todo), "runs", prefix="rerank", interval=0.0)
    completed, received = False, None
    try:
        with stop_signals_interrupt() as received:
            running = {pool.submit(_evaluate, proxy, run_seed, args.threads, chosen[name]["genome"]): (name, run_seed)
                       for name, run_seed in todo}
            for future in futures.as_completed(running):
                name, run_seed = running[future]
                result = future.result()
                row = {"name": name, "seed": run_seed, "train_steps": proxy.train_steps, "result": result.to_dict()}
                append_jsonl(folder / RESULTS, row, sync=True)
                done.append(row)
                accs = " / ".join(f"{v:.3f}" for v in result.accuracies.values())
                progress.update(layer=f"{name} seed {run_seed}: {result.status} {accs}")
        completed = True
    except KeyboardInterrupt:
        stopped = stop_signal(received)
        print(f"\nstopped by {stopped.name}; finished results are in {folder / RESULTS}: run the same "
              "command to continue")
        return 128 + stopped
    except futures.process.BrokenProcessPool:
        print(f"error: a training worker died (killed, or out of memory); finished results are in {folder / RESULTS}: "
              "run the same command to continue", file=sys.stderr)
        return 1
    finally:
        # the forked workers share the folder's lock, which is free only once they are gone: wait
        # for them after a normal end; after Ctrl-C they stop with this process (die_with_parent)
        pool.shutdown(wait=completed, cancel_futures=True)
        run_dir.close()
    ranked = rank(chosen, [r for r in done if r["seed"] in args.seeds], proxy.anchors)
    agreement = rank_agreement(chosen, ranked)
    atomic_write_json(folder / RANKING, {"command": command_line("python search/rerank.py", argv),
                                         "train_steps": proxy.train_steps, "seeds": args.seeds,
                                         "anchors": list(proxy.anchors), "rank_agreement": agreement,
                                         "ranking": ranked})
    print(f"reranked by mean held-out accuracy over seeds {args.seeds} ({', '.join(proxy.anchors)}):")
    for place, row in enumerate(ranked, 1):
        accs = " / ".join(_format(v) for v in row["anchors"].values())
        verdict = {True: "  >= BN-ReLU on every anchor", False: ""}.get(row.get("at_least_bn_relu_on_every_anchor"), "")
        mean = _format(row) if row["mean"] is not None else "  -  "
        print(f"{place:3d}. {row['name']:<11} {mean}  [{accs}]  {row['expression']}{verdict}")
    tau, p_value = agreement["kendall_tau_b"], agreement["p_value"]
    shown = "-" if tau is None else f"{tau:.3f} (p = {p_value:.3g})"
    print(f"rank agreement with the search's proxy: Kendall's tau-b {shown} over {agreement['layers']} layers")
    print(f"ranking: {folder / RANKING}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
