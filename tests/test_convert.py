"""convert_norm_act on torchvision models, against forward passes assembled by hand."""
import copy
import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision import models
from torchvision.ops.misc import Conv2dNormActivation, FrozenBatchNorm2d

import evonorm_core
from evonorm_core.layers import NormAct2d

ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.SiLU)


def randomize_layers(model):
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, NormAct2d):
                for name, p in module.named_parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.2 + (1.0 if name in ("weight", "v1") else 0.0))


def converted(model_fn, layer="evonorm_s0"):
    torch.manual_seed(0)
    model = model_fn().eval()
    gm = evonorm_core.convert_norm_act(model, layer, **({"groups": 8} if layer == "evonorm_s0" else {}))
    randomize_layers(gm)
    return model, gm


def resnet_by_hand(gm, x):
    """torchvision ResNet-50 with each norm-act in place of its BN(+ReLU): ReLU only after the residual add."""
    m = gm.get_submodule
    x = m("maxpool")(m("bn1")(m("conv1")(x)))
    for stage, blocks in (("layer1", 3), ("layer2", 4), ("layer3", 6), ("layer4", 3)):
        for i in range(blocks):
            p = f"{stage}.{i}."
            out = m(p + "bn1")(m(p + "conv1")(x))
            out = m(p + "bn2")(m(p + "conv2")(out))
            out = m(p + "bn3")(m(p + "conv3")(out))
            shortcut = m(p + "downsample.1")(m(p + "downsample.0")(x)) if i == 0 else x
            x = F.relu(out + shortcut)
    return m("fc")(torch.flatten(m("avgpool")(x), 1))


def assembled_by_hand(original, gm):
    """Copy of ``original`` whose Conv-BN-act blocks take the converted layers, activations made Identity."""
    model = copy.deepcopy(original)
    for name, block in model.named_modules():
        if isinstance(block, Conv2dNormActivation) or (isinstance(block, nn.Sequential) and isinstance(block[-1], nn.BatchNorm2d)):
            for i, child in enumerate(block):
                if isinstance(child, nn.BatchNorm2d):
                    block[i] = gm.get_submodule(f"{name}.{i}")
                    if i + 1 < len(block) and isinstance(block[i + 1], ACTIVATIONS):
                        assert block[i].nonlinearity
                        block[i + 1] = nn.Identity()
                    else:
                        assert not block[i].nonlinearity
    assert not any(isinstance(mod, nn.BatchNorm2d) for mod in model.modules())
    return model.eval()


def torchvision_resnet_nonlinearity(model):
    """BN name -> whether a ReLU follows it directly, read from torchvision's own module structure:
    the stem's bn1 and each Bottleneck's bn1/bn2 feed ``relu``; bn3 feeds the residual add and the
    downsample BN the shortcut."""
    expected = {"bn1": True}
    for name, block in model.named_modules():
        if isinstance(block, models.resnet.Bottleneck):
            expected.update({f"{name}.bn1": True, f"{name}.bn2": True, f"{name}.bn3": False})
            if block.downsample is not None:
                bn = [i for i, m in enumerate(block.downsample) if isinstance(m, nn.BatchNorm2d)]
                expected.update({f"{name}.downsample.{i}": False for i in bn})
    assert set(expected) == {n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    return expected


def test_resnet50():
    model, gm = converted(models.resnet50)
    expected = torchvision_resnet_nonlinearity(model)
    report = gm.norm_act_report
    assert {e.name: e.nonlinearity for e in report.entries} == expected
    assert {e.folded_activation for e in report.folded} == {"relu"} and len(report.folded) == 33
    for name, nonlinearity in expected.items():  # the layers themselves, not only the report
        layer = gm.get_submodule(name)
        assert isinstance(layer, evonorm_core.EvoNormS0) and layer.nonlinearity is nonlinearity
        assert hasattr(layer, "v1") is nonlinearity  # nonlinearity=False: the affine x * gamma + beta
    # ``out += identity`` stays in place: into each block's bn3 output, not a new tensor
    residuals = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in (operator.add, operator.iadd)]
    assert [(n.target, n.args[0].target) for n in residuals] == [
        (operator.iadd, name) for name in expected if name.endswith(".bn3")]
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(gm(x), resnet_by_hand(gm, x))
    assert not torch.allclose(gm(x), model(x))


@pytest.mark.parametrize("model_fn,activation,folded,total", [
    (models.mobilenet_v2, "relu6", 35, 52),
    (models.efficientnet_b0, "silu", 33, 49),
])
def test_mobilenet_and_efficientnet(model_fn, activation, folded, total):
    model, gm = converted(model_fn)
    report = gm.norm_act_report
    assert len(report.entries) == total and len(report.folded) == folded
    assert {e.folded_activation for e in report.folded} == {activation}
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(gm(x), assembled_by_hand(model, gm)(x))
    assert not any(isinstance(mod, nn.BatchNorm2d) for mod in gm.modules())


def test_squeeze_excitation_activations_are_kept():
    _, gm = converted(models.efficientnet_b0)
    kept = [name for name, mod in gm.named_modules() if isinstance(mod, nn.SiLU)]
    assert kept and all(".activation" in name for name in kept)  # SqueezeExcitation.activation follows a conv, not a BN


def test_report_and_training_mode():
    model = models.resnet50().train()
    gm = evonorm_core.convert_norm_act(model, "evonorm_b0")
    assert gm.training
    assert str(gm.norm_act_report) == (
        "converted 53 BatchNorm layers to evonorm_b0: 33 with their activation folded in (relu x33), "
        "20 with nonlinearity=False"
    )
    loss = gm(torch.randn(2, 3, 32, 32)).sum()
    loss.backward()
    assert gm.get_submodule("layer1.0.bn1").v1.grad is not None


def test_functional_activation_and_shared_use():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.bn_a, self.bn_b = nn.BatchNorm2d(8), nn.BatchNorm2d(8)

        def forward(self, x):
            a = F.silu(self.bn_a(self.conv(x)))
            b = self.bn_b(self.conv(x))
            return a + torch.relu(b) + b  # b has two consumers: its ReLU cannot be folded

    with pytest.warns(evonorm_core.ConversionWarning, match="'bn_b' feeds the activation relu and 1 other consumer"):
        gm = evonorm_core.convert_norm_act(Net(), "gn_relu", groups=4)
    entries = {e.name: e.folded_activation for e in gm.norm_act_report.entries}
    assert entries == {"bn_a": "silu", "bn_b": None}
    assert [e.warned for e in gm.norm_act_report.entries] == [False, True] and len(gm.norm_act_report.warnings) == 1

    class Other(nn.Module):  # the functional ReLU6 and the in-place method form
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.bn_c, self.bn_d = nn.BatchNorm2d(8), nn.BatchNorm2d(8)

        def forward(self, x):
            return self.bn_d(F.relu6(self.bn_c(self.conv(x)))).relu_()

    gm = evonorm_core.convert_norm_act(Other(), "gn_relu", groups=4)
    assert {e.name: e.folded_activation for e in gm.norm_act_report.entries} == {"bn_c": "relu6", "bn_d": "relu"}
    assert not [n for n in gm.graph.nodes if n.target in (F.relu6, "relu_")]


def test_a_batchnorm_called_twice_is_refused():
    """One BatchNorm applied to two feature maps shares its statistics between them; replacing it by
    one norm-act (and folding one call's activation) would change the model, so conversion refuses."""
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_a, self.conv_b, self.bn = nn.Conv2d(3, 8, 3), nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)

        def forward(self, x):
            return torch.relu(self.bn(self.conv_a(x))) + self.bn(self.conv_b(x))

    with pytest.raises(ValueError, match="BatchNorm 'bn' is called 2 times; cannot convert it"):
        evonorm_core.convert_norm_act(Twice(), "evonorm_b0")


@pytest.mark.parametrize("bn, kind", [
    (nn.BatchNorm1d(8), "BatchNorm1d"), (nn.BatchNorm3d(8), "BatchNorm3d"), (nn.LazyBatchNorm2d(), "lazy BatchNorm"),
    (FrozenBatchNorm2d(8), "frozen BatchNorm"),
])
def test_refuses_what_it_cannot_convert(bn, kind):
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.Sequential(bn))
    with pytest.raises(ValueError, match=rf"cannot convert 1 BatchNorm layer.*'3.0' is a {kind}"):
        evonorm_core.convert_norm_act(model, "evonorm_b0")


def test_a_sync_batchnorm_keeps_syncing():
    """A SyncBatchNorm becomes a layer that synchronises its batch statistics over the same process group
    (sync=True) where the layer uses batch statistics, a per-sample layer without; a maker that may use
    batch statistics and cannot be told to sync is refused."""
    group = object()  # stands for a torch.distributed process group; nothing runs distributed here
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.SyncBatchNorm(8, process_group=group), nn.ReLU(),
                          nn.Conv2d(8, 8, 1), nn.SyncBatchNorm(8))
    gm = evonorm_core.convert_norm_act(model, "evonorm_b0")
    folded, affine = gm.get_submodule("1"), gm.get_submodule("4")
    assert folded.sync and folded.process_group is group and folded.nonlinearity
    assert not affine.sync and not affine.nonlinearity  # nonlinearity=False: the affine x * gamma + beta, no statistics
    s0 = evonorm_core.convert_norm_act(model, "evonorm_s0", groups=4)
    assert not hasattr(s0.get_submodule("1"), "sync")
    maker = lambda c, nonlinearity: evonorm_core.build_norm_act("bn_relu", c, nonlinearity)  # noqa: E731
    with pytest.raises(ValueError, match="'1': it is a SyncBatchNorm and .* may use batch statistics without a sync"):
        evonorm_core.convert_norm_act(model, maker)


@pytest.mark.parametrize("spec", ["evonorm_b0", evonorm_core.norm_act_factory("gn_relu", groups=2)])
def test_layers_take_the_batchnorms_dtype(spec):
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4)).double()
    gm = evonorm_core.convert_norm_act(model, spec)
    layers = [m for m in gm.modules() if isinstance(m, NormAct2d)]
    assert [m.nonlinearity for m in layers] == [True, False]  # a ReLU follows the first BN only
    assert all(t.dtype == torch.float64 for m in layers for t in m.parameters())
    assert all(t.dtype == torch.float64 for m in layers for t in m.buffers() if t.is_floating_point())
    assert gm(torch.randn(2, 3, 4, 4, dtype=torch.float64)).dtype == torch.float64


def test_errors():
    class Dynamic(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x):
            return self.bn(x) if x.sum() > 0 else x

    with pytest.raises(ValueError, match=r"^convert_norm_act could not trace Dynamic with torch.fx: .*\. Models with "
                                         r"data-dependent control flow must be converted by building them with a "
                                         r"norm_act argument\.$"):
        evonorm_core.convert_norm_act(Dynamic(), "evonorm_s0")
    with pytest.raises(KeyError, match="unknown norm-act layer"):
        evonorm_core.convert_norm_act(models.resnet18(), "evonorm_x")


def test_layers_are_built_on_the_batchnorms_device():
    """Built there (device=...), not moved afterwards: a model on the meta device converts without data."""
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.ReLU()).to("meta")
    gm = evonorm_core.convert_norm_act(model, "evonorm_b0")
    layer = gm.get_submodule("1")
    assert layer.nonlinearity and all(t.is_meta for t in [*layer.parameters(), *layer.buffers()])


def test_an_eval_model_converts_to_an_eval_model():
    """The converted model keeps the original's mode, its new layers included: an eval-mode BN-ReLU
    model converted to bn_relu normalizes with the moving averages, as the original does (same output)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4))
    with torch.no_grad():
        model(torch.randn(16, 3, 8, 8) * 3 + 1)  # moving averages away from their initial 0 / 1
    model.eval()
    gm = evonorm_core.convert_norm_act(model, "bn_relu")
    assert not any(m.training for m in gm.modules())
    for name in ("1", "4"):  # the new layers take the BatchNorms' moving averages
        gm.get_submodule(name).load_state_dict(model.get_submodule(name).state_dict())
    x = torch.randn(2, 3, 8, 8)
    assert torch.allclose(gm(x), model(x), atol=1e-6)


def test_folded_activation_is_gone_and_options_reach_every_layer():
    """conv-BN-SiLU, conv-BN-ReLU6, conv-BN: each BN becomes the layer for its own width with the given
    options, the folded activation modules leave the model (not applied a second time after the layer)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 1), nn.BatchNorm2d(16), nn.SiLU(), nn.Conv2d(16, 8, 1),
                          nn.BatchNorm2d(8), nn.ReLU6(), nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4))
    gm = evonorm_core.convert_norm_act(model, "evonorm_s0", groups=4, eps=1e-3)
    layers = {name: m for name, m in gm.named_modules() if isinstance(m, NormAct2d)}
    assert sorted(layers) == ["1", "4", "7"]
    assert [(m.num_channels, m.groups, m.eps, m.nonlinearity) for m in layers.values()] == [
        (16, 4, 1e-3, True), (8, 4, 1e-3, True), (4, 4, 1e-3, False)]
    assert not any(isinstance(m, (nn.ReLU6, nn.SiLU, nn.BatchNorm2d)) for m in gm.modules())
    randomize_layers(gm)
    x = torch.randn(2, 3, 5, 5)
    by_hand = x
    for name in ("0", "1", "3", "4", "6", "7"):
        by_hand = gm.get_submodule(name)(by_hand)
    torch.testing.assert_close(gm(x), by_hand)
    assert (gm.get_submodule("4")(torch.randn(2, 8, 5, 5)) < 0).any()  # EvoNorm-S0: negatives a kept ReLU6 would clip
    report = gm.norm_act_report
    assert str(report) == ("converted 3 BatchNorm layers to evonorm_s0: 2 with their activation folded in "
                           "(relu6 x1, silu x1), 1 with nonlinearity=False")  # activations counted in name order
    assert [e.name for e in report.unfolded] == ["7"] and [e.folded_activation for e in report.folded] == ["silu", "relu6"]


def test_report_of_a_maker_and_of_a_model_without_activations():
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8))
    gm = evonorm_core.convert_norm_act(model, evonorm_core.norm_act_factory("gn_relu", groups=2))
    assert str(gm.norm_act_report) == ("converted 2 BatchNorm layers to make_gn_relu: 0 with their activation "
                                       "folded in (none), 2 with nonlinearity=False")
    assert all(gm.get_submodule(n).activation is None and gm.get_submodule(n).groups == 2 for n in ("1", "3"))
    assert isinstance(model[1], nn.BatchNorm2d)  # the original model is not modified


def test_an_explicit_dtype_or_device_overrides_the_batchnorms():
    """``dtype=``/``device=`` given to the conversion win over each BatchNorm's own (a float32 model
    converted with dtype=float64 gets float64 layers; the BatchNorm's are only the default)."""
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4))
    gm = evonorm_core.convert_norm_act(model, "evonorm_b0", dtype=torch.float64, device="meta")
    layers = [m for m in gm.modules() if isinstance(m, NormAct2d)]
    assert len(layers) == 2
    for layer in layers:
        tensors = [*layer.parameters(), *(b for b in layer.buffers() if b.is_floating_point())]
        assert tensors and all(t.dtype == torch.float64 and t.is_meta for t in tensors)
    assert all(p.dtype == torch.float32 and not p.is_meta for p in gm.get_submodule("0").parameters())


def test_the_suites_own_layers_already_in_a_model_stay_whole():
    """A model that already holds one of the suite's norm-act layers (here an EvoNorm-S0) keeps it as one
    opaque call in the traced graph, with its parameters, computing what it computed before; only
    the BatchNorm is converted."""
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 1)
            self.s0 = evonorm_core.build_norm_act("evonorm_s0", 8, groups=4)
            self.bn = nn.BatchNorm2d(8)

        def forward(self, x):
            return self.bn(self.s0(self.conv(x)))

    torch.manual_seed(0)
    model = Mixed().eval()
    randomize_layers(model)
    gm = evonorm_core.convert_norm_act(model, "bn_relu")
    calls = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    assert calls == ["conv", "s0", "bn"]
    assert isinstance(gm.get_submodule("s0"), type(model.s0))
    assert not any(n.op == "call_function" for n in gm.graph.nodes)  # nothing of S0 inlined
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(gm.get_submodule("s0")(gm.conv(x)), model.s0(model.conv(x)))
