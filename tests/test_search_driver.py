"""The search loop: equivalence-cache hits, checkpoint/resume, crashes and time-outs, selection."""
import json
import os
import random
import signal
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evonorm_core.search import (
    CandidateResult,
    EquivalenceCache,
    EvolutionConfig,
    Genome,
    LayerSearch,
    Member,
    Stage,
    StopCondition,
    fingerprint,
    genome_norm_act,
    pareto_frontier,
    parse,
    read_checkpoint,
)
from evonorm_core.search.evolution import Proposer
from evonorm_suite.search.backends import ProcessPoolExecutor, SequentialExecutor
from tests.search_helpers import distinct_response


class TinyEvaluator:
    """A real (small) proxy: a 2-conv net with the candidate layer, 5 steps on random data
    that a working layer can fit; accuracy on the same data."""

    def __call__(self, genome_dict: dict) -> CandidateResult:
        torch.manual_seed(0)
        make = genome_norm_act(Genome.from_dict(genome_dict), groups=2)
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), make(4, True), nn.Conv2d(4, 4, 3, padding=1),
                              make(4, True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
        x, y = torch.randn(24, 3, 6, 6), torch.arange(24) % 3
        x[:, 0] += y.view(-1, 1, 1) * 2.0
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(5):
            loss = F.cross_entropy(model(x), y)
            if not torch.isfinite(loss):
                return CandidateResult.reject(Stage.QUALITY, "non-finite loss")
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            acc = (model.eval()(x).argmax(1) == y).float().mean().item()
        return CandidateResult.accept({"a": acc, "b": 1 - abs(acc - 0.5)})


class Crashing:
    def __call__(self, genome_dict: dict) -> CandidateResult:
        if "exp" in json.dumps(genome_dict):
            raise RuntimeError("boom")
        if "tanh" in json.dumps(genome_dict):
            time.sleep(30)
        return CandidateResult.accept({"a": 0.5})


class KillsItsWorker:
    """``exp`` takes its worker process down (as the kernel's OOM killer would); the others sleep a little, so
    that they are on the pool when it dies."""

    def __call__(self, genome_dict: dict) -> CandidateResult:
        if "exp" in json.dumps(genome_dict):
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.5)
        return CandidateResult.accept({"a": 0.5})


def small_config(**overrides):
    return EvolutionConfig(**{"mode": "S", "max_nodes": 3, "initial_population": 2, "window": 10, **overrides})


def comparable(records):
    return [{k: v for k, v in r.to_dict().items() if k not in ("wall_time", "elapsed", "timings")} for r in records]


def test_equivalent_graphs_share_a_fingerprint_and_others_do_not():
    same = [("tanh(x * v1)", "tanh(v1 * x)"), ("sigmoid(max(x, x))", "sigmoid(abs(x) * 0 + x)"),
            ("-(-group_std(x))", "group_std(x)"), ("x * sigmoid(v1 * x) / group_std(x)", "sigmoid(x * v1) * x / group_std(x)")]
    for a, b in same:
        assert fingerprint(parse(a)) == fingerprint(parse(b)), (a, b)
    different = ["tanh(x)", "tanh(x * v1)", "tanh(x + v0)", "x * sigmoid(x)", "instance_std(x)", "group_std(x)",
                 "batch_std(x)", "x / batch_std(x)"]
    assert len({fingerprint(parse(e)) for e in different}) == len(different)
    cache = EquivalenceCache()
    cache.store(fingerprint(parse("tanh(x * v1)")), {"status": "accepted"})
    assert cache.lookup(fingerprint(parse("tanh(v1 * x)"))) == {"status": "accepted"} and cache.hits == 1


def test_search_reuses_evaluations_of_equivalent_graphs(tmp_path):
    search = LayerSearch(small_config(strategy="random", max_nodes=1), SequentialExecutor(TinyEvaluator()),
                         str(tmp_path), seed=0)
    records = search.run(StopCondition(max_candidates=40))
    hits = [r for r in records if r.cache_hit]
    assert hits and search.cache.hits == len(hits)
    trained = {r.fingerprint: r for r in records if r.trained}
    for hit in hits:
        assert (hit.status, hit.accuracies) == (trained[hit.fingerprint].status, trained[hit.fingerprint].accuracies)
    assert any(hit.genome != trained[hit.fingerprint].genome for hit in hits)  # e.g. x * v1 and v1 * x
    assert {r.stage for r in records if not r.accepted} <= {Stage.STATIC, Stage.QUALITY}


def test_resume_continues_exactly(tmp_path):
    config = small_config()
    whole = LayerSearch(config, SequentialExecutor(TinyEvaluator()), str(tmp_path / "whole"), seed=3)
    expected = whole.run(StopCondition(max_candidates=24))
    first = LayerSearch(config, SequentialExecutor(TinyEvaluator()), str(tmp_path / "split"), seed=3)
    first.run(StopCondition(max_candidates=10))
    resumed = LayerSearch.resume(SequentialExecutor(TinyEvaluator()), str(tmp_path / "split"))
    assert resumed.config == config and len(resumed.records) == 10
    got = resumed.run(StopCondition(max_candidates=24))
    assert comparable(got) == comparable(expected)
    assert any(r.origin == "mutation" for r in got)
    lines = (tmp_path / "split" / "candidates.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [r.candidate_id for r in got]
    assert read_checkpoint(str(tmp_path / "split"))["next_id"] == 24


def test_resume_drops_records_logged_after_the_checkpoint(tmp_path):
    """A kill between logging a record and checkpointing it (static rejections and cache
    hits are checkpointed lazily): the resumed run replays them identically."""
    config, out = small_config(), tmp_path / "run"
    expected = LayerSearch(config, SequentialExecutor(TinyEvaluator()), str(tmp_path / "whole"), seed=3).run(
        StopCondition(max_candidates=24))
    LayerSearch(config, SequentialExecutor(TinyEvaluator()), str(out), seed=3).run(StopCondition(max_candidates=10))
    checkpoint = (out / "checkpoint.json").read_text()
    LayerSearch.resume(SequentialExecutor(TinyEvaluator()), str(out)).run(StopCondition(max_candidates=16))
    (out / "checkpoint.json").write_text(checkpoint)  # the log now runs 6 records past the checkpoint
    assert len(read_checkpoint(str(out))["records"]) == 10
    got = LayerSearch.resume(SequentialExecutor(TinyEvaluator()), str(out)).run(StopCondition(max_candidates=24))
    assert comparable(got) == comparable(expected)
    assert len((out / "candidates.jsonl").read_text().splitlines()) == 24


def test_resume_evaluates_the_candidates_in_flight_at_the_checkpoint(tmp_path):
    """A run killed while candidates were training: the checkpoint lists them in flight, and the
    resumed run trains them under their own ids before proposing new ones."""
    out = tmp_path / "run"
    LayerSearch(small_config(), SequentialExecutor(TinyEvaluator()), str(out), seed=3).run(StopCondition(max_candidates=10))
    state = json.loads((out / "checkpoint.json").read_text())
    genome = parse("x * sigmoid(v1 * x) / group_std(x)")
    state["in_flight"] = [{"id": 10, "genome": genome.to_dict(), "origin": "mutation", "parent": None,
                           "fingerprint": fingerprint(genome)}]
    state["next_id"] = 11
    (out / "checkpoint.json").write_text(json.dumps(state))
    got = LayerSearch.resume(SequentialExecutor(TinyEvaluator()), str(out)).run(StopCondition(max_candidates=13))
    assert sorted(r.candidate_id for r in got) == list(range(13))
    resumed = next(r for r in got if r.candidate_id == 10)
    assert resumed.genome == genome.to_dict() and resumed.trained and resumed.origin == "mutation"


def test_crashes_and_timeouts_are_rejections(tmp_path):
    baselines = {"boom": parse("exp(x)"), "slow": parse("tanh(x)"), "fine": parse("sigmoid(x) * x")}
    for executor in (SequentialExecutor(Crashing(), time_limit=1.0), ProcessPoolExecutor(Crashing(), 2, time_limit=1.0)):
        search = LayerSearch(small_config(), executor, str(tmp_path / type(executor).__name__), baselines=baselines)
        search.run(StopCondition(max_candidates=0))
        executor.close()
        stages = {name: r.stage for name, r in search.baselines.items()}
        assert stages == {"boom": Stage.CRASH, "slow": Stage.TIMEOUT, "fine": None}, stages
        assert "boom" in search.baselines["boom"].reason


def test_a_dead_worker_is_charged_to_the_candidate_that_kills_it_alone(tmp_path):
    """The pool dies with three candidates on it; each runs again alone, and only the one that takes its worker
    down alone is a crash: the references beside it (bn_relu here) are trained, not recorded as crashed."""
    baselines = {"killer": parse("exp(x)"), "bn_relu": parse("sigmoid(x) * x"), "other": parse("x * v1")}
    executor = ProcessPoolExecutor(KillsItsWorker(), 3)
    search = LayerSearch(small_config(), executor, str(tmp_path / "run"), baselines=baselines)
    search.run(StopCondition(max_candidates=0))
    executor.close()
    assert {name: r.stage for name, r in search.baselines.items()} == {"killer": Stage.CRASH, "bn_relu": None,
                                                                        "other": None}
    assert search.baselines["killer"].reason == "the worker process died (it ran alone)"


def test_pareto_tournament_and_average_selection():
    members = [Member(0, parse("x * v1"), (0.9, 0.1)), Member(1, parse("x * v0"), (0.6, 0.6)),
               Member(2, parse("tanh(x)"), (0.4, 0.4)), Member(3, parse("exp(x)"), (0.1, 0.9))]
    assert [m.candidate_id for m in pareto_frontier(members)] == [0, 1, 3]
    proposer = Proposer(EvolutionConfig(selection="average", tournament_fraction=1.0), random.Random(0))
    for m in members:
        proposer.add(m)
    assert proposer.select().candidate_id == 1
    pareto = Proposer(EvolutionConfig(tournament_fraction=1.0), random.Random(0))
    for m in members:
        pareto.add(m)
    assert {pareto.select().candidate_id for _ in range(60)} == {0, 1, 3}


def test_sliding_window_keeps_the_most_recent():
    proposer = Proposer(EvolutionConfig(window=3), random.Random(0))
    for i in range(5):
        proposer.add(Member(i, parse("tanh(x)"), (0.5,), response=distinct_response(i)))
    assert [m.candidate_id for m in proposer.population] == [2, 3, 4]


def test_a_layer_already_in_the_window_is_not_added_again():
    """The same layer (the same function at initialization, within the stated tolerance) joins once:
    ``tanh(x * v1)`` starts as ``tanh(x)`` (v1 = 1), ``channel_rms(group_rms(0))`` is a constant of
    about 0.004; a batch mean or an instance statistic makes another layer."""
    proposer = Proposer(EvolutionConfig(window=10), random.Random(0))
    layers = ["tanh(x)", "tanh(max(x, x))", "tanh(x * v1)", "tanh(x + channel_rms(group_rms(0)))",
              "tanh(x + log(abs(v0)))", "tanh(x + batch_mean(-x))", "x / instance_std(x)", "tanh(x + v1)"]
    added = [proposer.add(Member(i, parse(e), (0.5,))) for i, e in enumerate(layers)]
    assert added == [True, False, False, False, False, True, True, True]
    assert [m.candidate_id for m in proposer.population] == [0, 5, 6, 7]


def test_missing_anchor_accuracies_count_as_zero():
    partial = Member(0, parse("tanh(x)"), (0.9,))  # rejected on the second anchor before the third ran
    full = Member(1, parse("x * v1"), (0.8, 0.3, 0.2))
    assert {m.candidate_id for m in pareto_frontier([partial, full])} == {0, 1}
    assert pareto_frontier([Member(0, parse("tanh(x)"), (0.5,)), Member(1, parse("x * v1"), (0.5, 0.1))])[0].candidate_id == 1


class QualityRejectsTanh(TinyEvaluator):
    def __call__(self, genome_dict: dict) -> CandidateResult:
        if "tanh" in json.dumps(genome_dict):
            return CandidateResult.reject(Stage.QUALITY, "low", {"a": 0.3})
        return super().__call__(genome_dict)


@pytest.mark.parametrize("admit", [True, False])
def test_quality_rejected_candidates_join_the_population_only_when_admitted(tmp_path, admit):
    search = LayerSearch(small_config(admit_quality_rejected=admit), SequentialExecutor(QualityRejectsTanh()), str(tmp_path))
    search.run(StopCondition(max_candidates=40))
    by_id = {r.candidate_id: r for r in search.records}
    members = [by_id[m.candidate_id] for m in search.proposer.population]
    rejected = [r for r in members if not r.accepted]
    assert all(r.stage is Stage.QUALITY and r.accuracies for r in rejected)
    assert bool(rejected) == admit
    assert len({r.fingerprint for r in members}) == len(members)


class StabilityRejectsTanh(QualityRejectsTanh):
    def __call__(self, genome_dict: dict) -> CandidateResult:
        if "sigmoid" in json.dumps(genome_dict):
            return CandidateResult.reject(Stage.STABILITY, "unstable", {"a": 0.9})
        return super().__call__(genome_dict)


def test_stability_rejections_stay_out_of_the_population_even_with_accuracies(tmp_path):
    """``admit_quality_rejected`` admits candidates rejected by the quality test only (they trained,
    just poorly); one rejected by the stability test is unstable whatever its accuracies, and
    never becomes a parent."""
    search = LayerSearch(small_config(admit_quality_rejected=True), SequentialExecutor(StabilityRejectsTanh()),
                         str(tmp_path))
    search.run(StopCondition(max_candidates=40))
    by_id = {r.candidate_id: r for r in search.records}
    assert any(r.stage is Stage.STABILITY for r in search.records)  # the case arose
    members = [by_id[m.candidate_id] for m in search.proposer.population]
    assert not any(r.stage is Stage.STABILITY for r in members)


def test_bad_configuration_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="--strategy must be one of evolution, random, got 'greedy'"):
        EvolutionConfig(strategy="greedy")
    with pytest.raises(ValueError, match="--mode must be one of B, S, got 'X'"):
        EvolutionConfig(mode="X")
    with pytest.raises(FileNotFoundError, match="no search checkpoint"):
        LayerSearch.resume(SequentialExecutor(TinyEvaluator()), str(tmp_path))


def test_tournament_is_the_configured_fraction_of_the_window_only():
    """Each tournament samples ``tournament_fraction`` of the population (paper: 5%) from the window of
    the most recent members only. With 150 members added to a window of 100 and the oldest the most
    accurate, the "average" winner is the oldest of 5 distinct ids out of 50..149: never outside 50..145,
    and on average 50 + E[min of 5 of 0..99 without replacement] = 50 + 101 / 6 - 1 (closed form)."""
    proposer = Proposer(EvolutionConfig(selection="average", window=100, tournament_fraction=0.05),
                        random.Random(0))
    for i in range(150):
        proposer.add(Member(i, parse("tanh(x)"), (float(150 - i),), response=distinct_response(i)))
    winners = [proposer.select().candidate_id for _ in range(3000)]
    assert min(winners) >= 50 and max(winners) <= 145
    assert sum(winners) / len(winners) == pytest.approx(50 + 101 / 6 - 1, abs=1.0)


def test_stop_conditions_are_inclusive_limits():
    """Stop once ``max_candidates`` are proposed or ``time_budget`` seconds have passed (either may be unset)."""
    assert not StopCondition().reached(10 ** 6, 1e9)
    stop = StopCondition(max_candidates=5, time_budget=60.0)
    assert [stop.reached(n, 0.0) for n in (4, 5, 6)] == [False, True, True]
    assert [stop.reached(0, t) for t in (59.9, 60.0)] == [False, True]
    assert StopCondition(time_budget=60.0).reached(10 ** 6, 1.0) is False
    assert StopCondition(max_candidates=5).reached(0, 1e9) is False


class Recording:
    """An executor of capacity ``capacity`` around ``evaluator``: logs submissions and evaluator calls, and
    finishes the most recently submitted candidate first (so several are in flight at once)."""

    def __init__(self, evaluator, capacity=1):
        self.evaluator, self.capacity = evaluator, capacity
        self.submitted, self.pending = [], []

    def submit(self, candidate_id, genome):
        self.submitted.append(candidate_id)
        self.pending.append((candidate_id, genome))

    def wait(self):
        candidate_id, genome = self.pending.pop()
        return [(candidate_id, self.evaluator(genome))]

    def close(self):
        pass


def test_reference_layers_are_evaluated_first_apart_from_the_candidates(tmp_path):
    """Reference layers go to the executor before any candidate, under ids -1, -2, ... in name order; they are
    not in the log nor the population, do not use candidate ids, and a resumed run does not train them again."""
    baselines = {"gn_relu": parse("max(v1 * ((x - group_mean(x)) / group_std(x)) + v0, 0)"),
                 "evonorm_s0": parse("x * sigmoid(v1 * x) / group_std(x)")}
    executor = Recording(TinyEvaluator())
    search = LayerSearch(small_config(), executor, str(tmp_path), seed=1, baselines=baselines)
    records = search.run(StopCondition(max_candidates=4))
    assert set(executor.submitted[:2]) == {-1, -2} and all(i >= 0 for i in executor.submitted[2:])
    assert {name: r.candidate_id for name, r in search.baselines.items()} == {"evonorm_s0": -1, "gn_relu": -2}
    assert {name: r.origin for name, r in search.baselines.items()} == {n: f"baseline:{n}" for n in baselines}
    assert all(r.accepted for r in search.baselines.values())
    assert [r.candidate_id for r in records] == [0, 1, 2, 3] and search.todo_baselines == {}
    assert all(m.candidate_id >= 0 for m in search.proposer.population)
    lines = (tmp_path / "candidates.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [0, 1, 2, 3]
    again = Recording(TinyEvaluator())
    resumed = LayerSearch.resume(again, str(tmp_path))
    resumed.run(StopCondition(max_candidates=12))
    assert again.submitted and all(i >= 4 for i in again.submitted)
    assert set(resumed.baselines) == set(baselines)


def test_population_from_references_starts_the_population_with_the_accepted_references(tmp_path):
    """With ``population_from_references`` the accepted reference layers join the population before any
    candidate (a rejected one does not), tournaments can pick them as parents, and a resumed run keeps them."""
    baselines = {"evonorm_s0": parse("x * sigmoid(v1 * x) / group_std(x)"), "boom": parse("exp(x)"),
                 "s2": parse("x * sigmoid(x) / group_rms(x)")}

    class CrashOnExp(TinyEvaluator):
        def __call__(self, genome_dict):
            return Crashing()(genome_dict) if "exp" in json.dumps(genome_dict) else super().__call__(genome_dict)

    config = small_config(population_from_references=True, random_offspring_probability=0.0, window=50)
    search = LayerSearch(config, SequentialExecutor(CrashOnExp()), str(tmp_path), seed=0, baselines=baselines)
    search.run(StopCondition(max_candidates=0))
    assert search.baselines["boom"].stage is Stage.CRASH
    references = {search.baselines[n].candidate_id for n in ("evonorm_s0", "s2")}
    assert [m.candidate_id for m in search.proposer.population] == sorted(references, reverse=True)
    resumed = LayerSearch.resume(SequentialExecutor(CrashOnExp()), str(tmp_path))
    assert [m.candidate_id for m in resumed.proposer.population] == sorted(references, reverse=True)
    records = resumed.run(StopCondition(max_candidates=6))
    assert {r.parent for r in records if r.origin == "mutation"} & references
    plain = LayerSearch(small_config(), SequentialExecutor(CrashOnExp()), str(tmp_path / "plain"), baselines=baselines)
    plain.run(StopCondition(max_candidates=0))
    assert not plain.proposer.population


class Counting(TinyEvaluator):
    def __init__(self):
        self.calls = 0

    def __call__(self, genome_dict):
        self.calls += 1
        return super().__call__(genome_dict)


def test_cache_hits_are_counted_and_never_retrained(tmp_path):
    """Each candidate costs one training unless it failed the static checks or an equivalent one was trained;
    a cache hit reuses the result (without its timings) and is counted once."""
    evaluator = Counting()
    search = LayerSearch(small_config(strategy="random", max_nodes=1), SequentialExecutor(evaluator), str(tmp_path))
    records = search.run(StopCondition(max_candidates=40))
    hits = [r for r in records if r.cache_hit]
    static = [r for r in records if r.stage is Stage.STATIC]
    assert hits and static
    assert evaluator.calls == len(records) - len(hits) - len(static) == sum(r.trained for r in records)
    assert search.cache.hits == len(hits) and read_checkpoint(str(tmp_path))["cache"]["hits"] == len(hits)
    assert all(r.result.timings == {} for r in hits)
    assert len(search.cache.entries) == evaluator.calls  # one entry per distinct function trained


class AlwaysCrashing:
    calls = 0

    def __call__(self, genome_dict):
        AlwaysCrashing.calls += 1
        raise RuntimeError("out of memory")


def test_crashed_candidates_are_not_cached(tmp_path):
    """A crash (or time-out) says nothing about the layer: an equivalent candidate is trained again."""
    AlwaysCrashing.calls = 0
    search = LayerSearch(small_config(strategy="random", max_nodes=1), SequentialExecutor(AlwaysCrashing()),
                         str(tmp_path))
    records = search.run(StopCondition(max_candidates=40))
    crashed = [r for r in records if r.stage is Stage.CRASH]
    assert len({r.fingerprint for r in crashed}) < len(crashed)  # equivalent candidates came up again
    assert not any(r.cache_hit for r in records) and search.cache.hits == 0 and not search.cache.entries
    assert AlwaysCrashing.calls == len(crashed) and not search.proposer.population


def test_checkpoint_lists_the_candidates_still_in_flight(tmp_path):
    """With 3 candidates training at once, the checkpoint written when one finishes lists the other two (by id,
    ascending, with their genomes), and ``next_id`` is past every id handed out."""
    snapshots = []

    def on_record(search, record):
        snapshots.append((record.candidate_id, json.loads((tmp_path / "checkpoint.json").read_text())))

    executor = Recording(TinyEvaluator(), capacity=3)
    search = LayerSearch(small_config(strategy="random"), executor, str(tmp_path), seed=2, on_record=on_record)
    search.run(StopCondition(max_candidates=30))
    by_id = {r.candidate_id: r for r in search.records}
    trained = [(cid, state) for cid, state in snapshots if by_id[cid].trained]
    assert trained
    for cid, state in trained:
        in_flight = [p["id"] for p in state["in_flight"]]
        assert cid not in in_flight and in_flight == sorted(in_flight)
        assert all(i < state["next_id"] for i in in_flight) and state["logged"] == 1 + [
            r.candidate_id for r in search.records].index(cid)
        assert all(Genome.from_dict(p["genome"]).to_dict() == by_id[p["id"]].genome for p in state["in_flight"])
    assert max(len(state["in_flight"]) for _, state in trained) == 2
    assert read_checkpoint(str(tmp_path))["in_flight"] == []


def test_the_time_budget_counts_the_time_before_a_resume(tmp_path):
    """The time budget is for the whole run: a run checkpointed after 500 s of a 400 s budget proposes nothing
    more when resumed, and the elapsed time carries on from 500 s."""
    LayerSearch(small_config(), SequentialExecutor(TinyEvaluator()), str(tmp_path), seed=3).run(
        StopCondition(max_candidates=5))
    path = tmp_path / "checkpoint.json"
    state = json.loads(path.read_text())
    state["elapsed"] = 500.0
    path.write_text(json.dumps(state))
    resumed = LayerSearch.resume(SequentialExecutor(TinyEvaluator()), str(tmp_path))
    assert len(resumed.run(StopCondition(max_candidates=50, time_budget=400.0))) == 5
    assert 500.0 <= read_checkpoint(str(tmp_path))["elapsed"] < 560.0
    more = LayerSearch.resume(SequentialExecutor(TinyEvaluator()), str(tmp_path)).run(
        StopCondition(max_candidates=7, time_budget=600.0))
    assert len(more) == 7 and all(r.elapsed >= 500.0 for r in more[5:])


def test_average_selection_counts_missing_anchors_as_zero_and_the_winner_is_the_parent():
    """``selection="average"``: the best sum over the anchors (a prefix of 0.9 loses to 0.5 + 0.5; a mean over
    the measured anchors only would pick it); the offspring's parent is the tournament winner."""
    proposer = Proposer(EvolutionConfig(selection="average", tournament_fraction=1.0, initial_population=1,
                                        random_offspring_probability=0.0), random.Random(0))
    for m in [Member(4, parse("tanh(x)"), (0.9,)), Member(5, parse("x * v1"), (0.5, 0.5)),
              Member(6, parse("x * v0"), (0.45, 0.45))]:
        proposer.add(m)
    assert {proposer.select().candidate_id for _ in range(20)} == {5}
    assert {proposer.propose()[2] for _ in range(20)} == {5}


def test_executors_by_backend_and_workers_and_their_order():
    """``--workers 1`` trains in process, first submitted first; more workers use a process pool of that size;
    an evaluator's exception comes back as a crash naming it."""
    from evonorm_suite.search.backends import evaluate_safely, make_executor

    sequential = make_executor("local", lambda g: CandidateResult.accept({"a": g["v"]}), 1, None)
    assert isinstance(sequential, SequentialExecutor) and sequential.capacity == 1
    for i in (3, 1, 2):
        sequential.submit(i, {"v": i / 10})
    assert [sequential.wait() for _ in range(3)] == [[(i, CandidateResult.accept({"a": i / 10}))] for i in (3, 1, 2)]
    pool = make_executor("local", TinyEvaluator(), 2, 5.0)
    try:
        assert isinstance(pool, ProcessPoolExecutor) and (pool.capacity, pool.time_limit) == (2, 5.0)
    finally:
        pool.close()

    def broken(genome):
        raise ValueError("bad shape")

    result = evaluate_safely(broken, {}, None)
    assert result.stage is Stage.CRASH and result.reason.startswith("ValueError: bad shape after ")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        make_executor("local", broken, 0, None)
