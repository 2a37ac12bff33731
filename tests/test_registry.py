"""The registry: lookup by any spelling, clear errors, third-party registration."""
import functools

import pytest
import torch
from torch import nn

import evonorm_core
from evonorm_core import registry


@pytest.mark.parametrize("spelling", ["evonorm_s0", "EvoNormS0", "evonorm-s0", "EVONORM S0", "EvoNorm_S0"])
def test_names_are_case_and_separator_insensitive(spelling):
    layer = evonorm_core.build_norm_act(spelling, 64)
    assert type(layer) is evonorm_core.EvoNormS0
    assert evonorm_core.resolve_name(spelling) == "evonorm_s0"


def test_build_returns_a_working_module():
    layer = evonorm_core.build_norm_act("evonorm_s0", 64)
    y = layer(torch.randn(2, 64, 7, 7))
    assert y.shape == (2, 64, 7, 7) and torch.isfinite(y).all()


def test_unknown_name_lists_valid_names():
    with pytest.raises(KeyError) as info:
        evonorm_core.build_norm_act("evonorm_s9", 8)
    message = str(info.value)
    assert message.startswith("unknown norm-act layer 'evonorm_s9'; valid names:")
    assert all(name in message for name in evonorm_core.list_norm_acts())
    assert isinstance(info.value, ValueError)


def test_unknown_option_lists_accepted_options():
    with pytest.raises(ValueError, match=r"'evonorm_b0' does not take option\(s\) \['groups'\]; accepted: \['affine', 'device', 'dtype', 'eps', 'impl', 'momentum', 'process_group', 'sync'\]"):
        evonorm_core.build_norm_act("evonorm_b0", 8, groups=4)


def test_bound_defaults_are_not_options():
    assert "activation" not in registry.accepted_options(registry._FACTORIES["bn_relu"])
    assert type(evonorm_core.build_norm_act("bn_swish", 8)).__name__ == "BatchNormAct2d"
    assert evonorm_core.build_norm_act("bn_swish", 8).activation == "swish"


def test_third_party_registration(scratch_registry):
    @evonorm_core.register_norm_act("test_scaled_tanh", "scaled-tanh-test")
    class ScaledTanh(nn.Module):
        def __init__(self, num_channels, nonlinearity=True, scale=2.0):
            super().__init__()
            self.scale, self.nonlinearity = scale, nonlinearity

        def forward(self, x):
            return torch.tanh(x) * self.scale if self.nonlinearity else x

    assert "test_scaled_tanh" in evonorm_core.list_norm_acts()
    layer = evonorm_core.build_norm_act("Scaled_Tanh_Test", 4, scale=3.0)
    torch.testing.assert_close(layer(torch.ones(1, 4, 1, 1)), torch.full((1, 4, 1, 1), 3 * torch.tanh(torch.tensor(1.0)).item()))
    with pytest.raises(ValueError, match="already taken"):
        evonorm_core.register_norm_act("test-scaled-tanh-x", "TEST_SCALED_TANH")(ScaledTanh)


def test_norm_act_factory():
    make = evonorm_core.norm_act_factory("gn-relu", groups=8)
    on, off = make(32, True), make(32, False)
    assert on.groups == 8 and on.activation == "relu" and off.activation is None
    custom = lambda c, nl: nn.Identity()  # noqa: E731
    assert evonorm_core.norm_act_factory(custom) is custom
    with pytest.raises(ValueError, match="only be given with a layer name"):
        evonorm_core.norm_act_factory(custom, groups=2)
    with pytest.raises(KeyError, match="unknown norm-act layer 'nope'"):
        evonorm_core.norm_act_factory("nope")
    with pytest.raises(ValueError, match="does not take option"):
        evonorm_core.norm_act_factory("frn", momentum=0.1)


# alias -> (canonical name, class, activation after the affine, extra per-channel parameters);
# the baselines of the paper's Tables 2, 3 and 5 under the names their papers use
ALIASES = {
    "bn": ("bn_relu", "BatchNormAct2d", "relu", set()),
    "batchnorm_relu": ("bn_relu", "BatchNormAct2d", "relu", set()),
    "batchnorm-prelu": ("bn_prelu", "BatchNormAct2d", "max_v0", {"v0"}),
    "BN-Swish1": ("bn_swish1", "BatchNormAct2d", "swish1", set()),
    "batchnorm_swish": ("bn_swish", "BatchNormAct2d", "swish", {"v1"}),
    "gn": ("gn_relu", "GroupNormAct2d", "relu", set()),
    "GroupNorm-Swish": ("gn_swish", "GroupNormAct2d", "swish", {"v1"}),
    "layernorm_relu": ("ln_relu", "LayerNormAct2d", "relu", set()),
    "pn_relu": ("pixelnorm_relu", "PixelNormAct2d", "relu", set()),
    "FRN-TLU": ("frn", "FilterResponseNorm2d", "max_v0", {"v0"}),
    "filter_response_norm": ("frn", "FilterResponseNorm2d", "max_v0", {"v0"}),
    "RS+rej": ("rs_rej", "BatchRMSNormReLU2d", None, set()),
    "batch_rms_relu": ("rs_rej", "BatchRMSNormReLU2d", None, set()),
}


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases_build_the_baseline_with_its_activation(alias):
    canonical, cls, activation, extra = ALIASES[alias]
    assert evonorm_core.resolve_name(alias) == canonical
    layer = evonorm_core.build_norm_act(alias, 8)
    assert type(layer).__name__ == cls and layer.activation == activation
    assert {n for n, _ in layer.named_parameters()} == {"weight", "bias"} | extra
    assert evonorm_core.build_norm_act(alias, 8, nonlinearity=False).activation is None


def test_name_normalization_and_listing():
    assert registry.normalize_name(" EvoNorm-S0 (v2)") == "evonorms0v2"
    assert registry.resolve_name("evonorm_s1") == "evonorm_s1" and registry.resolve_name("EVONORM-B2") == "evonorm_b2"
    names = evonorm_core.list_norm_acts()
    assert names == sorted(names) and "bn" not in names  # canonical names only, no aliases
    with pytest.raises(registry.UnknownNormActError, match="^unknown norm-act layer 3; valid names: bn_prelu, "):
        registry.resolve_name(3)


def test_accepted_options_follow_kwargs_up_the_class_chain():
    class Base(nn.Module):
        def __init__(self, num_channels, nonlinearity=True, *, eps=1e-5, depth=1):
            super().__init__()

    class PassesOn(Base):
        def __init__(self, num_channels, nonlinearity=True, *, width=2, **options):
            super().__init__(num_channels, nonlinearity, **options)

    class Stops(Base):
        def __init__(self, num_channels, nonlinearity=True, *, width=2):
            super().__init__(num_channels, nonlinearity)

    assert registry.accepted_options(PassesOn) == ["depth", "eps", "width"]
    assert registry.accepted_options(Stops) == ["width"]
    assert registry.accepted_options(functools.partial(PassesOn, eps=0.1)) == ["depth", "width"]
    assert registry.options_of("gn_relu") == ["affine", "device", "dtype", "eps", "groups"]  # activation is bound


def test_makers_carry_their_options_name_and_batch_statistics():
    make_b0 = evonorm_core.norm_act_factory("EvoNorm-B0", eps=1e-3, momentum=0.2)
    assert make_b0.__name__ == "make_evonorm_b0" and make_b0.uses_batch_statistics is True
    layer = make_b0(16, False)
    assert (layer.eps, layer.momentum, layer.nonlinearity, layer.num_channels) == (1e-3, 0.2, False, 16)
    assert evonorm_core.norm_act_factory("evonorm_s0").uses_batch_statistics is False
    assert evonorm_core.norm_act_factory("bn").uses_batch_statistics is True
    assert evonorm_core.uses_batch_statistics(make_b0) is True


def test_override_points_every_spelling_to_the_new_layer(scratch_registry):
    class First(nn.Module):
        uses_batch_statistics = True

        def __init__(self, num_channels, nonlinearity=True):
            super().__init__()

    class Second(First):
        uses_batch_statistics = False

    evonorm_core.register_norm_act("test_override_layer", "test-override-alias")(First)
    evonorm_core.register_norm_act("test_override_layer", "test-override-alias", override=True)(Second)
    assert type(evonorm_core.build_norm_act("TEST_OVERRIDE_ALIAS", 4)) is Second
    assert evonorm_core.uses_batch_statistics("test_override_layer") is False


def test_an_explicit_batch_statistics_declaration_wins_over_the_class(scratch_registry):
    """``register_norm_act(..., batch_statistics=False)`` is what ``uses_batch_statistics`` answers, also
    for a class that declares the opposite (``uses_batch_statistics = True``) or nothing at all."""
    class DeclaresBatchStatistics(nn.Module):
        uses_batch_statistics = True

        def __init__(self, num_channels, nonlinearity=True):
            super().__init__()

    class DeclaresNothing(nn.Module):
        def __init__(self, num_channels, nonlinearity=True):
            super().__init__()

    evonorm_core.register_norm_act("test_declared_false", batch_statistics=False)(DeclaresBatchStatistics)
    evonorm_core.register_norm_act("test_undeclared_false", batch_statistics=False)(DeclaresNothing)
    evonorm_core.register_norm_act("test_undeclared_true", batch_statistics=True)(DeclaresNothing)
    for nonlinearity in (True, False):
        assert evonorm_core.uses_batch_statistics("test_declared_false", nonlinearity) is False
        assert evonorm_core.uses_batch_statistics("test_undeclared_false", nonlinearity) is False
        assert evonorm_core.uses_batch_statistics("test_undeclared_true", nonlinearity) is True


def test_run_settings_become_layer_options_only_when_set():
    """The one adapter from a run's settings to norm_act_factory options (classification, GAN, detection)."""
    assert evonorm_core.norm_act_options() == {}
    assert evonorm_core.norm_act_options(groups=8, sync=True, eps=1e-3, impl="reference") == {
        "groups": 8, "eps": 1e-3, "impl": "reference", "sync": True}
    assert evonorm_core.norm_act_options(groups=None, sync=False, eps=None, impl=None) == {}
    layer = evonorm_core.norm_act_factory("gn_relu", **evonorm_core.norm_act_options(groups=4))(16)
    assert layer.groups == 4
    with pytest.raises(ValueError, match=r"does not take option\(s\) \['sync'\]"):
        evonorm_core.norm_act_factory("gn_relu", **evonorm_core.norm_act_options(sync=True))
