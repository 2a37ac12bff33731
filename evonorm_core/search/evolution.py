"""Which genome to evaluate next: regularized evolution with multi-objective tournaments
(paper section 4.3, Appendix C) or random search (the baseline of the paper's Fig. 10).

Evolution keeps a sliding window of the most recent trained candidates (paper: 2500).
Following section 4.4, candidates rejected by the quality test are discarded: only the
accepted ones join the population. With ``admit_quality_rejected`` (a choice of the small
CPU preset, see ``search/presets.py``) the quality-rejected ones join too, with the
accuracies they reached (anchors not trained count as 0). A layer already in the window
(:func:`~.equivalence.same_layer`: the same function at initialization, within a stated
tolerance) is not added again, so repeats cannot crowd out the rest. Each step draws a tournament of a random fraction of the window (paper: 5%); the
winner is drawn uniformly from the tournament's Pareto frontier over the K anchors'
accuracies (``selection="pareto"``) or is the best mean accuracy (``"average"``); it is
mutated twice, and the offspring is replaced by a fresh random graph with probability 0.5.
Until the population holds ``initial_population`` members, every proposal is random. With
``population_from_references`` (not in the paper) the search driver also lets the reference
layers it measures first join the population: a search that starts from known layers.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from itertools import zip_longest
from typing import Sequence

import torch

from ..experiment.config import option, validate
from .equivalence import initial_response, same_layer
from .genome import DEFAULT_MAX_NODES, Genome, mutate, random_genome
from .primitives import MODES

STRATEGIES = ("evolution", "random")
SELECTIONS = ("pareto", "average")


@dataclass(frozen=True)
class EvolutionConfig:
    """Search-space and evolution settings; defaults are the paper's (section 4, Appendix C)."""

    mode: str = option("B", "B: every op of Table 1; S: no batch-dependent op (the EvoNorm-S search)", choices=MODES)
    strategy: str = option("evolution", "evolution, or random search with the same rejection (Fig. 10's baseline)",
                           choices=STRATEGIES)
    selection: str = option("pareto", "tournament winner: a random member of its Pareto frontier over the anchors' "
                            "accuracies (paper), or the best mean accuracy", choices=SELECTIONS)
    max_nodes: int = option(DEFAULT_MAX_NODES, "intermediate nodes per graph (paper: 10)", min=1)
    window: int = option(2500, "sliding window: the most recent N trained candidates form the population (paper: 2500)",
                         min=1)
    tournament_fraction: float = option(0.05, "tournament size as a fraction of the population, at least 2 "
                                        "(paper: 0.05)", min=0, max=1, min_open=True)
    initial_population: int = option(25, "random candidates in the population before tournaments start", min=1)
    mutations: int = option(2, "mutations applied to each tournament winner (paper: 2)", min=1)
    random_offspring_probability: float = option(
        0.5, "chance an offspring is replaced by a completely new random graph (paper: 0.5)", min=0, max=1)
    admit_quality_rejected: bool = option(
        False, "let candidates rejected by the quality test join the population with the accuracies they reached "
        "(paper: no, section 4.4 discards them)")
    population_from_references: bool = option(
        False, "the reference layers the run measures first join the population (when they pass the rejection "
        "stages), so the search starts from them and explores around them (paper: no, its population starts "
        "from random graphs)")

    def __post_init__(self) -> None:
        validate(self)

    def tournament_size(self, population: int) -> int:
        """``tournament_fraction`` of ``population``, rounded, at least 2 (at most ``population``)."""
        return min(population, max(2, round(self.tournament_fraction * population)))


@dataclass
class Member:
    """A candidate in the population: its accuracies in anchor order (a prefix when the
    quality test stopped early; missing anchors count as 0) and its layer's
    :func:`~.equivalence.initial_response` (computed from the genome when not given)."""

    candidate_id: int
    genome: Genome
    accuracies: tuple[float, ...]
    response: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.response is None:
            self.response = initial_response(self.genome)


def pareto_frontier(members: Sequence[Member]) -> list[Member]:
    """The members no other member dominates (>= on every accuracy, > on one)."""

    def dominates(a: Member, b: Member) -> bool:
        pairs = list(zip_longest(a.accuracies, b.accuracies, fillvalue=0.0))
        return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)

    return [m for m in members if not any(dominates(other, m) for other in members)]


class Proposer:
    """Proposes genomes and keeps the population window; all randomness from ``rng``."""

    def __init__(self, config: EvolutionConfig, rng: random.Random) -> None:
        self.config, self.rng = config, rng
        self.population: deque[Member] = deque(maxlen=config.window)

    def add(self, member: Member) -> bool:
        """Append a trained candidate unless its layer is already in the window; the
        oldest leaves once the window is full. True if it was added."""
        if any(same_layer(member.response, m.response) for m in self.population):
            return False
        self.population.append(member)
        return True

    def random(self) -> Genome:
        return random_genome(self.rng, self.config.mode, self.config.max_nodes)

    def select(self) -> Member:
        """The winner of a tournament over a random subset of the population."""
        size = self.config.tournament_size(len(self.population))
        tournament = self.rng.sample(list(self.population), size)
        if self.config.selection == "average":
            return max(tournament, key=lambda m: sum(m.accuracies))  # missing anchors count as 0
        return self.rng.choice(pareto_frontier(tournament))

    def propose(self) -> tuple[Genome, str, int | None]:
        """``(genome, origin, parent id)``; origin is ``"random"`` or ``"mutation"``."""
        if self.config.strategy == "random" or len(self.population) < self.config.initial_population:
            return self.random(), "random", None
        parent = self.select()
        child = parent.genome
        for _ in range(self.config.mutations):
            child = mutate(child, self.rng, self.config.mode)
        if self.rng.random() < self.config.random_offspring_probability:
            return self.random(), "random", None
        return child, "mutation", parent.candidate_id
