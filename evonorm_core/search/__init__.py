"""Layer search engine (paper sections 3-4): genomes over Table 1's primitives, their
expressions, the :class:`GraphLayer` that evaluates them, mutation, the
functional-equivalence cache, rejection tests and regularized multi-objective evolution.
Depends only on torch; the proxy task and the command line live in ``search/``.

    >>> from evonorm_core.search import parse, GraphLayer, to_latex
    >>> genome = parse("x * sigmoid(v1 * x) / group_std(x)")   # EvoNorm-S0
    >>> layer = GraphLayer(genome, 64)
"""
from .driver import LayerSearch, StopCondition, read_checkpoint
from .equivalence import EquivalenceCache, fingerprint
from .evolution import EvolutionConfig, Member, Proposer, pareto_frontier
from .expression import parse, to_infix, to_latex
from .genome import DEFAULT_MAX_NODES, INITIAL_NODES, Genome, Node, check_mode, mutate, random_genome
from .layer import ChannelAffine2d, GraphLayer, genome_norm_act
from .primitives import MODES, PRIMITIVES, ops_for_mode
from .rejection import static_rejection, worst_case_gradient_norm
from .results import STAGES, CandidateRecord, CandidateResult, Stage

__all__ = [
    "CandidateRecord", "CandidateResult", "ChannelAffine2d", "DEFAULT_MAX_NODES", "EquivalenceCache", "EvolutionConfig", "Genome", "GraphLayer",
    "INITIAL_NODES", "LayerSearch", "MODES", "Member", "Node", "PRIMITIVES", "Proposer", "STAGES", "Stage", "StopCondition",
    "check_mode", "fingerprint", "genome_norm_act", "mutate", "ops_for_mode", "parse", "pareto_frontier",
    "random_genome", "read_checkpoint", "static_rejection", "to_infix", "to_latex", "worst_case_gradient_norm",
]
