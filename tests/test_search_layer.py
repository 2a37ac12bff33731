"""EvoNorm-B0, EvoNorm-S0 and BN-ReLU written as genomes compute what the library's layers compute."""
import pytest
import torch

import evonorm_core
from evonorm_core.search import ChannelAffine2d, GraphLayer, genome_norm_act, parse

B0 = "x / max(batch_std(x), v1 * x + instance_std(x))"
S0 = "x * sigmoid(v1 * x) / group_std(x)"
BN_RELU = "max(v1 * ((x - batch_mean(x)) / batch_std(x)) + v0, 0)"
C = 64


def randomize(*layers):
    """Give every layer the same random parameters (v0/v1/weight/bias where present)."""
    generator = torch.Generator().manual_seed(1)
    for name in ("weight", "bias", "v0", "v1"):
        value = torch.rand(C, generator=generator, dtype=torch.float64) * 2 - 0.5
        for layer in layers:
            if hasattr(layer, name):
                with torch.no_grad():
                    getattr(layer, name).copy_(value)


def run_both(graph, reference):
    """Outputs of both over two training batches, then in eval (moving averages)."""
    x = [torch.randn(8, C, 5, 5, dtype=torch.float64) * 3 + 1 for _ in range(2)]
    outputs = []
    for train, batch in ((True, x[0]), (True, x[1]), (False, x[0])):
        graph.train(train)
        reference.train(train)
        outputs.append((graph(batch), reference(batch)))
    return outputs


@pytest.mark.parametrize("expression, name", [(B0, "evonorm_b0"), (S0, "evonorm_s0")])
@pytest.mark.parametrize("eps, rtol", [(1e-10, 1e-8), (1e-5, 1e-4)])
def test_evonorm_genomes_equal_library_layers(expression, name, eps, rtol):
    # The only difference is Table 1's safe division x / (y + eps sign(y)): relative eps/y.
    graph = GraphLayer(parse(expression), C, eps=eps).double()
    reference = evonorm_core.build_norm_act(name, C, eps=eps).double()
    randomize(graph, reference)
    for ours, theirs in run_both(graph, reference):
        torch.testing.assert_close(ours, theirs, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("eps, rtol", [(1e-10, 1e-8), (1e-5, 1e-4)])
def test_bn_relu_genome_equals_bn_relu(eps, rtol):
    # BN-ReLU's affine sits inside the ReLU: in the genome it is v1 (gamma) and v0 (beta);
    # the trailing affine is the identity.
    graph = GraphLayer(parse(BN_RELU), C, eps=eps).double()
    reference = evonorm_core.build_norm_act("bn_relu", C, eps=eps).double()
    randomize(reference)
    with torch.no_grad():
        graph.v1.copy_(reference.weight)
        graph.v0.copy_(reference.bias)
    for ours, theirs in run_both(graph, reference):
        torch.testing.assert_close(ours, theirs, rtol=rtol, atol=rtol)
    torch.testing.assert_close(graph.running_var_7, reference.running_var)
    torch.testing.assert_close(graph.running_mean_4, reference.running_mean)


def test_graph_layer_keeps_dtype_and_skips_dead_nodes():
    genome = parse("tanh(x)")
    layer = GraphLayer(genome, 8)
    assert not hasattr(layer, "v0") and not hasattr(layer, "v1")
    x = torch.randn(2, 8, 3, 3, dtype=torch.bfloat16)
    assert layer(x).dtype == torch.bfloat16
    assert "tanh(x)" in repr(layer)


def test_norm_act_spec_uses_channel_affine_without_nonlinearity():
    make = genome_norm_act(parse(S0), groups=4)
    assert isinstance(make(16, True), GraphLayer) and make(16, True).groups == 4
    affine = make(16, False)
    assert isinstance(affine, ChannelAffine2d)
    x = torch.randn(2, 16, 3, 3)
    torch.testing.assert_close(affine(x), x)
    assert evonorm_core.norm_act_factory(make)(16, True).num_channels == 16


def test_cumulative_momentum_averages_every_batch_since_reset():
    layer = GraphLayer(parse("x / batch_std(x)"), 4, momentum=None).double()
    batches = [torch.randn(6, 4, 3, 3, dtype=torch.float64) * s for s in (1.0, 2.0, 3.0)]
    for batch in batches:
        layer(batch)
    unbiased = torch.stack([b.var(dim=(0, 2, 3), unbiased=True) for b in batches]).mean(0)
    torch.testing.assert_close(layer.running_var_4, unbiased)
    assert int(layer.num_batches_tracked) == 3
    layer.reset_running_stats()
    assert int(layer.num_batches_tracked) == 0 and torch.equal(layer.running_var_4, torch.ones(4, dtype=torch.float64))


def test_uses_batch_statistics_follows_the_live_graph():
    assert GraphLayer(parse(B0), 8).uses_batch_statistics
    assert not GraphLayer(parse(S0), 8).uses_batch_statistics
    assert evonorm_core.uses_batch_statistics(genome_norm_act(parse(B0))) is True
    assert evonorm_core.uses_batch_statistics(genome_norm_act(parse(S0))) is False


def test_empty_batch_leaves_moving_averages_and_count_alone():
    layer = GraphLayer(parse(f"({BN_RELU}) / group_std(x) + channel_rms(x)"), 4, groups=2)
    layer(torch.randn(3, 4, 2, 2))
    before = {n: b.clone() for n, b in layer.named_buffers()}
    for shape in [(0, 4, 2, 2), (3, 4, 0, 2)]:
        x = torch.randn(shape, requires_grad=True)
        y = layer(x)
        y.sum().backward()
        assert y.shape == shape
    for n, b in layer.named_buffers():
        assert torch.equal(b, before[n]), n


@pytest.mark.parametrize("training", [True, False])
def test_graph_layer_traces_with_fx(training):
    def make():
        return GraphLayer(parse("x / max(batch_std(x), v1 * x + group_std(x))"), 8, groups=4).double().train(training)

    layer, twin = make(), torch.fx.symbolic_trace(make())
    x = torch.randn(4, 8, 3, 3, dtype=torch.float64)
    torch.testing.assert_close(twin(x), layer(x), rtol=0, atol=0)
    torch.testing.assert_close(twin.running_var_4, layer.running_var_4, rtol=0, atol=0)


def test_device_dtype_affine_and_folding():
    layer = GraphLayer(parse(BN_RELU), 8, device="meta", dtype=torch.float64)
    assert all(t.is_meta for t in [*layer.parameters(), *layer.buffers()])
    assert layer.running_var_7.dtype == torch.float64 and layer.num_batches_tracked.dtype == torch.long
    bare = GraphLayer(parse(S0), 8, affine=False)
    assert bare.weight is None and bare.folded_affine() is None
    affine = genome_norm_act(parse(S0), dtype=torch.float64)(8, False)
    assert isinstance(affine, ChannelAffine2d) and affine.weight.dtype == torch.float64
    with torch.no_grad():
        affine.weight.uniform_(), affine.bias.uniform_()
    scale, shift = affine.folded_affine()
    x = torch.randn(2, 8, 3, 3, dtype=torch.float64)
    torch.testing.assert_close(affine(x), x * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1))


def test_recalibration_through_running_stats():
    layer = GraphLayer(parse("x / batch_std(x)"), 4).double()
    layer(torch.randn(6, 4, 3, 3, dtype=torch.float64) * 10)
    batches = [torch.randn(6, 4, 3, 3, dtype=torch.float64) * s for s in (1.0, 2.0)]
    assert evonorm_core.running_stats.recalibrate(layer, batches) == 1
    unbiased = torch.stack([b.var(dim=(0, 2, 3), unbiased=True) for b in batches]).mean(0)
    torch.testing.assert_close(layer.running_var_4, unbiased)
    assert layer.momentum == 0.1


def test_fresh_layers_start_from_the_paper_initialisation():
    layer = GraphLayer(parse("max(v1 * x, v0) / group_std(x)"), 8, groups=4)
    assert torch.equal(layer.v0, torch.zeros(8)) and torch.equal(layer.v1, torch.ones(8))
    assert layer.eps == 1e-5 and layer.nonlinearity and "nonlinearity=True" in repr(layer)
    affine = ChannelAffine2d(8, nonlinearity=True)
    assert affine.eps == 1e-5 and not affine.nonlinearity and affine.activation is None


def test_channel_affine_takes_its_options():
    affine = ChannelAffine2d(8, eps=0.25, affine=False, device="meta", dtype=torch.float64)
    assert affine.eps == 0.25 and affine.weight is None and affine.bias is None
    assert all(t.is_meta for t in ChannelAffine2d(8, device="meta").parameters())
    make = genome_norm_act(parse(S0), eps=0.25, affine=False, device="meta", dtype=torch.float64, groups=4)
    plain = make(8, nonlinearity=False)
    assert isinstance(plain, ChannelAffine2d) and plain.eps == 0.25 and plain.weight is None
    with_affine = genome_norm_act(parse(S0), device="meta", dtype=torch.float64)(8, nonlinearity=False)
    assert with_affine.weight.is_meta and with_affine.weight.dtype == torch.float64
    assert isinstance(make(8), GraphLayer)  # nonlinearity defaults to True, as for every norm-act maker


@pytest.mark.parametrize("bad", ["weight", "bias"])
def test_channel_affine_checks_a_given_weight_and_bias(bad):
    affine = ChannelAffine2d(8)
    params = {"weight": torch.ones(8), "bias": torch.zeros(8)}
    params[bad] = torch.ones(3)
    with pytest.raises(ValueError, match=f"^ChannelAffine2d: {bad} must be"):  # named by the layer, not by functional.affine
        affine.forward_affine(torch.randn(2, 8, 3, 3), params["weight"], params["bias"])


def test_graph_layer_parameters_follow_device_and_dtype():
    layer = GraphLayer(parse("max(v1 * x, v0) / group_std(x)"), 8, groups=4, device="meta", dtype=torch.float64)
    assert {t.dtype for t in layer.parameters()} == {torch.float64}
    assert all(t.is_meta for t in layer.parameters())


def test_graph_layer_computes_in_the_input_dtype():
    """A float64 layer on a float32 input computes in float32 (v0/v1 cast to the input's dtype, not the
    input promoted to float64): bit for bit what the layer cast to float32 gives."""
    layer = GraphLayer(parse("max(v1 * x, v0) / group_std(x)"), C, groups=4).double()
    randomize(layer)
    single = GraphLayer(parse("max(v1 * x, v0) / group_std(x)"), C, groups=4)
    single.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x = torch.randn(2, C, 3, 3)
    torch.testing.assert_close(layer(x), single(x), rtol=0, atol=0)
