"""timm's EvoNorm layers swapped for the suite's fused ones, and the norm_layer factory timm takes.

The reference is timm's own implementation (timm/layers/evo_norm.py): each of its EvoNorms with
random parameters and statistics is compared, in float64, with the suite's layer that
``evonorm_core.timm_support`` maps it to: outputs and input gradients in training and eval, the
moving variance after a training step, the configuration (eps, groups from group_size, momentum)
kept, not normalized to the suite's defaults.
"""
import functools

import pytest
import torch
from torch import nn

import evonorm_core
from evonorm_core import timm_support

timm = pytest.importorskip("timm", reason="timm is not installed (pip install -e .[timm]); timm interop is untested")
from timm.layers import evo_norm  # noqa: E402

C = 32


def randomized(module):
    """``module`` with every parameter and the moving variance away from its initial value (float64)."""
    gen = torch.Generator().manual_seed(1)
    module = module.double()
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3 + (1.0 if name in ("weight", "v") else 0.0))
        if hasattr(module, "running_var"):
            module.running_var.copy_(torch.rand(C, generator=gen, dtype=torch.float64) + 0.5)
    return module


def timm_layers():
    """(id, timm layer, suite class, nonlinearity): every timm EvoNorm the suite has an equivalent for."""
    cases = []
    for cls, suite in [("EvoNorm2dB0", "EvoNormB0"), ("EvoNorm2dB1", "EvoNormB1"), ("EvoNorm2dB2", "EvoNormB2")]:
        for apply_act in (True, False):
            cases.append((f"{cls}-act{apply_act}", functools.partial(getattr(evo_norm, cls), C, apply_act=apply_act,
                                                                     momentum=0.3), suite, apply_act))
    for cls, suite in [("EvoNorm2dS0", "EvoNormS0"), ("EvoNorm2dS1", "EvoNormS1"), ("EvoNorm2dS2", "EvoNormS2")]:
        for apply_act in (True, False):
            cases.append((f"{cls}-act{apply_act}", functools.partial(getattr(evo_norm, cls), C, group_size=8,
                                                                     apply_act=apply_act), suite, apply_act))
        cases.append((f"{cls}a", functools.partial(getattr(evo_norm, cls + "a"), C, groups=16), suite, True))
    return cases


@pytest.mark.parametrize("make, suite, nonlinearity", [c[1:] for c in timm_layers()], ids=[c[0] for c in timm_layers()])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_each_timm_evonorm_is_swapped_for_the_layer_computing_the_same(make, suite, nonlinearity, mode):
    ref = randomized(make()).train(mode == "train")
    layer, why = timm_support.build_evonorm_equivalent(ref)
    assert type(layer).__name__ == suite and layer.nonlinearity is nonlinearity, why
    assert layer.training is ref.training and layer.eps == ref.eps  # timm's eps, e.g. 1e-3 of B0 and the a variants
    assert layer.impl == "fused" and layer.weight.dtype == torch.float64
    if hasattr(ref, "groups"):
        assert layer.groups == ref.groups  # from timm's group_size (4 groups of 8) or groups (16)
    if suite.startswith("EvoNormB") and nonlinearity:
        assert layer.momentum == 0.3
    x = (torch.randn(4, C, 5, 6, dtype=torch.float64) * 2 + 0.5).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    expected, got = ref(x), layer(x2)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)  # timm computes its statistics in float32
    grad = torch.randn_like(expected)
    expected.backward(grad)
    got.backward(grad)
    torch.testing.assert_close(x2.grad, x.grad, rtol=1e-4, atol=1e-5)
    if hasattr(layer, "running_var"):  # a training step moved both moving variances the same way
        torch.testing.assert_close(layer.running_var, ref.running_var, rtol=1e-6, atol=1e-7)
        assert (mode == "train") is not torch.equal(ref.running_var, randomized(make()).running_var)
    if mode == "train" and hasattr(ref, "running_var"):  # and eval then reads the moved averages alike
        ref.eval(), layer.eval()
        torch.testing.assert_close(layer(x2.detach()), ref(x.detach()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make, message", [
    (lambda: evo_norm.EvoNorm2dS0a(C, apply_act=False), "EvoNorm2dS0a without v .* division by the group std"),
    (lambda: evo_norm.EvoNorm2dS1a(C, apply_act=False), "EvoNorm2dS1a with apply_act=False still divides by the group std"),
    (lambda: evo_norm.EvoNorm2dS2a(C, apply_act=False), "EvoNorm2dS2a with apply_act=False still divides by the group RMS"),
    (lambda: evo_norm.EvoNorm2dS1(C, act_layer=nn.ReLU), "EvoNorm2dS1 applies act=ReLU"),
])
def test_a_timm_evonorm_without_an_equivalent_is_named_not_swapped(make, message):
    """The a variants built without activation still normalize (x / group statistic * w + b): the suite's
    nonlinearity=False layer is an affine, so no swap; S1/S2 with an activation other than SiLU neither."""
    ref = randomized(make())
    layer, why = timm_support.build_evonorm_equivalent(ref)
    assert layer is None
    assert __import__("re").search(message, why), why
    x = torch.randn(2, C, 4, 4, dtype=torch.float64)
    affine = x * ref.weight.view(1, -1, 1, 1) + ref.bias.view(1, -1, 1, 1)
    assert not torch.allclose(ref(x), affine)  # what makes it differ from the suite's nonlinearity=False


def test_swap_keeps_the_model_class_and_leaves_a_layer_without_equivalent():
    model = nn.Sequential(evo_norm.EvoNorm2dS0a(C, group_size=8), nn.Conv2d(C, C, 1),
                          evo_norm.EvoNorm2dS0a(C, apply_act=False), evo_norm.EvoNorm2dB0(C))
    model = randomized(model)
    with pytest.warns(evonorm_core.ConversionWarning, match="'2': timm's EvoNorm2dS0a without v"):
        swapped = evonorm_core.swap_timm_evonorms(model, impl="reference")
    assert type(swapped) is nn.Sequential and isinstance(model[0], evo_norm.EvoNorm2dS0a)  # a copy
    assert [type(m).__name__ for m in swapped] == ["EvoNormS0", "Conv2d", "EvoNorm2dS0a", "EvoNormB0"]
    assert swapped[0].impl == "reference" and swapped[0].groups == 4 and swapped[0].eps == 1e-3
    report = swapped.norm_act_report
    assert [e.name for e in report.carried] == ["0", "3"] and [k.name for k in report.kept] == ["2"]
    assert str(report) == ("converted 2 EvoNorm layers to their equivalents: 2 timm EvoNorm layers swapped with their "
                           "parameters and statistics (EvoNorm2dB0 x1, EvoNorm2dS0a x1), 0 of them with "
                           "nonlinearity=False; 1 left as they were (EvoNorm2dS0a x1); 1 warning(s), see .warnings")
    x = torch.randn(2, C, 4, 4, dtype=torch.float64)
    torch.testing.assert_close(swapped(x), model(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"takes \['groups'\] from each timm layer"):
        evonorm_core.swap_timm_evonorms(model, groups=8)
    with pytest.raises(ValueError, match="found no timm EvoNorm in Sequential; its normalization layers are BatchNorm2d x1"):
        evonorm_core.swap_timm_evonorms(nn.Sequential(nn.BatchNorm2d(4)))


def test_convert_refuses_to_turn_a_timm_evonorm_into_another_layer():
    model = nn.Sequential(nn.Conv2d(3, C, 1), evo_norm.EvoNorm2dS0(C), nn.Conv2d(C, C, 1), nn.BatchNorm2d(C), nn.ReLU())
    with pytest.raises(ValueError, match=r"1 whose equivalent is evonorm_s0 \(e.g. '1', timm's EvoNorm2dS0\).*"
                                         r"not for evonorm_b0.*timm_norm_act_layer"):
        evonorm_core.convert_norm_act(model, "evonorm_b0")
    gm = evonorm_core.convert_norm_act(model, "evonorm_s0", groups=8)  # the BatchNorm takes groups=8, timm's layer keeps 32
    assert (gm.get_submodule("1").groups, gm.get_submodule("3").groups) == (32, 8)
    assert str(gm.norm_act_report) == (
        "converted 2 norm layers to evonorm_s0: 1 with their activation folded in (relu x1), 0 with nonlinearity=False; "
        "1 timm EvoNorm layers swapped with their parameters and statistics (EvoNorm2dS0 x1), 0 of them with "
        "nonlinearity=False")


# --- the factory timm's norm_layer= takes ---------------------------------------------------------------------------

def test_timm_builds_its_architectures_with_the_suites_layers():
    """resnetv2_50 (pre-activation: every norm has its activation) and efficientnet_b0 built with the factory get
    the layer with nonlinearity exactly where timm's own build has an activation, i.e. where converting timm's
    BatchNorm model folds one."""
    for name, layer in [("resnetv2_50", "evonorm_b0"), ("efficientnet_b0", "evonorm_s0")]:
        built = timm.create_model(name, norm_layer=evonorm_core.timm_norm_act_layer(layer, impl="reference"))
        ours = {n: m for n, m in built.named_modules() if isinstance(m, evonorm_core.NormAct2d)}
        assert ours and all(type(m).__name__ == ("EvoNormB0" if layer == "evonorm_b0" else "EvoNormS0")
                            and m.impl == "reference" for m in ours.values())
        assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in built.modules())
        reference = timm.create_model(name)  # timm's BatchNormAct2d: apply_act decides whether act is Identity
        expected = {n: not isinstance(m.act, nn.Identity) for n, m in reference.named_modules()
                    if type(m).__name__ == "BatchNormAct2d"}
        assert {n: m.nonlinearity for n, m in ours.items()} == expected
        converted = evonorm_core.convert_norm_act(reference, layer)
        assert {e.name: e.nonlinearity for e in converted.norm_act_report.entries} == expected
        out = built(torch.randn(2, 3, 32, 32))
        out.sum().backward()
        assert torch.isfinite(out).all()


def test_the_factory_takes_timms_arguments_and_refuses_others():
    make = evonorm_core.timm_norm_act_layer("evonorm_b0", momentum=0.05)
    layer = make(16, apply_act=False, act_layer=nn.SiLU, inplace=True, eps=1e-3, momentum=0.2, dtype=torch.float64)
    assert not layer.nonlinearity and layer.eps == 1e-3 and layer.momentum == 0.05  # the factory's own options win
    assert layer.weight.dtype == torch.float64
    gn = evonorm_core.timm_norm_act_layer("gn_relu", groups=4)(16, momentum=0.2)  # momentum: not a GroupNorm option
    assert gn.groups == 4 and gn.nonlinearity
    with_drop = make(16, drop_layer=functools.partial(timm.layers.DropBlock2d, drop_prob=0.1))
    assert isinstance(with_drop, nn.Sequential) and type(with_drop[1]).__name__ == "DropBlock2d"
    with pytest.raises(TypeError, match=r"timm passed \['group_size'\]"):
        make(16, group_size=8)
    from_maker = evonorm_core.timm_norm_act_layer(evonorm_core.norm_act_factory("evonorm_s0", groups=2))
    assert from_maker(8, apply_act=False, dtype=torch.float64).weight.dtype == torch.float64
