"""The verdict rule (evonorm_core.experiment.verdicts) at its edges: the exact messages and reasons a
reader of a report sees, the boundaries of its rules (p equal to alpha, a standard error equal to the
no-spread threshold), its standard errors against hand computations, the sides of a comparison with a
constant when lower is better, and the warnings it lets through. The behaviour on data whose answer
is known is in tests/test_reproduce.py."""
from __future__ import annotations

import math
import re
import warnings

import pytest
from scipy import stats

from evonorm_core.experiment import verdicts
from evonorm_core.experiment.verdicts import (
    ALPHA,
    CANNOT_RESOLVE,
    CONTRADICTED,
    HOLDS,
    NO_SPREAD,
    NOT_MEASURED,
    NOT_RESOLVED,
    NOT_SEPARATED,
    ONE_SAMPLE,
    PAIRED,
    SEPARATED,
    WELCH,
    Comparison,
    Constant,
    Question,
    Sample,
    TTest,
    Verdict,
    judge,
    question_p,
    run_test,
)

BASE = [97.0, 98.0, 96.5, 97.5, 98.5]
GAIN = [v + d for v, d in zip(BASE, [0.6, 0.1, 0.9, 0.3, 0.5])]  # better on every seed, but not by much


def sample(label: str, values: list[float], seeds: list[int] | None = None) -> Sample:
    return Sample(label, tuple(values), tuple(range(len(values)) if seeds is None else seeds))


def compare(a: list[float], b: list[float], label_a: str = "a", label_b: str = "b") -> Comparison:
    return Comparison(sample(label_a, a), sample(label_b, b))


def exactly(message: str) -> str:
    """A pytest.raises pattern that matches the whole message and nothing more."""
    return "^" + re.escape(message) + "$"


# ------------------------------------------------------------------------------ messages
@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: Sample("cell", (1.0, 2.0, 3.0), (0, 1)), ValueError, "cell: 3 values for the seeds [0, 1]"),
    (lambda: Comparison(Constant("chance", 10.0), Constant("floor", 0.0)), TypeError,
     "chance vs floor: two constants leave nothing to test"),
    (lambda: Question("T2-improve", ()), ValueError, "T2-improve: a question needs at least one comparison"),
], ids=["sample values and seeds", "two constants", "question without comparisons"])
def test_bad_building_blocks_are_refused_with_a_message_naming_them(make, error, message):
    """Each refusal names the cell, the sides or the question it is about, and the values at fault."""
    with pytest.raises(error, match=exactly(message)):
        make()


def test_run_test_refuses_a_side_with_fewer_than_two_values_naming_the_sides():
    """A t-test of a side with one value is refused, and the message says which comparison it was."""
    with pytest.raises(ValueError, match=exactly("bn_relu vs no_norm: a t-test needs two values a side")):
        run_test(Comparison(sample("bn_relu", [97.0]), sample("no_norm", BASE)))


def test_judge_names_only_the_repeated_ids():
    """Repeated question ids are refused; the message lists the repeated ones (sorted), not every id."""
    gate = Question("gate", (compare(GAIN, BASE),))
    claims = [Question(qid, (compare(GAIN, BASE),)) for qid in ("c", "gate", "unique", "c")]
    with pytest.raises(ValueError, match=exactly("question ids must be unique, got ['c', 'gate']")):
        judge([gate], claims)


# ------------------------------------------------------------------------------ reasons
def test_no_data_reasons_list_every_unmeasured_comparison_joined_by_semicolons():
    """A gate or a claim with several comparisons lacking data names each of them, "; "-separated."""
    comparisons = (compare([], BASE, "bn", "control"), compare(GAIN, BASE, "gn", "control"),
                   compare(GAIN, [97.0], "s0", "control"))
    gates, claims, hypotheses = judge([Question("gate", comparisons)], [Question("claim", comparisons)])
    expected = "no data for bn vs control; s0 vs control"
    assert (gates["gate"].outcome, gates["gate"].reason) == (NOT_MEASURED, expected)
    assert (claims["claim"].outcome, claims["claim"].reason) == (NOT_MEASURED, expected)
    assert hypotheses == 0


def test_a_claim_names_every_unmeasured_control_it_needs():
    """A claim whose gates have no data is not measured, naming each such gate, "; "-separated."""
    unmeasured = [Question(g, (compare([], BASE, "control", "bn"),)) for g in ("bn_relu", "gn_relu")]
    claim = Question("claim", (compare(GAIN, BASE),), gates=("bn_relu", "gn_relu"))
    _, claims, _ = judge(unmeasured, [claim])
    assert (claims["claim"].outcome, claims["claim"].reason) == (
        NOT_MEASURED, "its no-normalization control is not measured: bn_relu; gn_relu")


def test_a_claim_names_every_gate_not_separated_from_its_control():
    """A claim whose gates do not separate cannot resolve, naming each such gate, "; "-separated."""
    together = [Question(g, (compare(BASE, BASE[::-1], "bn", "control"),)) for g in ("bn_relu", "gn_relu")]
    claim = Question("claim", (compare(GAIN, BASE),), gates=("bn_relu", "gn_relu"))
    gates, claims, _ = judge(together, [claim])
    assert [gates[g].outcome for g in ("bn_relu", "gn_relu")] == [NOT_SEPARATED, NOT_SEPARATED]
    assert (claims["claim"].outcome, claims["claim"].reason) == (
        CANNOT_RESOLVE, "not separated from the no-normalization control: bn_relu; gn_relu")


def test_a_resolved_claim_gives_its_adjusted_p_values_and_alpha_as_its_reason():
    """A claim that holds says why: its Holm-adjusted p and opposite p (3 significant digits) and alpha."""
    _, claims, _ = judge([], [Question("win", (compare(GAIN, BASE),))])
    win = claims["win"]
    assert win.outcome == HOLDS
    assert win.reason == f"Holm-adjusted p {win.p_holm:.3g}, opposite {win.p_opposite_holm:.3g} (alpha {ALPHA})"
    assert win.reason == "Holm-adjusted p 0.024, opposite 0.988 (alpha 0.05)"


def test_judge_keys_and_labels_each_verdict_by_its_question_id():
    """The verdicts come back keyed by question id, in the order given, each labelled with that id."""
    gates = [Question(g, (compare(GAIN, BASE),)) for g in ("g2", "g1")]
    claims = [Question(c, (compare(GAIN, BASE),), gates=("g1",)) for c in ("second", "first", "no data")]
    gate_verdicts, claim_verdicts, _ = judge(gates, claims)
    assert list(gate_verdicts) == ["g2", "g1"] and list(claim_verdicts) == ["second", "first", "no data"]
    assert all(isinstance(v, Verdict) and v.id == key for key, v in {**gate_verdicts, **claim_verdicts}.items())


# ------------------------------------------------------------------------------ alpha is inclusive
GATE = Question("gate", (compare(GAIN, BASE, "bn", "control"),))
WIN = Question("win", (compare(GAIN, BASE),))
LOSS = Question("loss", (compare(BASE, GAIN),))


def verdict_at(question: Question, is_gate: bool, alpha: float) -> Verdict:
    gates, claims, _ = judge([question], [], alpha) if is_gate else judge([], [question], alpha)
    return (gates if is_gate else claims)[question.id]


@pytest.mark.parametrize(("question", "is_gate", "field", "at_alpha"), [
    (GATE, True, "p_holm", SEPARATED),
    (WIN, False, "p_holm", HOLDS),
    (LOSS, False, "p_opposite_holm", CONTRADICTED),
], ids=["gate separated", "claim holds", "claim contradicted"])
def test_an_adjusted_p_equal_to_alpha_is_significant(question, is_gate, field, at_alpha):
    """Significance is "adjusted p <= alpha": with alpha set to the adjusted p itself the gate separates,
    the claim holds or is contradicted; with alpha one float below it, it does not."""
    p = getattr(verdict_at(question, is_gate, ALPHA), field)
    assert 0.0 < p < ALPHA
    assert verdict_at(question, is_gate, p).outcome == at_alpha
    below = verdict_at(question, is_gate, math.nextafter(p, 0.0))
    assert below.outcome == (NOT_SEPARATED if is_gate else NOT_RESOLVED)


def test_the_opposite_p_of_a_conjunction_is_bonferroni_corrected_and_capped_at_one():
    """A question's opposite p is its comparisons' smallest opposite p times their number, at most 1."""
    tests = [TTest(PAIRED, (0, 1), 0.5, 3.0, 1.0, 0.05, 0.7), TTest(PAIRED, (0, 1), 0.2, 1.0, 1.0, 0.2, 0.6)]
    assert question_p(tests) == (0.2, 1.0)  # 2 x 0.6 = 1.2, capped
    assert question_p(tests[:1] + [TTest(PAIRED, (0, 1), 0.1, 0.5, 1.0, 0.3, 0.25)]) == (0.3, 0.5)
    _, claims, _ = judge([], [Question("both", (compare(GAIN, BASE), compare(GAIN, BASE, "a2", "b2")))])
    assert claims["both"].p_opposite == 1.0  # each comparison's opposite p is 0.988


# ------------------------------------------------------------------------------ one comparison
@pytest.mark.parametrize(("a", "b", "paired", "expected"), [
    ([1.0, 2.0, 3.0, 4.0], 0.0, False, math.sqrt(5 / 3) / 2),  # one-sample: stdev / sqrt(n)
    ([3.0, 5.0, 8.0], [2.0, 3.0, 4.0], True, math.sqrt(7) / 3),  # paired: differences 1, 2, 4: sqrt(7/3) / sqrt(3)
    ([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0], False, math.sqrt(2)),  # Welch: sqrt(1/3 + (20/3)/4)
], ids=["one-sample", "paired", "Welch"])
def test_the_standard_error_matches_a_hand_computation(a, b, paired, expected):
    """The standard error behind the no-spread rule is the one of the test that is run."""
    assert verdicts._standard_error(a, b, paired) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("values", "constant", "spread"), [
    ([0.0, 2e-9], 0.0, False),  # standard error 1e-9: exactly NO_SPREAD times the size 1
    ([0.0, 3e-9], 0.0, True),  # 1.5e-9: above it
    ([0.0, 1e-10], 0.0, False),  # values near 0: the size is at least 1, not the values' own size
    ([1e6, 1e6 + 1e-4, 1e6 + 2e-4], 0.0, False),  # 5.8e-5: within 1e-9 of a's size 1e6
    ([1e6, 1e6 + 1e-2, 1e6 + 2e-2], 0.0, True),  # 5.8e-3: beyond it
    ([0.0, 1e-7, 2e-7], 1e6, False),  # 5.8e-8: within 1e-9 of the other side's size 1e6
], ids=["at the threshold", "above the threshold", "near zero", "large a", "large a, wider", "large constant"])
def test_the_no_spread_rule_is_relative_to_the_largest_value_on_either_side_and_inclusive(values, constant, spread):
    """A standard error at most NO_SPREAD times max(1, |every value of both sides|) leaves the test
    undefined (p = 1 both ways); above it the t-test is run."""
    test = run_test(Comparison(sample("a", values), Constant("c", constant)))
    if spread:
        assert math.isfinite(test.statistic) and test.p < 1.0
    else:
        assert math.isnan(test.statistic) and (test.p, test.p_opposite) == (1.0, 1.0)


def test_the_threshold_case_is_exactly_at_the_threshold():
    """The first case above really has a standard error equal to NO_SPREAD (the size being 1)."""
    assert verdicts._standard_error([0.0, 2e-9], 0.0, False) == NO_SPREAD


@pytest.mark.parametrize(("comparison", "name", "seeds", "difference"), [
    (Comparison(sample("a", [98.5, 97.5, 97.0], [1, 0, 2]), sample("b", [97.0, 98.0, 96.5], [0, 1, 2])),
     PAIRED, (0, 1, 2), 0.5),  # a is 0.5 above b on every seed (a's seeds listed in another order)
    (compare([2.0, 2.0, 2.0], [1.0, 1.0]), WELCH, (), 1.0),
    (Comparison(sample("a", [5.0, 5.0]), Constant("c", 3.0)), ONE_SAMPLE, (), 2.0),
], ids=["paired", "Welch", "one-sample"])
def test_a_test_without_spread_still_reports_its_kind_seeds_and_difference(comparison, name, seeds, difference):
    """Without spread the test is undefined (t and df NaN, p = 1 both ways), but it still says which test
    it is, which seeds were paired and the difference of the means."""
    test = run_test(comparison)
    assert (test.test, test.paired_seeds, test.p, test.p_opposite) == (name, seeds, 1.0, 1.0)
    assert test.difference == pytest.approx(difference)
    assert math.isnan(test.statistic) and math.isnan(test.df)


def test_a_constant_first_when_lower_is_better_tests_the_sample_above_the_constant():
    """"A target FID of 10 is better than these runs" (lower is better): the difference is how far the runs
    are above 10, and the test is the one-sample test of the runs being above 10 - margin."""
    fid = sample("fid", [12.0, 13.5, 14.0])
    test = run_test(Comparison(Constant("target", 10.0), fid, higher_is_better=False, margin=1.0))
    assert test.test == ONE_SAMPLE and test.difference == pytest.approx(39.5 / 3 - 10.0)
    expected = stats.ttest_1samp(fid.values, 9.0, alternative="greater")
    assert (test.statistic, test.p) == pytest.approx((expected.statistic, expected.pvalue))


# ------------------------------------------------------------------------------ warnings
def test_a_side_equal_on_every_seed_is_tested_without_a_warning():
    """Welch's test of a cell at 100 % on every seed against runs with spread: scipy warns of precision loss
    on the constant side, the spread check already covers that, so no warning reaches the caller."""
    perfect, others = [100.0, 100.0, 100.0], [97.0, 98.5, 96.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        test = run_test(Comparison(sample("perfect", perfect), sample("others", others, [3, 4, 5])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = stats.ttest_ind(perfect, others, equal_var=False, alternative="greater")
    assert test.test == WELCH and (test.statistic, test.df, test.p) == pytest.approx(
        (expected.statistic, expected.df, expected.pvalue))


def test_warnings_other_than_scipys_runtime_warning_reach_the_caller(monkeypatch):
    """Only scipy's RuntimeWarning is silenced: another warning from the t-test (a deprecation, say) is not."""
    original = stats.ttest_ind

    def deprecated_ttest_ind(*args, **kwargs):
        warnings.warn("ttest_ind will change", DeprecationWarning, stacklevel=2)
        return original(*args, **kwargs)

    monkeypatch.setattr(stats, "ttest_ind", deprecated_ttest_ind)
    with pytest.warns(DeprecationWarning, match="ttest_ind will change"):
        run_test(Comparison(sample("a", GAIN), sample("b", BASE, [5, 6, 7, 8, 9])))  # other seeds: Welch
