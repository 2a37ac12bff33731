"""Property-based tests of moving averages against a float64 replay written here.

Every layer with batch statistics (BN-* with each activation, EvoNorm-B0/B1/B2 fused and composed,
"RS + rej", and searched layers whose batch aggregations read ``x`` or a function of it) runs a
random sequence of training batches (sizes 0 to 4, empty batches and one value per channel
included, random maps), with eval-mode calls in between, at a random momentum or ``None``
(cumulative). The replay applies the rule of ``nn.BatchNorm2d`` by hand: per counted (non-empty)
batch, ``r <- (1 - f) r + f s`` with ``f`` the momentum or ``1 / batches counted``; a variance
stored unbiased (``* n / (n - 1)``, ``n`` values per channel, as it is when ``n = 1``); a
searched layer's mean square stored as ``mu(v^2)``. The buffers, the batch count and then the
eval-mode output (the float64 paper formula, or the genome evaluated node by node, with the
replayed averages) must agree.
"""
from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evonorm_core
from evonorm_core.search import GraphLayer, parse

from . import paper_reference as ref
from .property_strategies import output_of

LIBRARY_LAYERS = sorted(ref.BATCH_DEPENDENT)
# searched layers: expression -> {node: (statistic, what the node reads, as a function of x)}
SEARCHED_LAYERS = {
    "x / max(batch_std(x), v1 * x + instance_std(x))": {4: ("var", lambda x: x)},
    "max(v1 * ((x - batch_mean(x)) / batch_std(x)) + v0, 0)": {4: ("mean", lambda x: x), 7: ("var", lambda x: x)},
    "x / batch_rms(tanh(x))": {5: ("mean_square", torch.tanh)},
    "sigmoid(x) - batch_mean(square(x))": {6: ("mean", torch.square)},
    "tanh(x) / batch_std(abs(x)) + batch_rms(x)": {6: ("var", torch.abs), 8: ("mean_square", lambda x: x)},
}
KIND_INIT = {"mean": 0.0, "var": 1.0, "mean_square": 1.0}


@st.composite
def sequences(draw):
    channels = draw(st.integers(1, 5))
    batches = []
    for _ in range(draw(st.integers(1, 6))):
        shape = (draw(st.integers(0, 4)), channels, draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        batches.append((shape, draw(st.floats(0.1, 5.0)), draw(st.floats(-3.0, 3.0)), draw(st.booleans())))
    momentum = draw(st.one_of(st.none(), st.floats(0.01, 1.0), st.just(1.0)))
    return channels, batches, momentum, draw(st.integers(0, 2**16))


def make_batches(spec, seed):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=generator, dtype=torch.float64) * scale + shift, also_eval)
            for shape, scale, shift, also_eval in spec]


def replay(batches, channels, momentum, statistics):
    """Float64 moving averages by hand: ``statistics`` maps a buffer name to ``(kind, function of x)``;
    returns the averages and the number of batches counted."""
    running = {name: torch.full((channels,), KIND_INIT[kind], dtype=torch.float64)
               for name, (kind, _) in statistics.items()}
    counted = 0
    for x, _ in batches:
        if x.numel() == 0:
            continue
        counted += 1
        factor = momentum if momentum is not None else 1.0 / counted
        n = x.shape[0] * x.shape[2] * x.shape[3]
        for name, (kind, read) in statistics.items():
            v = read(x)
            mean = v.mean(dim=(0, 2, 3))
            if kind == "mean":
                value = mean
            elif kind == "var":
                value = (v - mean.view(1, -1, 1, 1)).square().mean(dim=(0, 2, 3))
                value = value * n / (n - 1) if n > 1 else value
            else:
                value = v.square().mean(dim=(0, 2, 3))
            running[name] = (1 - factor) * running[name] + factor * value
    return running, counted


def run(layer, batches):
    for x, also_eval in batches:
        layer.train()
        layer(x)
        if also_eval:  # an eval-mode call in between changes nothing
            layer.eval()
            layer(x)


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(case=sequences(), name=st.sampled_from(LIBRARY_LAYERS), impl=st.sampled_from(["fused", "reference"]))
def test_library_layers_moving_averages_are_the_replayed_rule(case, name, impl):
    channels, spec, momentum, seed = case
    options = {"impl": impl} if name.startswith("evonorm_") else {}
    layer = evonorm_core.build_norm_act(name, channels, momentum=momentum, **options).double()
    batches = make_batches(spec, seed)
    run(layer, batches)
    statistics = {"running_var": ("var", lambda x: x)}
    if hasattr(layer, "running_mean"):
        statistics["running_mean"] = ("mean", lambda x: x)
    expected, counted = replay(batches, channels, momentum, statistics)
    assert int(layer.num_batches_tracked) == counted
    for buffer, value in expected.items():
        torch.testing.assert_close(getattr(layer, buffer), value, rtol=1e-10, atol=1e-12)
    # eval mode reads them: the paper formula with the replayed averages
    layer.eval()
    x = torch.randn(2, channels, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
    p = {"gamma": layer.weight.detach(), "beta": layer.bias.detach(), **expected}
    for name_ in ("v0", "v1"):
        if hasattr(layer, name_):
            p[name_] = getattr(layer, name_).detach()
    if "running_mean" not in p:
        p["running_mean"] = torch.zeros(channels, dtype=torch.float64)  # unused by the formulas without a mean
    torch.testing.assert_close(layer(x), ref.reference(name, True)(x, p, layer.eps, training=False), rtol=1e-9,
                               atol=1e-9)


@SETTINGS
@given(case=sequences(), expression=st.sampled_from(sorted(SEARCHED_LAYERS)))
def test_searched_layers_moving_averages_are_the_replayed_rule(case, expression):
    channels, spec, momentum, seed = case
    genome = parse(expression)
    layer = GraphLayer(genome, channels, groups=1, momentum=momentum).double()
    batches = make_batches(spec, seed)
    run(layer, batches)
    nodes = SEARCHED_LAYERS[expression]
    assert {genome.node(i).op for i in nodes} <= {"batch_mean", "batch_std", "batch_rms"}  # the table is right
    statistics = {f"running_{kind}_{i}": (kind, read) for i, (kind, read) in nodes.items()}
    expected, counted = replay(batches, channels, momentum, statistics)
    assert int(layer.num_batches_tracked) == counted
    assert {n for n, _ in layer.named_buffers() if n.startswith("running_")} == set(expected)
    for buffer, value in expected.items():
        torch.testing.assert_close(getattr(layer, buffer), value, rtol=1e-10, atol=1e-12)
    layer.eval()
    x = torch.randn(2, channels, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 1))
    v0 = getattr(layer, "v0", torch.zeros(channels, dtype=torch.float64)).detach()
    v1 = getattr(layer, "v1", torch.ones(channels, dtype=torch.float64)).detach()
    running = {}
    for i, (kind, _) in nodes.items():  # a batch node reads its own average; a std node its variance
        running[i] = {kind: expected[f"running_{kind}_{i}"]}
    reference = output_of(genome, x, v0, v1, groups=1, eps=layer.eps, running=running)
    torch.testing.assert_close(layer(x), reference, rtol=1e-9, atol=1e-9)
