"""Which genome to evaluate next: regularized evolution with multi-objective tournaments
(paper section 4.3, Appendix C) or random search (the baseline of the paper's Fig. 10).

Evolution keeps a sliding window of the most recent trained candidates (paper: 2500):
the accepted ones and, with ``admit_quality_rejected``, those the quality test rejected,
with the accuracies they reached (anchors not trained count as 0). The paper's Fig. 10
caption ("only valid samples survived the rejection phase are reported") implies rejected
samples live in its population; without them a search whose random graphs are almost all
rejected has nothing to select from. A function already in the window (same
equivalence-cache fingerprint) is not added again, so repeats cannot crowd out the rest.
Each step draws a tournament of a random fraction of the window (paper: 5%); the winner
is drawn uniformly from the tournament's Pareto frontier over the K anchors' accuracies
(``selection="pareto"``) or is the best mean accuracy (``"average"``); it is mutated
twice, and the offspring is replaced by a fresh random graph with probability 0.5.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from itertools import zip_longest
from typing import Sequence

from .genome import DEFAULT_MAX_NODES, Genome, mutate, random_genome
from .primitives import ops_for_mode

STRATEGIES = ("evolution", "random")
SELECTIONS = ("pareto", "average")


@dataclass
class EvolutionConfig:
    """Search-space and evolution settings; defaults are the paper's."""

    mode: str = "B"
    strategy: str = "evolution"
    selection: str = "pareto"
    max_nodes: int = DEFAULT_MAX_NODES
    window: int = 2500
    tournament_fraction: float = 0.05
    initial_population: int = 25
    mutations: int = 2
    random_offspring_probability: float = 0.5
    admit_quality_rejected: bool = True

    def __post_init__(self) -> None:
        ops_for_mode(self.mode)
        for name, value, accepted in (("strategy", self.strategy, STRATEGIES), ("selection", self.selection, SELECTIONS)):
            if value not in accepted:
                raise ValueError(f"unknown {name} {value!r}; accepted: {list(accepted)}")
        for name in ("max_nodes", "window", "initial_population", "mutations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("tournament_fraction", "random_offspring_probability"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")


@dataclass
class Member:
    """A candidate in the population: its accuracies in anchor order (a prefix when the
    quality test stopped early; missing anchors count as 0) and its function's fingerprint."""

    candidate_id: int
    genome: Genome
    accuracies: tuple[float, ...]
    fingerprint: str | None = None


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
        """Append a trained candidate unless its function is already in the window; the
        oldest leaves once the window is full. True if it was added."""
        if member.fingerprint is not None and any(m.fingerprint == member.fingerprint for m in self.population):
            return False
        self.population.append(member)
        return True

    def random(self) -> Genome:
        return random_genome(self.rng, self.config.mode, self.config.max_nodes)

    def select(self) -> Member:
        """The winner of a tournament over a random subset of the population."""
        size = min(len(self.population), max(2, round(self.config.tournament_fraction * len(self.population))))
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
