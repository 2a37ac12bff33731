"""The verdict rule (evonorm_core.experiment.verdicts) on data whose answer is known, the paper's
claims as data (tools/paper_claims.json), and tools/reproduce.py: its report, its verdicts.json
(recomputed here from the JSON alone), its commands and its CPU measurement."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import pytest
from scipy import stats

from evonorm_core.experiment.verdicts import (
    CANNOT_RESOLVE,
    CONTRADICTED,
    HOLDS,
    NOT_MEASURED,
    NOT_RESOLVED,
    NOT_SEPARATED,
    PAIRED,
    SEPARATED,
    WELCH,
    Comparison,
    Constant,
    Question,
    Sample,
    holm,
    judge,
    run_test,
)
from tests.tool_scripts import load

PAPER = Path("/work/shared/paper")  # the source documents, outside the repository (not every machine has them)


@pytest.fixture(scope="module")
def reproduce():
    return load("reproduce")


def sample(label: str, values: list[float], seeds: list[int] | None = None) -> Sample:
    return Sample(label, tuple(values), tuple(range(len(values)) if seeds is None else seeds))


def claim(qid: str, a: list[float], b: list[float], *, margin: float = 0.0, gates: tuple[str, ...] = ()) -> Question:
    return Question(qid, (Comparison(sample("a", a), sample("b", b), margin=margin),), gates)


BASE = [97.0, 98.0, 96.5, 97.5, 98.5]


# ------------------------------------------------------------------------------ one comparison
def test_a_clear_win_holds_a_clear_loss_is_contradicted_and_noise_is_not_resolved():
    win = [v + 2 + 0.1 * i for i, v in enumerate(BASE)]  # paired differences 2.0 ... 2.4
    noise = [v + d for v, d in zip(BASE, [0.3, -0.4, 0.1, -0.2, 0.25])]
    _, verdicts, hypotheses = judge([], [claim("win", win, BASE), claim("loss", BASE, win), claim("noise", noise, BASE)])
    assert hypotheses == 6  # each claim and its opposite
    assert [verdicts[q].outcome for q in ("win", "loss", "noise")] == [HOLDS, CONTRADICTED, NOT_RESOLVED]


def test_runs_sharing_their_seeds_are_paired_by_seed_and_others_get_welch():
    a = sample("a", [1.0, 2.0, 3.5, 4.0], [3, 1, 2, 0])  # listed in another seed order than b
    b = sample("b", [0.5, 0.9, 2.2, 3.1], [0, 1, 2, 3])
    paired = run_test(Comparison(a, b))
    by_seed = [4.0, 2.0, 3.5, 1.0]  # a's values for seeds 0, 1, 2, 3
    assert (paired.test, paired.paired_seeds) == (PAIRED, (0, 1, 2, 3))
    assert paired.p == pytest.approx(stats.ttest_rel(by_seed, b.values, alternative="greater").pvalue)
    other = sample("b", list(b.values), [0, 1, 2, 7])  # one seed differs: not paired
    welch = run_test(Comparison(a, other))
    assert (welch.test, welch.paired_seeds) == (WELCH, ())
    expected = stats.ttest_ind(a.values, other.values, equal_var=False, alternative="greater")
    assert (welch.statistic, welch.df, welch.p) == pytest.approx((expected.statistic, expected.df, expected.pvalue))
    assert welch.p + welch.p_opposite == pytest.approx(1.0)


def test_non_inferiority_uses_the_margin_both_ways():
    slightly_worse = [v - 0.3 + 0.05 * i for i, v in enumerate(BASE)]  # 0.3 to 0.1 below, margin 1
    far_worse = [v - 2.5 + 0.05 * i for i, v in enumerate(BASE)]  # 2.5 to 2.3 below
    test = run_test(Comparison(sample("a", slightly_worse), sample("b", BASE), margin=1.0))
    d = [x - y + 1.0 for x, y in zip(slightly_worse, BASE)]
    assert test.statistic == pytest.approx(statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(5)))
    _, verdicts, _ = judge([], [claim("ni", slightly_worse, BASE, margin=1.0), claim("sup", slightly_worse, BASE),
                                claim("far", far_worse, BASE, margin=1.0)])
    assert verdicts["ni"].outcome == HOLDS  # at most 1 point worse
    assert verdicts["sup"].outcome == CONTRADICTED  # but worse: superiority fails the other way
    assert verdicts["far"].outcome == CONTRADICTED  # worse by more than the margin


def test_a_constant_side_is_a_one_sample_test_on_either_side():
    near_chance = sample("diverged", [0.0, 10.2, 9.8, 10.4, 0.0])
    works = sample("works", [70.0, 72.0, 71.0])
    chance = Constant("chance", 10.0)
    above = run_test(Comparison(works, chance))
    assert above.test == "one-sample t" and above.difference == pytest.approx(61.0)
    assert above.p == pytest.approx(stats.ttest_1samp(works.values, 10.0, alternative="greater").pvalue)
    at_most = run_test(Comparison(chance, near_chance, margin=1.0))  # the layer at most 1 point above chance
    assert at_most.p == pytest.approx(stats.ttest_1samp(near_chance.values, 11.0, alternative="less").pvalue)
    assert run_test(Comparison(chance, works, margin=1.0)).p_opposite < 1e-4  # it works: far above chance


def test_lower_is_better_flips_the_direction():
    fid_low, fid_high = sample("low", [5.0, 6.0, 5.5]), sample("high", [9.0, 10.5, 9.4])
    test = run_test(Comparison(fid_low, fid_high, higher_is_better=False))
    assert test.difference > 0 and test.p < 0.05 < test.p_opposite


def test_values_without_spread_leave_the_test_undefined():
    steps = [98.05013927576601, 97.49303621169916, 98.32869080779945]  # accuracies on 359 images
    plus_one_image = [v + 100 / 359 for v in steps]  # the same difference on every seed, up to rounding
    test = run_test(Comparison(sample("a", plus_one_image), sample("b", steps)))
    assert math.isnan(test.statistic) and (test.p, test.p_opposite) == (1.0, 1.0)


def test_bad_samples_are_refused_naming_the_value():
    with pytest.raises(ValueError, match=r"a seed appears twice in \[0, 0\]"):
        sample("cell", [1.0, 2.0], [0, 0])
    with pytest.raises(ValueError, match=r"cell: values must be finite numbers, got \[1.0, nan\]"):
        sample("cell", [1.0, math.nan])
    with pytest.raises(ValueError, match="margin must be a finite number >= 0, got -1"):
        Comparison(sample("a", BASE), sample("b", BASE), margin=-1)


# ------------------------------------------------------------------------------ many claims
def test_holm_adjusts_in_step_down_order():
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> kept at 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_the_family_holds_every_claim_and_its_opposite_and_every_gate():
    win = [v + 2 + 0.1 * i for i, v in enumerate(BASE)]
    gate = Question("gate", (Comparison(sample("bn", win), sample("control", BASE)),))
    claims = [claim("first", win, BASE, gates=("gate",)), claim("second", BASE, win)]
    gates, verdicts, hypotheses = judge([gate], claims)
    assert hypotheses == 5
    p = [gates["gate"].p, verdicts["first"].p, verdicts["first"].p_opposite, verdicts["second"].p,
         verdicts["second"].p_opposite]
    adjusted = holm(p)
    assert [gates["gate"].p_holm, verdicts["first"].p_holm, verdicts["first"].p_opposite_holm,
            verdicts["second"].p_holm, verdicts["second"].p_opposite_holm] == pytest.approx(adjusted)
    assert gates["gate"].p_opposite is None  # a gate asserts one direction only


def test_a_claim_holds_only_if_every_comparison_does():
    win = [v + 2 + 0.1 * i for i, v in enumerate(BASE)]
    noise = [v + d for v, d in zip(BASE, [0.3, -0.4, 0.1, -0.2, 0.25])]
    both = Question("both", (Comparison(sample("a", win), sample("b", BASE)),
                             Comparison(sample("a2", noise), sample("b2", BASE))))
    _, verdicts, _ = judge([], [both])
    first, second = verdicts["both"].tests
    assert verdicts["both"].p == max(first.p, second.p)
    assert verdicts["both"].p_opposite == pytest.approx(min(1.0, 2 * min(first.p_opposite, second.p_opposite)))
    assert verdicts["both"].outcome == NOT_RESOLVED


def test_a_gate_that_fails_or_has_no_control_stops_its_claims():
    win = [v + 2 + 0.1 * i for i, v in enumerate(BASE)]
    apart = Question("apart", (Comparison(sample("bn", win), sample("control", BASE)),))
    together = Question("together", (Comparison(sample("bn", BASE), sample("control", BASE[::-1])),))
    missing = Question("missing", (Comparison(sample("bn", BASE), sample("control", [])),))
    claims = [claim(f"needs {g}", win, BASE, gates=(g,)) for g in ("apart", "together", "missing")]
    gates, verdicts, hypotheses = judge([apart, together, missing], claims)
    assert [gates[g].outcome for g in ("apart", "together", "missing")] == [SEPARATED, NOT_SEPARATED, NOT_MEASURED]
    assert hypotheses == 2 + 3 * 2  # the gates with data, and every claim with data whatever its gate says
    assert verdicts["needs apart"].outcome == HOLDS
    assert verdicts["needs together"].outcome == CANNOT_RESOLVE
    assert "not separated from the no-normalization control: together" in verdicts["needs together"].reason
    assert verdicts["needs missing"].outcome == NOT_MEASURED
    assert "control is not measured: missing" in verdicts["needs missing"].reason


def test_a_claim_given_a_reason_cannot_resolve_whatever_its_tests_say_and_stays_in_the_family():
    win = [v + 2 + 0.1 * i for i, v in enumerate(BASE)]
    improving = Question("improving", (Comparison(sample("a", win), sample("b", BASE)),),
                         cannot_resolve="still improving at the last snapshot: a seed 1")
    apart = Question("apart", (Comparison(sample("bn", BASE), sample("control", BASE[::-1])),))
    both = Question("both", improving.comparisons, ("apart",), "still improving at the last snapshot: b seed 0")
    _, verdicts, hypotheses = judge([apart], [improving, both, claim("plain", win, BASE)])
    assert hypotheses == 1 + 3 * 2
    assert (verdicts["improving"].outcome, verdicts["improving"].reason) == (
        CANNOT_RESOLVE, "still improving at the last snapshot: a seed 1")
    assert verdicts["improving"].p_holm is not None and verdicts["plain"].outcome == HOLDS
    assert verdicts["both"].reason == ("not separated from the no-normalization control: apart; still improving at "
                                       "the last snapshot: b seed 0")


def test_missing_data_is_not_measured_and_stays_out_of_the_family():
    _, verdicts, hypotheses = judge([], [claim("none", [], BASE), claim("one", [97.0], BASE)])
    assert [verdicts[q].outcome for q in ("none", "one")] == [NOT_MEASURED, NOT_MEASURED]
    assert "no data for a vs b" in verdicts["one"].reason and verdicts["one"].p is None
    assert hypotheses == 0


def test_judge_refuses_unknown_gates_and_repeated_ids():
    with pytest.raises(ValueError, match=r"c: unknown gates \['nope'\]"):
        judge([], [claim("c", BASE, BASE, gates=("nope",))])
    with pytest.raises(ValueError, match=r"question ids must be unique, got \['c'\]"):
        judge([], [claim("c", BASE, BASE), claim("c", BASE, BASE)])


def test_the_false_positive_rate_under_the_null_is_at_most_alpha():
    """300 reports of 8 claims whose layers are all equal (3 seeds, normal noise): the share of reports
    with any "holds" or "contradicted" stays within 5 % (plus two standard errors of the estimate)."""
    rng = random.Random(0)
    false = 0
    for _ in range(300):
        claims = [claim(f"c{i}", [rng.gauss(97, 0.5) for _ in range(3)], [rng.gauss(97, 0.5) for _ in range(3)])
                  for i in range(8)]
        false += any(v.outcome != NOT_RESOLVED for v in judge([], claims)[1].values())
    assert false / 300 <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300)


# ------------------------------------------------------------------------------ the claims as data
def test_the_claims_file_round_trips(reproduce):
    raw = json.loads(reproduce.CLAIMS_FILE.read_text())
    claims = reproduce.load_claims()
    assert [c.to_dict() for c in claims] == [{**entry, "note": entry.get("note", "")} for entry in raw]
    assert [reproduce.Claim.from_dict(c.to_dict()) for c in claims] == claims


def test_the_claims_cover_every_table_and_the_unfavourable_statements(reproduce):
    claims = {c.id: c for c in reproduce.load_claims()}
    assert {c.table for c in claims.values()} == {"table2", "table3", "table4", "table5", "fig10"}
    assert claims["T2-B0-no-worse"].kind == "non-inferiority" and claims["T2-B0-no-worse"].margin == 1.0
    assert claims["T2-B0-exception"].better == ("bn_swish",)  # the paper's own 0.2 % drop
    assert claims["T3-GN-only"].worse == ("gn_relu",) and claims["T3-GN-only"].kind == "non-inferiority"
    assert claims["T4-S0-clear-box"].kind == "superiority" and claims["T5-worse-IS"].better == ("bn_relu",)
    assert {claims["T5-S0-per-sample-IS"].metric, claims["T5-S0-per-sample-FID"].metric} == {"is", "fid"}
    assert claims["T2-improve"].gates == ("bn_relu",) and claims["T3-S0-original"].gates == ("gn_relu",)
    assert claims["T4-S0-clear-box"].gates == ("bn_relu", "gn_relu") and claims["F10-evolution"].gates == ()


@pytest.mark.parametrize(("change", "message"), [
    ({"kind": "better"}, "kind must be one of ('superiority', 'non-inferiority'), got 'better'"),
    ({"metric": "fid"}, "metric must be one of ('top1',), got 'fid'"),
    ({"colour": "red"}, "unknown fields ['colour']"),
    ({"cells": [{"paper": "R-50", "batches": [4]}]}, "batches are Table 3's"),
    ({"worse": ["chance"], "table": "table4", "metric": "box_ap"}, "chance is a top-1 level"),
])
def test_a_bad_claim_is_refused_naming_the_value(reproduce, change, message):
    entry = {"id": "x", "section": "5.3", "quote": "q", "table": "table2", "metric": "top1", "kind": "superiority",
             "better": ["evonorm_b0"], "worse": ["bn_relu"], "cells": [{"paper": "R-50"}], "note": ""}
    with pytest.raises(ValueError, match="^claim 'x': .*" + message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        reproduce.Claim.from_dict({**entry, **change})


# ------------------------------------------------------------------------------ the tool
def current_setting(reproduce, table: str, model: str, batch: int | None) -> dict:
    """What classification/tables.py's summary records for a cell trained by the grid's MiniScale now."""
    wanted = reproduce.MINI_SCALE.setting(reproduce.PAPER_TABLES[table], model, batch)
    return {key: wanted[key] for key in reproduce.SETTING_KEYS}


def table2_summary(reproduce, cells: dict[tuple[str, str], list[float | None]], earlier: bool = False) -> dict:
    """A Table 2 summary of these cells, trained in the current setting (``earlier``: recorded without one)."""
    return {"cells": [{"model": model, "layer": layer, "label": layer, "batch": None, "seeds": [0, 1, 2],
                       "final_top1": values, "paper": None,
                       **({} if earlier else {"setting": current_setting(reproduce, "table2", model, None)})}
                      for (model, layer), values in cells.items()]}


def write(root, path, data) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(json.dumps(data))


SEPARATED_TABLE2 = {
    ("resnet50", "bn_relu"): [97.0, 97.6, 97.2], ("resnet50", "no_norm_relu"): [80.0, 81.5, 79.0],
    ("resnet50", "evonorm_b0"): [97.2, 97.5, 97.4], ("resnet50", "bn_swish"): [97.1, 97.9, 97.0],
    ("resnet50", "random_rej"): [60.0, None, 65.0],
    ("mobilenetv2", "bn_relu"): [96.0, 96.3, 96.1], ("mobilenetv2", "no_norm_relu"): [96.1, 96.0, 96.4],
    ("mobilenetv2", "evonorm_b0"): [97.0, 97.3, 97.2], ("mobilenetv2", "bn_swish"): [96.2, 96.1, 96.6],
}


def completed(reproduce, monkeypatch, cells: dict[tuple[str, str], list[float | None]]) -> dict:
    """``cells`` with every other row of their models' Table 2 grid (controls included) filled in, in a grid of
    the fixtures' three seeds: complete columns, which the verdicts read."""
    monkeypatch.setattr(reproduce, "MINI_SCALE", dataclasses.replace(reproduce.MINI_SCALE, seeds=(0, 1, 2)))
    table = reproduce.PAPER_TABLES["table2"]
    rows = {(model, reproduce.CLASSIFICATION_LAYERS[label]) for model, _ in cells
            for label in table.row_labels(model, with_controls=True)}
    return {**{row: [95.0, 95.4, 95.2] for row in sorted(rows)}, **cells}


def test_report_gates_each_model_and_writes_recomputable_verdicts(reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    write(tmp_path, reproduce.STEPS["table2"].summary,
          table2_summary(reproduce, completed(reproduce, monkeypatch, SEPARATED_TABLE2)))
    assert reproduce.main(["--report-only"]) == 0
    document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
    gates = {g["cell"]: g["outcome"] for g in document["gates"] if g["table"] == "table2"}
    assert gates == {"resnet50": SEPARATED, "mobilenetv2": NOT_SEPARATED}
    claims = {c["id"]: c for c in document["claims"]}
    assert claims["T2-B0-no-worse"]["outcome"] == CANNOT_RESOLVE  # MobileNetV2's BN-ReLU is not above the control
    works = claims["T2-rej-works"]  # ResNet-50 only: its gate passed; the diverged seed counts as 0
    assert works["comparisons"][0]["a"]["values"] == [60.0, 0.0, 65.0] and works["outcome"] == NOT_RESOLVED
    assert claims["T3-GN-small"]["outcome"] == NOT_MEASURED and claims["T2-B0-exception"]["outcome"] == NOT_MEASURED
    recompute(document)
    text = (tmp_path / reproduce.REPORT).read_text()
    assert reproduce.rule_text() in text and "## The verdict rule" in text
    assert f"{document['rule']['hypotheses']} hypotheses in Holm's family" in text


def test_a_column_part_way_through_its_grid_is_read_by_no_verdict(reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    cells = completed(reproduce, monkeypatch, SEPARATED_TABLE2)
    efficientnet = {("efficientnet_b0", "bn_swish"): [97.0, 97.2, 97.1], ("efficientnet_b0", "evonorm_b0"): [96.0, 96.1, 96.3],
                    ("efficientnet_b0", "bn_relu"): [96.5, 96.4, 96.6], ("efficientnet_b0", "no_norm_relu"): [20.0, 0.0, 31.0]}
    for layers, outcome in ((efficientnet, NOT_MEASURED), (completed(reproduce, monkeypatch, efficientnet), None)):
        write(tmp_path, reproduce.STEPS["table2"].summary, table2_summary(reproduce, {**cells, **layers}))
        assert reproduce.main(["--report-only"]) == 0
        exception = {c["id"]: c for c in json.loads((tmp_path / reproduce.VERDICTS).read_text())["claims"]}[
            "T2-B0-exception"]
        if outcome:  # 12 of the column's 33 runs: shown, named, and compared with nothing
            assert exception["outcome"] == outcome
            assert exception["outside_miniature"] == ["EfficientNet-B0 (grid incomplete: 12 of its 33 runs)"]
            assert "| efficientnet_b0 | bn_swish | - / 97.1 ± 0.1 (n=3) |" in (tmp_path / reproduce.REPORT).read_text()
        else:  # complete: BN-Swish ahead of B0 on every seed, read as the claim's comparison
            assert exception["outside_miniature"] == [] and exception["outcome"] != NOT_MEASURED
            assert exception["comparisons"][0]["a"]["values"] == [97.0, 97.2, 97.1]


def test_cells_of_an_earlier_setting_are_shown_apart_and_read_by_no_verdict(reproduce, monkeypatch, tmp_path):
    """The same numbers, recorded without their settings (the digits grid before 2026-11-25) or with other epochs:
    every Table 2 verdict is "not measured under the new settings", the cells are listed under "Earlier setting",
    and verdicts.json counts them as set aside."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    summary = table2_summary(reproduce, SEPARATED_TABLE2, earlier=True)
    summary["cells"][0]["setting"] = {**current_setting(reproduce, "table2", "resnet50", None), "epochs": 3.0}
    write(tmp_path, reproduce.STEPS["table2"].summary, summary)
    assert reproduce.main(["--report-only"]) == 0
    document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
    assert {c["outcome"] for c in document["claims"] if c["table"] == "table2"} == {NOT_MEASURED}
    assert document["summaries"]["table2"] == {"path": str(reproduce.STEPS["table2"].summary), "found": True,
                                               "cells_read": 0, "cells_set_aside": len(SEPARATED_TABLE2)}
    assert document["rule"]["hypotheses"] == 0
    text = (tmp_path / reproduce.REPORT).read_text()
    section = text[text.index("## Table 2"):text.index("## Table 3")]
    assert "**Not measured under the new settings**: run `python tools/reproduce.py --only table2`" in section
    assert "No-normalization control (`no_norm_relu`): **not measured** under the new settings" in section
    assert "not measured under the new settings (the summary holds only an earlier setting's runs)" in section
    earlier = section[section.index("### Earlier setting (not used for any verdict)"):]
    assert "the digits grid of classification/tables.py before 2026-11-25" in earlier and '"epochs": 3.0' in earlier
    assert "| resnet50 | no_norm_relu | - / 80.2 ± 1.3 (n=3) |" in earlier
    assert f"{len(SEPARATED_TABLE2)} cells (27 runs)" in text


def test_a_measured_control_is_a_row_of_its_section(reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    summary = table2_summary(reproduce, SEPARATED_TABLE2)
    for cell in summary["cells"]:
        cell["control"] = cell["layer"] == "no_norm_relu"
    write(tmp_path, reproduce.STEPS["table2"].summary, summary)
    assert reproduce.main(["--report-only"]) == 0
    text = (tmp_path / reproduce.REPORT).read_text()
    section = text[text.index("## Table 2"):text.index("## Table 3")]
    assert "| resnet50 | no_norm_relu (control) | - / 80.2 ± 1.3 (n=3) |" in section
    assert "No-normalization control (`no_norm_relu`): the row marked (control) above." in section
    assert "Earlier setting" not in section
    assert "No-normalization control (`no_norm_relu`): **not measured** (no results)" in text  # Tables 4 and 5


def recompute(document: dict) -> None:
    """Every verdict again from verdicts.json alone: the tests, the claims' p, Holm's family, the outcomes."""
    def one_sided(c: dict, alternative: str) -> float:
        sign, a, b, margin = (1 if c["higher_is_better"] else -1), c["a"], c["b"], c["margin"]
        if "constant" in a:  # "constant - B > -margin" is "(-B) - (-constant) > -margin"
            return stats.ttest_1samp([-sign * v for v in b["values"]], -sign * a["constant"] - margin,
                                     alternative=alternative).pvalue
        if "constant" in b:
            return stats.ttest_1samp([sign * v for v in a["values"]], sign * b["constant"] - margin,
                                     alternative=alternative).pvalue
        if c["paired_seeds"]:
            by_seed = [dict(zip(s["seeds"], s["values"])) for s in (a, b)]
            xa, xb = ([sign * values[seed] for seed in c["paired_seeds"]] for values in by_seed)
            return stats.ttest_rel([v + margin for v in xa], xb, alternative=alternative).pvalue
        xa, xb = ([sign * v for v in s["values"]] for s in (a, b))
        return stats.ttest_ind([v + margin for v in xa], xb, equal_var=False, alternative=alternative).pvalue

    def test(c: dict) -> tuple[float, float]:
        return (1.0, 1.0) if c["statistic"] is None else (one_sided(c, "greater"), one_sided(c, "less"))

    family = []
    for kind, entries in (("gate", document["gates"]), ("claim", document["claims"])):
        for entry in entries:
            if all("test" in c for c in entry["comparisons"]):
                p = [test(c) for c in entry["comparisons"]]
                claimed, opposite = max(x for x, _ in p), min(1.0, len(p) * min(y for _, y in p))
                assert (entry["p"], entry["p_opposite"] if kind == "claim" else opposite) == pytest.approx(
                    (claimed, opposite))
                family += [(entry, "p_holm", claimed)] + ([(entry, "p_opposite_holm", opposite)] if kind == "claim" else [])
    assert len(family) == document["rule"]["hypotheses"]
    m, running = len(family), 0.0
    for rank, (entry, key, p) in enumerate(sorted(family, key=lambda f: f[2])):
        running = max(running, min(1.0, (m - rank) * p))
        assert entry[key] == pytest.approx(running)


def table5_summary(improving: dict[str, list[int]] | None = None, unfinished: dict[str, list[int]] | None = None) -> dict:
    """A Table 5 summary: every layer 3 seeds, BN-ReLU and GN-ReLU far above the control, EvoNorm-B0 better than
    BN-ReLU on every seed; the seeds in ``improving`` best at their last snapshot (None: not recorded), those in
    ``unfinished`` not yet trained as far as the grid's schedule asks."""
    fid = {"bn_relu": 10.0, "evonorm_b0": 6.0, "evonorm_s0": 7.0, "gn_relu": 9.0, "ln_relu": 11.0,
           "pixelnorm_relu": 12.0, "no_norm_relu": 60.0}
    layers = {}
    for k, (layer, base) in enumerate(fid.items(), 1):
        key = "gn_relu(groups=8)" if layer == "gn_relu" else layer
        fids = [base + k * d for d in (0.1, -0.2, 0.15)]  # noise of another size per layer: paired differences vary
        layers[key] = {"seeds": [0, 1, 2], "fid": fids, "is": [9.0 - f / 10 for f in fids], "steps": [2500] * 3,
                       "is_median": 0.0, "is_best": 0.0, "fid_median": 0.0, "fid_best": 0.0}
        if improving is not None:
            at_last = [seed in improving.get(layer, []) for seed in (0, 1, 2)]
            layers[key].update(last_steps=[2500 if last else 3500 for last in at_last], best_at_last=at_last)
        if unfinished is not None:
            layers[key]["unfinished"] = unfinished.get(layer, [])
    return {"layers": layers, "fid_floor": 2.5, "fid_noise": 180.0, "cpu_seconds": 1.0, "command": "python gan/table5.py"}


def test_table5_claims_reading_runs_still_improving_cannot_resolve(reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    write(tmp_path, reproduce.STEPS["table5"].summary, table5_summary({"evonorm_s0": [1]}))
    assert reproduce.main(["--report-only"]) == 0
    document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
    gates = {g["id"]: g["outcome"] for g in document["gates"] if g["table"] == "table5"}
    assert set(gates.values()) == {SEPARATED}
    claims = {c["id"]: c for c in document["claims"] if c["table"] == "table5"}
    reads_s0 = {cid for cid, c in claims.items() if "evonorm_s0" in (*c["better"], *c["worse"])}
    assert reads_s0 == {"T5-comparable-IS", "T5-worse-IS", "T5-improved-FID", "T5-S0-per-sample-IS",
                        "T5-S0-per-sample-FID"}
    for cid in reads_s0:
        assert claims[cid]["outcome"] == CANNOT_RESOLVE, cid
        assert claims[cid]["reason"] == "still improving at the last snapshot (best snapshot = last): EvoNorm-S0 seed 1"
    assert claims["T5-BN-cripples-FID"]["outcome"] == NOT_RESOLVED  # BN-ReLU is worse: neither way at 3 seeds
    assert all(c["comparisons"][0]["test"] == "paired t" for c in claims.values())
    recompute(document)
    text = (tmp_path / reproduce.REPORT).read_text()
    section = text[text.index("## Table 5"):text.index("## Fig. 10")]
    assert "| ReLU (no norm) (control) | 3 |" in section and "2500 / 2500 (still improving)" in section
    assert "| evonorm_b0 digits - bn_relu digits | FID (lower is better) | seed 0: -3.90, seed 1: -4.20, seed 2: " \
           "-3.85 | -3.98 | 3 of 3 |" in section
    assert section.count("evonorm_b0 digits - bn_relu digits | IS") + section.count(
        "bn_relu digits - evonorm_b0 digits | IS") == 1  # each pair once


def test_table5_claims_reading_runs_the_grid_is_not_done_with_cannot_resolve(reproduce, monkeypatch, tmp_path):
    """A run not yet trained to the grid's length (or past its peak) is not comparable: its claims and gates wait."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    write(tmp_path, reproduce.STEPS["table5"].summary, table5_summary({}, unfinished={"no_norm_relu": [0, 2]}))
    assert reproduce.main(["--report-only"]) == 0
    document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
    claims = [c for c in document["claims"] if c["table"] == "table5"]
    assert claims and all(c["outcome"] == CANNOT_RESOLVE for c in claims)  # every one is gated by the control
    assert {c["reason"] for c in claims} == {"not yet trained as far as the grid's schedule asks (the same length "
                                             "for every run, then past its peak): ReLU (no norm) seeds 0, 2"}
    text = (tmp_path / reproduce.REPORT).read_text()
    assert "| 2500 / 3500 (unfinished), 2500 / 3500, 2500 / 3500 (unfinished) |" in text
    write(tmp_path, reproduce.STEPS["table5"].summary, table5_summary({}, unfinished={}))
    assert reproduce.main(["--report-only"]) == 0
    document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
    assert all(c["outcome"] != CANNOT_RESOLVE for c in document["claims"] if c["table"] == "table5")


def test_table5_claims_cannot_resolve_when_the_control_is_still_improving_or_peaks_are_not_recorded(
        reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    for improving, reason in (({"no_norm_relu": [0, 2]}, "ReLU (no norm) seeds 0, 2"),
                              (None, "does not record whether these runs peaked")):
        write(tmp_path, reproduce.STEPS["table5"].summary, table5_summary(improving))
        assert reproduce.main(["--report-only"]) == 0
        document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
        claims = [c for c in document["claims"] if c["table"] == "table5"]
        assert {c["outcome"] for c in claims} == {CANNOT_RESOLVE} and all(reason in c["reason"] for c in claims)


def test_report_from_no_results_names_the_command_of_each_experiment(reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    assert reproduce.main(["--report-only"]) == 0
    text = (tmp_path / "docs" / "reproduction.md").read_text()
    for step in reproduce.STEPS:
        assert f"**Not measured yet**: run `python tools/reproduce.py --only {step}`" in text
    document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
    assert {c["outcome"] for c in document["claims"]} == {NOT_MEASURED} and document["rule"]["hypotheses"] == 0


def test_the_docstring_states_the_constants_the_rule_uses(reproduce):
    rule = " ".join(reproduce.rule_text().split())
    for stated in ("alpha = 0.05", "Holm-Bonferroni", "ttest_rel", "equal_var=False", "ttest_1samp",
                   f"{reproduce.CHANCE_TOP1:g} %", "counts as 0 %", "1e-9", f"{reproduce.METRICS['is'].margin} IS",
                   f"{reproduce.METRICS['top1'].margin:g} point of top-1", reproduce.CONTROLS["table2"]):
        assert stated in rule, stated


def test_dry_run_shows_the_selected_models_and_layers(reproduce, capsys):
    assert reproduce.main(["--only", "table3", "--models", "resnet50", "--layers", "bn_relu", "evonorm_s0",
                           "--dry-run"]) == 0
    run, report = capsys.readouterr().out.splitlines()
    assert "classification/tables.py run table3 --scale mini --models resnet50 --layers bn_relu evonorm_s0" in run
    assert "classification/tables.py report table3" in report and "--json docs/results/classification/table3.json" in report


def test_each_table_trains_only_the_anchors_it_has(reproduce, capsys):
    # Table 2 has an EfficientNet-B0 column, Table 3 does not: it gets the others, or only its report
    assert reproduce.main(["--only", "table2", "table3", "--dry-run"]) == 0
    table2_run, _, table3_run, _ = capsys.readouterr().out.splitlines()
    assert "run table2 --scale mini --models resnet50 mobilenetv2 efficientnet_b0 " in table2_run
    assert "run table3 --scale mini --models resnet50 mobilenetv2 " in table3_run
    assert reproduce.main(["--only", "table3", "--models", "efficientnet_b0", "--dry-run"]) == 0
    (report,) = capsys.readouterr().out.splitlines()
    assert "classification/tables.py report table3" in report


def test_jobs_reaches_every_experiment_that_runs_several(reproduce, capsys):
    assert reproduce.main(["--dry-run", "--jobs", "1"]) == 0
    runs = [line for line in capsys.readouterr().out.splitlines() if " report " not in line]
    assert [line.endswith("--jobs 1") for line in runs] == [True, True, True, True, False]  # fig10: one search
    with pytest.raises(SystemExit):
        reproduce.main(["--dry-run", "--jobs", "0"])
    assert "--jobs: must be >= 1, got 0" in capsys.readouterr().err


def test_one_command_runs_every_experiment_the_report_reads(reproduce, capsys):
    """``python tools/reproduce.py`` alone runs each experiment whose summary the report reads (Table 5 and
    Fig. 10 included), each writing that summary."""
    assert reproduce.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for name, summary in reproduce.SUMMARIES.items():  # the summary's path or its folder (--out)
        assert str(summary) in out or f"--out {summary.parent}" in out, name
    assert "gan/table5.py" in out and "search/compare.py" in out


def test_a_step_run_with_new_settings_keeps_the_earlier_entry_apart(reproduce, monkeypatch, tmp_path):
    """A classification step's log entry records the MiniScale it ran with; an entry of other settings (or of
    none, the tool before 2026-11-25) moves to "earlier settings" and the report names it as the earlier setting's."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    old = {"commands": ["python -m classification.tables run table2"], "wall_seconds": 10.0, "cpu_seconds": 20.0}
    write(tmp_path, reproduce.STEPS_FILE, {"table2": old})
    step = reproduce.Step("table2", ((sys.executable, "-c", "pass"),), tmp_path / "none.json", {"epochs": 15.0})
    reproduce.run_step(step)
    log = reproduce.read_steps_log()
    assert log[reproduce.EARLIER] == {"table2": [old]} and log["table2"]["setting"] == {"epochs": 15.0}
    assert reproduce.current_entry(log, step) is log["table2"] and reproduce.earlier_entries(log, step) == [old]
    assert reproduce.current_entry({"table2": old}, step) is None


def test_earlier_invocations_of_this_grid_stay_in_a_sections_record(reproduce, monkeypatch, tmp_path):
    """When a setting of the grid changes (Table 2's table2_on_workers, 2026-11-30), the cells it did not touch are
    still read, so the commands that made them stay in the section: an earlier entry that recorded a setting is
    listed; one without (the digits grid before 2026-11-25) is not. Table 3's entry does not record the Table 2
    field, so that change left it current."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    write(tmp_path, reproduce.STEPS["table2"].summary, table2_summary(reproduce, SEPARATED_TABLE2))
    step = reproduce.STEPS["table2"]
    digits = {"commands": ["python -m classification.tables run table2"], "wall_seconds": 10.0, "cpu_seconds": 20.0}
    grid = {"commands": ["python classification/tables.py run table2 --models mobilenetv2"], "wall_seconds": 3600.0,
            "cpu_seconds": 7200.0, "cpu_measured": True, "setting": {**step.setting, "table2_on_workers": []}}
    now = {"commands": ["python classification/tables.py run table2 --models resnet50"], "wall_seconds": 60.0,
           "cpu_seconds": 120.0, "cpu_measured": True, "setting": step.setting}
    write(tmp_path, reproduce.STEPS_FILE, {"table2": now, reproduce.EARLIER: {"table2": [digits, grid]}})
    assert reproduce.main(["--report-only"]) == 0
    text = (tmp_path / reproduce.REPORT).read_text()
    section = text[text.index("## Table 2"):text.index("## Table 3")]
    assert "Command: `python classification/tables.py run table2 --models resnet50`. CPU time: 2m00s" in section
    earlier = section[section.index("Earlier invocations of this step"):]
    assert "`python classification/tables.py run table2 --models mobilenetv2`. CPU time: 2h00m" in earlier
    assert "python -m classification.tables" not in section
    assert "table2_on_workers" not in reproduce.STEPS["table3"].setting
    assert reproduce.STEPS["table2"].setting["table2_on_workers"] == ["resnet50"]


def test_a_detection_grid_of_another_length_is_shown_apart_and_judges_nothing(reproduce, monkeypatch, tmp_path):
    """Table 4's summary of another length (``<images>_images/miniature.json`` beside the current one) is shown
    under its own heading with its numbers; the claims read only the current summary (here none: not measured)."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    cells = [{"setting": "batch8", "layer": layer, "label": label, "images_seen": 7200,
              "runs": [{"seed": s, "box_ap": ap + s, "mask_ap": ap} for s in range(3)]}
             for layer, label, ap in (("bn", "BN-ReLU", 38.0), ("no_norm_relu", "ReLU (no norm)", 41.0))]
    earlier = reproduce.STEPS["table4"].summary.parent / "7200_images" / "miniature.json"
    write(tmp_path, earlier, {"iterations": 900, "command": "python detection/miniature.py --iterations 900",
                              "cells": cells})
    assert reproduce.main(["--report-only"]) == 0
    report = (tmp_path / reproduce.REPORT).read_text()
    section = report[report.index("## Table 4"):report.index("## Table 5")]
    assert "**Not measured yet**" in section
    assert "### Earlier setting: 900 steps of 8 images (7200 images per run), not used for any verdict" in section
    assert "| batch8 | BN-ReLU | 42.1 / 37.8 | 39.0 ± 1.0 (n=3) | 38.0 ± 0.0 (n=3) |" in section
    assert "| batch8 | ReLU (no norm) (control) | - | 42.0 ± 1.0 (n=3) |" in section
    document = json.loads((tmp_path / reproduce.VERDICTS).read_text())
    assert {c["outcome"] for c in document["claims"] if c["table"] == "table4"} == {NOT_MEASURED}


def test_the_quotes_are_the_papers_words(reproduce):
    """Every claim's quote is in the paper's text, up to white space (the paper's folder, where it exists)."""
    texts = sorted(PAPER.glob("*.txt"))
    if not texts:
        pytest.skip(f"the paper's text is not at {PAPER}")
    paper = " ".join(" ".join(path.read_text(encoding="utf-8").split()) for path in texts)
    missing = [c.id for c in reproduce.load_claims() if " ".join(c.quote.split()) not in paper]
    assert not missing


def test_a_terminated_step_records_its_time(reproduce, monkeypatch, tmp_path):
    """SIGTERM (a batch system's stop, `kill`) ends a step as Ctrl-C does (run_command stops the command's
    process group): one line says that rerunning resumes, and the time spent is in the steps log."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    step = reproduce.Step("sleep", ((sys.executable, "-c", "import time\ntime.sleep(30)"),), tmp_path / "none.json")
    handler = signal.getsignal(signal.SIGTERM)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    with pytest.raises(SystemExit, match=r"sleep: interrupted; finished runs are kept, so rerunning resumes"):
        reproduce.run_step(step)
    assert time.monotonic() - started < 20 and reproduce.read_steps_log()["sleep"]["wall_seconds"] >= 0.9
    assert signal.getsignal(signal.SIGTERM) is handler  # the step's handler is gone with it


def test_a_step_records_the_cpu_time_its_processes_used(reproduce, monkeypatch, tmp_path):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    burn = (sys.executable, "-c", "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass")
    write(tmp_path, reproduce.STEPS_FILE, {"old": {"commands": [], "wall_seconds": 10.0, "cpu_seconds": 20.0}})
    reproduce.run_step(reproduce.Step("burn", (burn,), tmp_path / "none.json"))  # "old": estimated by the old tool
    log = reproduce.read_steps_log()
    assert log["burn"]["cpu_measured"] and 0.25 <= log["burn"]["cpu_seconds"] <= 5
    text = "\n".join(reproduce.provenance(log["old"], reproduce.STEPS["table2"].summary, "cmd"))
    assert "recorded before CPU time was measured" in text


def test_a_failed_invocation_still_counts_its_cpu_time_and_a_resume_adds_to_it(reproduce, monkeypatch, tmp_path):
    """A grid that stops part-way (a failed or interrupted command) has spent CPU time; rerunning resumes it, so
    the step's entry sums both invocations instead of keeping only the one that finished."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    failing = reproduce.Step("grid", ((sys.executable, "-c", burn + "raise SystemExit(3)"),), tmp_path / "none.json")
    with pytest.raises(SystemExit, match="exited with status 3"):
        reproduce.run_step(failing)
    first = reproduce.read_steps_log()["grid"]["cpu_seconds"]
    assert 0.25 <= first <= 5
    reproduce.run_step(reproduce.Step("grid", ((sys.executable, "-c", burn),), tmp_path / "none.json"))
    log = reproduce.read_steps_log()
    assert 0.5 <= log["grid"]["cpu_seconds"] <= 10 and log["grid"]["cpu_seconds"] >= first + 0.25
    text = "\n".join(reproduce.provenance(log["grid"], reproduce.STEPS["table2"].summary, "cmd"))
    assert "over the invocations of this tool that ran it" in text and "killed outright" in text


def test_a_step_keeps_the_entries_another_invocation_wrote_meanwhile(reproduce, monkeypatch, tmp_path):
    """Two invocations side by side (``--only table2`` and ``--only table4``) share the steps log: the one
    that finishes last must add its entry to the log as it is then, not to the copy it read when it started."""
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    other = {"commands": ["python detection/miniature.py"], "wall_seconds": 5.0, "cpu_seconds": 5.0,
             "cpu_measured": True, "setting": None}
    (tmp_path / reproduce.STEPS_FILE).parent.mkdir(parents=True)
    finishes_meanwhile = f"import json\njson.dump({{'table4': {other!r}}}, open({str(tmp_path / reproduce.STEPS_FILE)!r}, 'w'))"
    reproduce.run_step(reproduce.Step("table2", ((sys.executable, "-c", finishes_meanwhile),), tmp_path / "none.json"))
    log = reproduce.read_steps_log()
    assert log["table4"] == other and log["table2"]["wall_seconds"] > 0


def test_fig10_row_shows_how_many_layers_each_seed_accepted(reproduce):
    """A top-10 mean over two layers must not read as one over ten: the count and best sit beside it."""
    result = {"seeds": [0, 1, 2], "top10_final": [0.90, None, 0.80], "distinct_accepted": [12, 0, 2],
              "best_final": [0.96, None, 0.95]}
    strategy, seeds, top10, distinct, best = reproduce.fig10_row("random", result)
    assert (strategy, seeds, distinct) == ("random", 3, "12 / 0 / 2")
    assert top10 == "85.0 ± 7.1 (n=2)"  # the seed that accepted nothing has no top-10 mean
    assert best == "95.5 ± 0.7 (n=2)"


@pytest.mark.parametrize("text, says", [("[]", "is not a JSON object"), ('{"table2": ', "is not valid JSON")])
def test_a_damaged_steps_log_is_one_error_line(reproduce, monkeypatch, tmp_path, text, says):
    monkeypatch.setattr(reproduce, "ROOT", tmp_path)
    (tmp_path / reproduce.STEPS_FILE).parent.mkdir(parents=True)
    (tmp_path / reproduce.STEPS_FILE).write_text(text)
    with pytest.raises(SystemExit) as stop:
        reproduce.main(["--report-only"])
    assert str(stop.value.code).startswith(f"error: step log '{tmp_path / reproduce.STEPS_FILE}'")
    assert says in str(stop.value.code)


def test_fig10_says_its_proxy_and_whether_the_step_made_it(reproduce):
    """The proxy the searches trained on and BN-ReLU's accuracy there sit beside Fig. 10's numbers; a result of
    another candidate budget than the step's is marked as not the step's result."""
    made_by_step = {"candidate_budget": reproduce.FIG10_CANDIDATES, "proxies": ["data: MNIST"],
                    "bn_relu_reference": [0.90, 0.92, 0.91]}
    assert reproduce.fig10_provenance(made_by_step) == [
        "Proxy: data: MNIST. BN-ReLU on the same proxy: 91.0 ± 1.0 (n=3).", ""]
    earlier = {"candidate_budget": 800, "bn_relu_reference": [0.95]}
    text = reproduce.fig10_provenance(earlier)[0]
    assert text.startswith("Proxy: not recorded in this JSON") and "BN-ReLU on the same proxy: 95.0 (n=1)." in text
    assert text.endswith(f"runs {reproduce.FIG10_CANDIDATES:,} candidates a search; this JSON holds 800 a search, "
                         "from the command below.")


def test_a_classification_table_says_what_trained_its_runs(reproduce):
    """Cells summarized with their devices count per device; a cell summarized before the device was
    recorded counts its runs as "not recorded"."""
    summary = {"cells": [{"devices": {"NVIDIA H100 80GB HBM3": 5}, "final_top1": [98.0] * 5},
                         {"devices": {"NVIDIA H100 80GB HBM3": 3, "cpu": 2}, "final_top1": [98.0] * 5},
                         {"final_top1": [97.0, float("nan")]}]}
    assert reproduce.trained_on(summary) == "Trained on: NVIDIA H100 80GB HBM3 (8 runs), cpu (2 runs), not recorded (2 runs)."
