"""The registry: lookup by any spelling, clear errors, third-party registration."""
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


def test_third_party_registration():
    @evonorm_core.register_norm_act("test_scaled_tanh", "scaled-tanh-test")
    class ScaledTanh(nn.Module):
        def __init__(self, num_channels, nonlinearity=True, scale=2.0):
            super().__init__()
            self.scale, self.nonlinearity = scale, nonlinearity

        def forward(self, x):
            return torch.tanh(x) * self.scale if self.nonlinearity else x

    try:
        assert "test_scaled_tanh" in evonorm_core.list_norm_acts()
        layer = evonorm_core.build_norm_act("Scaled_Tanh_Test", 4, scale=3.0)
        torch.testing.assert_close(layer(torch.ones(1, 4, 1, 1)), torch.full((1, 4, 1, 1), 3 * torch.tanh(torch.tensor(1.0)).item()))
        with pytest.raises(ValueError, match="already taken"):
            evonorm_core.register_norm_act("test-scaled-tanh-x", "TEST_SCALED_TANH")(ScaledTanh)
    finally:
        for key in [k for k, v in registry._KEYS.items() if v == "test_scaled_tanh"]:
            del registry._KEYS[key]
        del registry._FACTORIES["test_scaled_tanh"]


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
