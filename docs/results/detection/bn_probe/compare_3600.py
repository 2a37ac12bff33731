"""The 3600-step probe's tests: BN-ReLU and GN-ReLU against the no-normalization control, and GN-ReLU against
BN-ReLU, on box and mask AP, by the report's rule (one-sided paired t-tests by seed, Holm over this probe's own
family: each gate one hypothesis, GN-ReLU vs BN-ReLU both directions).

    python docs/results/detection/bn_probe/compare_3600.py    # reads 3600_steps/miniature.json, writes compare.json
"""
from pathlib import Path

from evonorm_core.experiment.files import atomic_write_json, read_json
from evonorm_core.experiment.verdicts import ALPHA, Comparison, Sample, holm, run_test

HERE = Path(__file__).resolve().parent / "3600_steps"
GATES = (("bn", "no_norm_relu"), ("gn", "no_norm_relu"))
BETWEEN = ("gn", "bn")


def samples(summary: dict, metric: str) -> dict[str, Sample]:
    """Each layer's per-seed ``metric`` at 8 images per step."""
    return {cell["layer"]: Sample(cell["label"], tuple(run[metric] for run in cell["runs"]),
                                  tuple(run["seed"] for run in cell["runs"]))
            for cell in summary["cells"] if cell["setting"] == "batch8" and cell["runs"]}


def hypotheses(summary: dict) -> list[dict]:
    """Every hypothesis of the family with its one-sided p (the gates' claimed direction; both for GN vs BN)."""
    rows = []
    for metric in ("box_ap", "mask_ap"):
        layers = samples(summary, metric)
        for better, worse in (*GATES, BETWEEN):
            test = run_test(Comparison(layers[better], layers[worse]))
            common = {"metric": metric, "test": test.test, "seeds": list(test.paired_seeds),
                      "difference": test.difference}
            rows.append({**common, "hypothesis": f"{layers[better].label} > {layers[worse].label}", "p": test.p})
            if (better, worse) == BETWEEN:
                rows.append({**common, "hypothesis": f"{layers[better].label} < {layers[worse].label}",
                             "p": test.p_opposite})
    return rows


def main() -> None:
    rows = hypotheses(read_json(HERE / "miniature.json"))
    for row, adjusted in zip(rows, holm([row["p"] for row in rows])):
        row.update(p_holm=adjusted, rejected=adjusted <= ALPHA)
        print(f"{row['metric']:8s} {row['hypothesis']:40s} difference {row['difference']:+6.2f}  "
              f"p {row['p']:.4f}  Holm {adjusted:.4f}  {'separated' if row['rejected'] else 'not separated'}")
    atomic_write_json(HERE / "compare.json", {
        "command": "python docs/results/detection/bn_probe/compare_3600.py",
        "rule": "one-sided paired t-test by seed (evonorm_core.experiment.verdicts.run_test), Holm-Bonferroni "
                f"over the {len(rows)} hypotheses below at alpha {ALPHA}",
        "hypotheses": rows})


if __name__ == "__main__":
    main()
