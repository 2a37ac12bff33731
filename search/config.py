"""The configuration of a search run: one frozen dataclass, presets as instances of it.

:class:`SearchConfig` holds the proxy task (:class:`evonorm_suite.search.proxy.ProxyConfig`), the
evolution (:class:`evonorm_core.search.evolution.EvolutionConfig`) and the run's own
settings (seed, reference layers, stop conditions, workers). ``search/evolve.py`` derives
its flags from these fields (:func:`evonorm_core.experiment.config.add_config_arguments`),
starts from a preset (:func:`evonorm_suite.search.presets.preset`) and applies only the flags given; the
resolved configuration is saved as ``config.json`` in the run's folder (a run of
:data:`RUN_KIND`), where ``--resume``, ``search/report.py`` and ``search/rerank.py`` read it
back. A resumed run may change only the options declared ``resumable`` (the stop conditions
and the workers); the proxy, the evolution, the seed and the references stay the run's own.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from evonorm_core.experiment.arguments import MAX_SEED
from evonorm_core.experiment.config import ConfigError, load_config, option, validate
from evonorm_core.experiment.rundir import CONFIG_FILE, RunKind
from evonorm_core.search.evolution import EvolutionConfig
from evonorm_core.search.expression import parse
from evonorm_core.search.genome import Genome
from evonorm_suite.search.proxy import ProxyConfig

RUN_KIND = RunKind("search/evolve.py")
BACKENDS = ("local", "ray")

REFERENCE_LAYERS = {
    "bn_relu": "max(v1 * ((x - batch_mean(x)) / batch_std(x)) + v0, 0)",
    "evonorm_b0": "x / max(batch_std(x), v1 * x + instance_std(x))",
    "evonorm_b1": "x / max(batch_std(x), (x + v1) * instance_rms(x))",
    "evonorm_b2": "x / max(batch_std(x), instance_rms(x) - x)",
    "gn_relu": "max(v1 * ((x - group_mean(x)) / group_std(x)) + v0, 0)",
    "evonorm_s0": "x * sigmoid(v1 * x) / group_std(x)",
    "evonorm_s1": "x * sigmoid(x) / group_std(x)",
    "evonorm_s2": "x * sigmoid(x) / group_rms(x)",
}
"""The paper's layers (Tables 2 and 3) and the baselines they replace, as genomes measured on
the same proxy. BN's and GN's own affine is ``v1``/``v0``; the trailing affine every searched
layer ends with starts as the identity. EvoNorm-B1's constant 1 is ``v1`` (initialized to 1:
the search space has no constant one)."""
CONTROL_LAYERS = {
    "no_norm_identity": "max(x, x)",
    "no_norm_relu": "max(x, 0)",
    "no_norm_tanh": "tanh(x)",
    "no_norm_swish": "x * sigmoid(x)",
    "random_rej": "tanh(max(x, tanh(x)))",
    "unstable_example": "tanh(x) - batch_mean(max(x, 0))",
}
"""Negative controls measured through the same pipeline: bare activations without any
normalization (the identity as ``max(x, x)``: a layer must apply an op), the paper's
"Random + rej" layer (Table 2, Appendix B) and its example of a layer that reaches
reasonable accuracy but whose gradients explode (section 4.4: the stability test must reject
it). A proxy that cannot set these apart from the reference layers cannot rank layers."""
CONTROL_MODES = {"B": tuple(CONTROL_LAYERS), "S": tuple(name for name in CONTROL_LAYERS if name != "unstable_example")}
"""The controls of each search mode (the unstable example uses a batch statistic: mode B only)."""
NAMED_LAYERS = {**REFERENCE_LAYERS, **CONTROL_LAYERS}
DEFAULT_REFERENCES = {
    "B": ("bn_relu", "evonorm_b0", "evonorm_b1", "evonorm_b2"),
    "S": ("gn_relu", "evonorm_s0", "evonorm_s1", "evonorm_s2"),
}
"""The reference layers measured first in each mode: BN-ReLU and the B series for the B
search (Table 2), GN-ReLU and the S series for the S search (Table 3)."""


def parse_duration(text: str) -> float:
    """Seconds from ``"900"``, ``"900s"``, ``"15m"`` or ``"1.5h"``."""
    units = {"s": 1, "m": 60, "h": 3600}
    stripped = text.strip()
    try:
        if stripped[-1:].lower() in units:
            return float(stripped[:-1]) * units[stripped[-1].lower()]
        return float(stripped)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 900, 15m or 1h)") from None


parse_duration.__name__ = "duration"


@dataclass(frozen=True)
class SearchConfig:
    """One search run: what it searches, how candidates are scored, when it stops."""

    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    preset: str = option("paper", "the preset this configuration started from", cli=False)
    seed: int = option(0, "seed of the search and of every candidate's training", min=0, max=MAX_SEED)
    references: tuple[str, ...] = option(
        DEFAULT_REFERENCES["B"], "reference layers measured first on the same proxy, paper layers or negative "
        "controls ('none': skip); default: the mode's (B: BN-ReLU and EvoNorm-B0/B1/B2, S: GN-ReLU and "
        "EvoNorm-S0/S1/S2)",
        choices=(*NAMED_LAYERS, "none"))
    max_candidates: int | None = option(None, "stop proposing after this many candidates (none: no limit)", min=0,
                                        resumable=True)
    time_budget: float | None = option(None, "stop proposing after this long, e.g. 900, 15m, 1h (none: no limit)",
                                       min=0, min_open=True, parse=parse_duration, resumable=True)
    time_limit: float | None = option(None, "per-candidate time limit; a candidate past it is rejected (stage "
                                      "timeout; none: no limit)", min=0, min_open=True, parse=parse_duration,
                                      resumable=True)
    workers: int = option(2, "candidates trained at once (processes or Ray tasks)", min=1, resumable=True)
    threads: int | None = option(None, "torch threads per worker (none: max(1, 2 // workers))", min=1, resumable=True)
    backend: str = option("local", "local: in-process (1 worker) or a process pool; ray: Ray tasks", choices=BACKENDS,
                          resumable=True)
    ray_address: str | None = option(None, "Ray cluster to join ('auto': the one running); none: start a Ray of "
                                     "this run's own", resumable=True)

    def __post_init__(self) -> None:
        validate(self)
        if "none" in self.references and len(self.references) > 1:
            raise ConfigError(f"--references: 'none' cannot be combined with layers, got {','.join(self.references)}")
        if self.ray_address is not None and self.backend != "ray":
            raise ConfigError(f"--ray-address {self.ray_address} joins a Ray cluster: it needs --backend ray, got "
                              f"--backend {self.backend}")

    @property
    def torch_threads(self) -> int:
        return self.threads or max(1, 2 // self.workers)

    def reference_genomes(self) -> dict[str, Genome]:
        return {name: parse(NAMED_LAYERS[name]) for name in self.references if name != "none"}


def read_run_config(output_dir: str | Path) -> SearchConfig:
    """The resolved configuration saved in a run's folder."""
    return load_config(Path(output_dir) / CONFIG_FILE, SearchConfig)
