"""The verdict rule: one-sided t-tests per comparison, Holm's correction over a report, five outcomes.

A *question* is a claim (or a gate that claims must pass first): a conjunction of comparisons
"A is better than B" on one metric, each made of two :class:`Sample` (a cell's value per seed)
or a sample and a :class:`Constant` (chance accuracy). :func:`run_test` tests one comparison:

* paired t-test on the per-seed differences when both sides were run with the same seeds,
  Welch's t-test otherwise, a one-sample t-test against a constant;
* one-sided, in the claimed direction (lower is better for FID-like metrics): superiority
  H1: A - B > 0, non-inferiority H1: A - B > -margin; the opposite one-sided test
  (H1: A - B < -margin) on the same statistic;
* values without spread (to 1e-9 of their size) leave t undefined: p = 1 both ways.

:func:`judge` turns the tests of many questions into verdicts. A question's p is the largest
p of its comparisons (all must hold: the intersection-union test); its opposite p is the
smallest opposite p times the number of comparisons (some comparison goes the other way:
Bonferroni). Holm's step-down correction runs over one family: every claim with data gives two
hypotheses (its own and the opposite), every gate with data one, whatever the gates decide.
A gate is *separated* when its Holm-adjusted p is at most alpha. A claim is, in this order:
*not measured* (a comparison or a gate without data), *cannot resolve* (a gate not
separated, or a reason given with the claim that its data cannot decide it whatever they say,
such as runs still improving when they stopped; such a claim stays in the family),
*holds* (adjusted p <= alpha), *contradicted* (adjusted opposite p <= alpha), *not resolved*.

scipy is imported by :func:`run_test` only: the core imports nothing but torch and the
standard library when it is imported.
"""
from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.05
PAIRED, WELCH, ONE_SAMPLE = "paired t", "Welch t", "one-sample t"
HOLDS, CONTRADICTED, NOT_RESOLVED, CANNOT_RESOLVE, NOT_MEASURED = (
    "holds", "contradicted", "not resolved", "cannot resolve", "not measured")
SEPARATED, NOT_SEPARATED = "separated", "not separated"
NO_SPREAD = 1e-9  # relative: a standard error below this times the values' size is zero


@dataclass(frozen=True)
class Sample:
    """One side of a comparison: a cell's value per seed (no values: the cell was not measured)."""

    label: str
    values: tuple[float, ...]
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(self.seeds):
            raise ValueError(f"{self.label}: {len(self.values)} values for the seeds {list(self.seeds)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"{self.label}: a seed appears twice in {list(self.seeds)}")
        if not all(math.isfinite(v) for v in self.values):
            raise ValueError(f"{self.label}: values must be finite numbers, got {list(self.values)}")


@dataclass(frozen=True)
class Constant:
    """A side that is a fixed level (chance accuracy): the comparison is a one-sample test."""

    label: str
    value: float


@dataclass(frozen=True)
class Comparison:
    """``a`` better than ``b``: H1 is a - b > -margin, with a - b signed so that positive is better."""

    a: Sample | Constant
    b: Sample | Constant
    higher_is_better: bool = True
    margin: float = 0.0  # 0: superiority; > 0: non-inferiority with this margin, in the metric's units

    def __post_init__(self) -> None:
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"margin must be a finite number >= 0, got {self.margin}")
        if isinstance(self.a, Constant) and isinstance(self.b, Constant):
            raise TypeError(f"{self.a.label} vs {self.b.label}: two constants leave nothing to test")

    @property
    def measured(self) -> bool:
        """Each side that is a sample has the two values a t-test needs."""
        return all(isinstance(s, Constant) or len(s.values) >= 2 for s in (self.a, self.b))

    @property
    def paired(self) -> bool:
        return isinstance(self.a, Sample) and isinstance(self.b, Sample) and set(self.a.seeds) == set(self.b.seeds)


@dataclass(frozen=True)
class TTest:
    """One comparison's test. ``difference`` is mean(a) - mean(b), positive when ``a`` is better."""

    test: str  # PAIRED, WELCH or ONE_SAMPLE
    paired_seeds: tuple[int, ...]  # the seeds whose differences were tested (paired only)
    difference: float
    statistic: float  # t of the hypothesis at the margin; nan when undefined
    df: float
    p: float  # one-sided, H1: difference > -margin
    p_opposite: float  # one-sided, H1: difference < -margin


def _oriented(values: Sequence[float], higher_is_better: bool) -> list[float]:
    return [v if higher_is_better else -v for v in values]


def _sides(comparison: Comparison) -> tuple[list[float], list[float] | float, tuple[int, ...]]:
    """The two sides signed so that higher is better (paired values in seed order), and the paired seeds.
    A constant comes second: "c - B > -margin" is tested as "(-B) - (-c) > -margin"."""
    up, a, b = comparison.higher_is_better, comparison.a, comparison.b
    if isinstance(a, Constant):
        return _oriented(b.values, not up), float(_oriented([a.value], not up)[0]), ()
    if isinstance(b, Constant):
        return _oriented(a.values, up), float(_oriented([b.value], up)[0]), ()
    if not comparison.paired:
        return _oriented(a.values, up), _oriented(b.values, up), ()
    seeds = tuple(sorted(a.seeds))
    by_seed_a, by_seed_b = dict(zip(a.seeds, a.values)), dict(zip(b.seeds, b.values))
    return _oriented([by_seed_a[s] for s in seeds], up), _oriented([by_seed_b[s] for s in seeds], up), seeds


def _standard_error(a: list[float], b: list[float] | float, paired: bool) -> float:
    if isinstance(b, float):
        return statistics.stdev(a) / math.sqrt(len(a))
    if paired:
        return statistics.stdev(x - y for x, y in zip(a, b)) / math.sqrt(len(a))
    return math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))


def _t_test(a: list[float], b: list[float] | float, paired: bool, margin: float, alternative: str):
    """scipy's test of H1: a - b > -margin ("greater") or < -margin ("less")."""
    from scipy import stats  # here: the core imports only torch and the standard library at import time

    if isinstance(b, float):
        return stats.ttest_1samp(a, b - margin, alternative=alternative)
    shifted = [x + margin for x in a]
    if paired:
        return stats.ttest_rel(shifted, b, alternative=alternative)
    return stats.ttest_ind(shifted, b, equal_var=False, alternative=alternative)


def run_test(comparison: Comparison) -> TTest:
    """The one-sided t-tests of a measured comparison, both directions (see the module docstring)."""
    if not comparison.measured:
        raise ValueError(f"{comparison.a.label} vs {comparison.b.label}: a t-test needs two values a side")
    a, b, seeds = _sides(comparison)
    name = ONE_SAMPLE if isinstance(b, float) else PAIRED if seeds else WELCH
    difference = statistics.fmean(a) - (b if isinstance(b, float) else statistics.fmean(b))
    size = max(1.0, *(abs(v) for v in a), *(abs(v) for v in ([b] if isinstance(b, float) else b)))
    if _standard_error(a, b, bool(seeds)) <= NO_SPREAD * size:
        return TTest(name, seeds, difference, math.nan, math.nan, 1.0, 1.0)
    with warnings.catch_warnings():  # scipy warns on nearly equal values; the spread check above handles those
        warnings.simplefilter("ignore", RuntimeWarning)
        claimed = _t_test(a, b, bool(seeds), comparison.margin, "greater")
        opposite = _t_test(a, b, bool(seeds), comparison.margin, "less")
    return TTest(name, seeds, difference, float(claimed.statistic), float(claimed.df), float(claimed.pvalue),
                float(opposite.pvalue))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given (reject where adjusted p <= alpha)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class Question:
    """A claim or a gate: every comparison must hold; ``gates`` name the gates a claim needs first;
    ``cannot_resolve``, when not empty, says why the claim's data cannot decide it (known before any test, e.g.
    runs best at their last snapshot: still improving when they stopped), which makes it *cannot resolve*."""

    id: str
    comparisons: tuple[Comparison, ...]
    gates: tuple[str, ...] = ()
    cannot_resolve: str = ""

    def __post_init__(self) -> None:
        if not self.comparisons:
            raise ValueError(f"{self.id}: a question needs at least one comparison")


@dataclass(frozen=True)
class Verdict:
    """A question's outcome and the numbers behind it (``None``: not in the family, no data)."""

    id: str
    outcome: str
    reason: str
    tests: tuple[TTest | None, ...]
    p: float | None = None
    p_opposite: float | None = None
    p_holm: float | None = None
    p_opposite_holm: float | None = None


def question_p(tests: Sequence[TTest]) -> tuple[float, float]:
    """(p, opposite p) of a conjunction: the largest p; the smallest opposite p times their number."""
    return max(t.p for t in tests), min(1.0, len(tests) * min(t.p_opposite for t in tests))


def _family(questions: Sequence[Question], tests: dict[str, tuple[TTest | None, ...]],
            with_opposite: bool) -> list[tuple[str, str, float]]:
    """(question id, "p" or "p_opposite", p) for every hypothesis of the questions with data."""
    family = []
    for question in questions:
        if all(tests[question.id]):
            p, p_opposite = question_p(tests[question.id])
            family += [(question.id, "p", p)] + ([(question.id, "p_opposite", p_opposite)] if with_opposite else [])
    return family


def judge(gates: Sequence[Question], claims: Sequence[Question],
          alpha: float = ALPHA) -> tuple[dict[str, Verdict], dict[str, Verdict], int]:
    """Verdicts of the gates and of the claims, and the number of hypotheses Holm corrected for."""
    ids = [q.id for q in (*gates, *claims)]
    if len(set(ids)) != len(ids):
        raise ValueError(f"question ids must be unique, got {sorted({i for i in ids if ids.count(i) > 1})}")
    known = {g.id for g in gates}
    for claim in claims:
        if unknown := [g for g in claim.gates if g not in known]:
            raise ValueError(f"{claim.id}: unknown gates {unknown}; known: {sorted(known)}")
    tests = {q.id: tuple(run_test(c) if c.measured else None for c in q.comparisons) for q in (*gates, *claims)}
    family = _family(gates, tests, with_opposite=False) + _family(claims, tests, with_opposite=True)
    adjusted = {(qid, which): p for (qid, which, _), p in zip(family, holm([p for *_, p in family]))}
    raw = {(qid, which): p for qid, which, p in family}

    def numbers(qid: str) -> dict[str, float | None]:
        return {"p": raw.get((qid, "p")), "p_opposite": raw.get((qid, "p_opposite")),
                "p_holm": adjusted.get((qid, "p")), "p_opposite_holm": adjusted.get((qid, "p_opposite"))}

    gate_verdicts = {g.id: Verdict(g.id, *_gate_outcome(g, adjusted.get((g.id, "p")), alpha),
                                   tests[g.id], **numbers(g.id)) for g in gates}
    claim_verdicts = {c.id: Verdict(c.id, *_claim_outcome(c, numbers(c.id), gate_verdicts, alpha),
                                    tests[c.id], **numbers(c.id)) for c in claims}
    return gate_verdicts, claim_verdicts, len(family)


def _unmeasured(question: Question) -> list[str]:
    return [f"{c.a.label} vs {c.b.label}" for c in question.comparisons if not c.measured]


def _gate_outcome(gate: Question, p_holm: float | None, alpha: float) -> tuple[str, str]:
    if missing := _unmeasured(gate):
        return NOT_MEASURED, "no data for " + "; ".join(missing)
    return (SEPARATED if p_holm <= alpha else NOT_SEPARATED), f"Holm-adjusted p {p_holm:.3g} (alpha {alpha})"


def _claim_outcome(claim: Question, numbers: dict[str, float | None], gates: dict[str, Verdict],
                   alpha: float) -> tuple[str, str]:
    if missing := _unmeasured(claim):
        return NOT_MEASURED, "no data for " + "; ".join(missing)
    needed = [gates[g] for g in claim.gates]
    if unmeasured := [g.id for g in needed if g.outcome == NOT_MEASURED]:
        return NOT_MEASURED, "its no-normalization control is not measured: " + "; ".join(unmeasured)
    apart = [g.id for g in needed if g.outcome == NOT_SEPARATED]
    reasons = (["not separated from the no-normalization control: " + "; ".join(apart)] if apart else []) + (
        [claim.cannot_resolve] if claim.cannot_resolve else [])
    if reasons:
        return CANNOT_RESOLVE, "; ".join(reasons)
    p, p_opposite = numbers["p_holm"], numbers["p_opposite_holm"]
    detail = f"Holm-adjusted p {p:.3g}, opposite {p_opposite:.3g} (alpha {alpha})"
    return (HOLDS if p <= alpha else CONTRADICTED if p_opposite <= alpha else NOT_RESOLVED), detail
