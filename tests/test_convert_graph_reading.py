"""How convert_norm_act reads what follows each BatchNorm in the traced graph, and what it reports.

Each case is a small model whose BatchNorm output flows into one pattern (an activation through a
pass-through, a new quantity, a transform it cannot prove passes its input through, the model's
output, timm's own drop and act), checked against the decision written here by hand: folded or not,
the reason and the warning, and, where the conversion rewires the graph, the converted model's output
against the original's (a BatchNorm maker, so that only the graph can make them differ). The report's
text (``str`` and ``details()``) is checked line by line on a report built by hand.
"""
import functools
import operator
import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

import evonorm_core
from evonorm_core import convert
from evonorm_core.convert import ConversionReport, ConversionWarning, ConvertedNorm, KeptNorm


class Block(nn.Module):
    """conv -> bn -> ``after(bn_output, x)``: the pattern under test."""

    def __init__(self, after):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.bn = nn.BatchNorm2d(4)
        self.after = after

    def forward(self, x):
        return self.after(self, self.bn(self.conv(x)), x)


def convert_block(after, **modules):
    model = Block(after)
    for name, module in modules.items():
        model.add_module(name, module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = evonorm_core.convert_norm_act(model.eval(), lambda channels, nonlinearity: nn.BatchNorm2d(channels))
    (entry,) = gm.norm_act_report.entries
    return model, gm, entry, [str(w.message) for w in caught if issubclass(w.category, ConversionWarning)]


def chain_of_rolls(n):
    def after(self, y, x):
        for _ in range(n):
            y = torch.roll(y, 1, -1)
        return F.relu(y)
    return after


@pytest.mark.parametrize("after,modules,reason", [
    (lambda self, y, x: F.relu(self.drop(y)), {"drop": nn.Dropout(0.1)},
     "relu relu follows it through 'drop' (Dropout) (passing its input through)"),
    (lambda self, y, x: F.relu(F.dropout(y, 0.1, self.training)), {},
     "relu relu follows it through dropout (passing its input through)"),
    (lambda self, y, x: y.relu(), {}, "relu .relu() follows it"),
])
def test_an_activation_after_a_pass_through_is_folded(after, modules, reason):
    model, gm, entry, caught = convert_block(after, **modules)
    assert (entry.folded_activation, entry.nonlinearity, entry.reason, caught) == ("relu", True, reason, [])
    assert not any(n.op == "call_function" and n.target is F.relu for n in gm.graph.nodes)


@pytest.mark.parametrize("after,modules,reason", [
    (lambda self, y, x: F.relu(self.conv2(y)), {"conv2": nn.Conv2d(4, 4, 1)},
     "its output goes to 'conv2' (Conv2d), not an activation"),
    (lambda self, y, x: F.relu(torch.cat([y, x], 1)), {}, "its output goes to cat, not an activation"),
    (lambda self, y, x: F.relu(y.mean((2, 3), keepdim=True)), {}, "its output goes to .mean(), not an activation"),
    (lambda self, y, x: F.relu(y + self.conv2(x)), {"conv2": nn.Conv2d(3, 4, 1)},
     "its output goes to add, not an activation"),
    (lambda self, y, x: y, {}, "its output goes to the model's output, not an activation"),
    (chain_of_rolls(17), {}, "its output goes to roll, not an activation"),
])
def test_an_activation_after_a_new_quantity_is_not_the_norms(after, modules, reason):
    model, gm, entry, caught = convert_block(after, **modules)
    assert (entry.folded_activation, entry.nonlinearity, entry.reason, caught) == (None, False, reason, [])
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(gm(x), model(x))  # the activation is kept where it was


@pytest.mark.parametrize("after,modules,chain,act", [
    (lambda self, y, x: F.relu(y * 2 - 1), {}, "mul, sub", "relu"),
    (lambda self, y, x: F.relu(torch.maximum(y, self.conv2(x))), {"conv2": nn.Conv2d(3, 4, 1)}, "maximum", "relu"),
    (lambda self, y, x: y.flatten(2).relu(), {}, ".flatten()", ".relu()"),
    (lambda self, y, x: self.act(y * 2), {"act": nn.ReLU()}, "mul", "'act' (ReLU)"),
    (lambda self, y, x: torch.sigmoid(y * 2), {}, "mul", "sigmoid"),  # a gate ends the chain too
    (lambda self, y, x: F.relu(self.drop(y * 2)), {"drop": nn.Dropout(0.1)}, "mul, 'drop' (Dropout)", "relu"),
    (chain_of_rolls(16), {}, ", ".join(["roll"] * 16), "relu"),
])
def test_an_activation_after_an_unknown_transform_warns_and_stays(after, modules, chain, act):
    """The transform may or may not pass the norm's output through: not folded, the activation kept,
    and a warning naming the chain (pass-throughs included); up to 16 unknown operations are followed, not 17."""
    model, gm, entry, caught = convert_block(after, **modules)
    assert (entry.folded_activation, entry.nonlinearity, entry.warned) == (None, False, True)
    assert entry.reason == f"it feeds {chain}, then an activation"
    assert caught == [f"BatchNorm2d 'bn' reaches the activation {act} through {chain}, which convert_norm_act cannot "
                      "prove passes its input through: converted with nonlinearity=False and the activation kept; if "
                      "it does pass its input through, convert a model without it or build the model with the "
                      "norm-act layer"]
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(gm(x), model(x))


@pytest.mark.parametrize("after", [
    lambda self, y, x: F.leaky_relu(y, x.mean()),  # fx records the slope as a keyword
    lambda self, y, x: F.softplus(y, x.mean() + 1),  # a builtin: fx records beta as the second positional argument
])
def test_an_activation_reading_another_graph_value_is_not_folded(after):
    """``leaky_relu(y, slope)`` or ``softplus(y, beta)`` with the parameter computed in the graph is not an
    activation of y alone."""
    model = Block(after)
    gm = convert.convert_norm_act(model.eval(), "evonorm_b0")
    (entry,) = gm.norm_act_report.entries
    assert (entry.folded_activation, entry.nonlinearity) == (None, False)
    assert entry.reason.startswith("its output goes to ") and entry.reason.endswith(", not an activation")
    assert not entry.warned  # not read as a gate either
    assert any(n.op == "call_function" and n.target in (F.leaky_relu, F.softplus) for n in gm.graph.nodes)


def test_describe_names_every_kind_of_node():
    graph = fx.Graph()
    x = graph.placeholder("x")
    partial = graph.create_node("call_function", functools.partial(torch.add, other=1), (x,), name="partial")
    method = graph.call_method("view", (partial, -1))
    out = graph.output(method)
    assert convert._describe(partial, {}) == str(partial.target)  # a callable without __name__
    assert [convert._describe(n, {}) for n in (method, out, x)] == [".view()", "the model's output", "placeholder x"]
    in_place = [graph.call_function(op, (x, x)) for op in (operator.iand, operator.imatmul)]
    assert [convert._describe(n, {}) for n in in_place] == ["and (in place)", "matmul (in place)"]


def test_timm_norm_act_keeps_its_drop_and_an_act_it_cannot_fold_in_order():
    """timm's BatchNormAct2d with a drop and a Softplus act: the drop and the act now follow the layer, in
    that order, and take over every use (train mode: the dropout's draws and the act's order both show)."""
    timm_layers = pytest.importorskip("timm.layers")
    model = nn.Sequential(nn.Conv2d(3, 4, 1), timm_layers.BatchNormAct2d(4, act_layer=nn.Softplus,
                                                                          drop_layer=lambda: nn.Dropout(0.5)))
    with pytest.warns(ConversionWarning, match="own act Softplus is not an activation"):
        gm = convert.convert_norm_act(model, lambda channels, nonlinearity: nn.BatchNorm2d(channels))
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["0", "1", "1_drop", "1_act"]
    (entry,) = gm.norm_act_report.entries
    assert (entry.nonlinearity, entry.reason) == (False, "its own act Softplus is kept after it")
    x = torch.randn(2, 3, 5, 5)
    torch.manual_seed(0)
    want = model(x)
    torch.manual_seed(0)
    torch.testing.assert_close(gm(x), want)


@pytest.mark.parametrize("option", ["eps", "groups", "momentum", "nonlinearity"])
def test_swap_timm_evonorms_refuses_what_it_takes_from_each_layer(option):
    timm_layers = pytest.importorskip("timm.layers")
    with pytest.raises(ValueError, match=rf"takes \['{option}'\] from each timm layer"):
        convert.swap_timm_evonorms(nn.Sequential(timm_layers.EvoNorm2dB0(8)), **{option: 1})


def test_swap_timm_evonorms_reports_logs_and_warns_at_the_caller(caplog):
    timm_layers = pytest.importorskip("timm.layers")
    model = nn.Sequential(timm_layers.EvoNorm2dB0(8), timm_layers.EvoNorm2dS0a(8, group_size=4, apply_act=False))
    caplog.set_level("INFO", logger=convert.logger.name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new = convert.swap_timm_evonorms(model)
    report = new.norm_act_report
    swapped_why = "timm's EvoNorm2dB0(eps=0.001, momentum=0.1) swapped for evonorm_b0 with the same configuration"
    assert report.entries == [ConvertedNorm("0", None, "EvoNorm2dB0", swapped_why, carried=True, nonlinearity=True,
                                            family="EvoNorm")]
    (kept,) = report.kept
    assert (kept.name, kept.source) == ("1", "EvoNorm2dS0a") and kept.reason.endswith("no equivalent, left as it is")
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut's trampoline adds a frame between caller and function
        assert [w.filename for w in caught] == [__file__]  # stacklevel: the warning points at the caller
    assert [str(w.message) for w in caught] == report.warnings == [f"'1': {kept.reason}"]
    assert str(report) in caplog.messages


def test_nothing_to_convert_names_the_norm_layers_it_found():
    with pytest.raises(ValueError, match="; it has no normalization layer$"):
        convert.convert_norm_act(nn.Sequential(nn.Conv2d(3, 4, 1)), "evonorm_b0")
    with pytest.raises(ValueError, match="; its normalization layers are GroupNorm x2, LayerNorm x1, which it does "
                                         "not replace$"):
        convert.convert_norm_act(nn.Sequential(nn.GroupNorm(2, 4), nn.GroupNorm(1, 4), nn.LayerNorm(4)), "evonorm_b0")


def test_report_text():
    report = ConversionReport(
        "evonorm_b0",
        [ConvertedNorm("a", "relu", reason="r1"), ConvertedNorm("b", None, reason="r2", warned=True),
         ConvertedNorm("c", None, "EvoNorm2dB0", "r3", carried=True, nonlinearity=True, family="EvoNorm")],
        [KeptNorm("d", "EvoNorm2dS0a", "r4"), KeptNorm("e", "EvoNorm2dS1", "r5")],
        ["w1", "w2"],
    )
    assert str(report) == (
        "converted 3 norm layers to evonorm_b0: 1 with their activation folded in (relu x1), 1 with "
        "nonlinearity=False; 1 timm EvoNorm layers swapped with their parameters and statistics (EvoNorm2dB0 x1), "
        "0 of them with nonlinearity=False; 2 left as they were (EvoNorm2dS0a x1, EvoNorm2dS1 x1); 2 warning(s), "
        "see .warnings")
    assert report.details().splitlines() == [
        str(report),
        "  a (BatchNorm2d): activation relu folded in: r1",
        "  b (BatchNorm2d): nonlinearity=False [WARNING]: r2",
        "  c (EvoNorm2dB0): nonlinearity=True: r3",
        "  d (EvoNorm2dS0a): left as it was [WARNING]: r4",
        "  e (EvoNorm2dS1): left as it was [WARNING]: r5",
    ]


def test_refusals_name_every_layer_and_what_is_accepted():
    with pytest.raises(ValueError, match=r"^convert_norm_act cannot convert 2 BatchNorm layer\(s\): '0' is a BatchNorm1d"
                                         r".* is converted; '1' is a BatchNorm3d"):
        convert.convert_norm_act(nn.Sequential(nn.BatchNorm1d(4), nn.BatchNorm3d(4)), "evonorm_b0")
    with pytest.raises(ValueError, match=r"^convert_norm_act found nothing to convert in Sequential: no BatchNorm2d, "
                                         r"SyncBatchNorm, timm's BatchNormAct2d/SyncBatchNormAct/GroupNormAct/"
                                         r"GroupNorm1Act or EvoNorms; "):
        convert.convert_norm_act(nn.Sequential(nn.Conv2d(3, 4, 1)), "evonorm_b0")


def test_norms_inside_a_module_fx_keeps_whole_are_kept_reported_and_warned(caplog):
    """A BatchNorm inside a module timm registers as not traceable is never a call of the graph: it stays,
    listed in the report's kept layers with the module that holds it, with a warning; a BatchNorm that the
    forward never calls is neither converted nor kept."""
    timm_layers = pytest.importorskip("timm.layers")

    @timm_layers.register_notrace_module
    class Opaque(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(x)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU(), Opaque())
            self.unused = nn.BatchNorm2d(4)

        def forward(self, x):
            return self.body(x)

    caplog.set_level("INFO", logger=convert.logger.name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = convert.convert_norm_act(Model(), "evonorm_b0")
    report = gm.norm_act_report
    why = "inside 'body.3' (Opaque), which torch.fx keeps as one call (timm registers it as not traceable): not converted"
    assert report.kept == [KeptNorm("body.3.bn", "BatchNorm2d", why)]
    assert [str(w.message) for w in caught] == report.warnings == [f"BatchNorm2d 'body.3.bn' is {why}"]
    assert [e.name for e in report.entries] == ["body.1"] and isinstance(gm.get_submodule("body.3.bn"), nn.BatchNorm2d)
    assert caplog.messages == [str(report)]
    assert str(report).endswith("; 1 left as they were (BatchNorm2d x1); 1 warning(s), see .warnings")


def test_timm_evonorms_in_convert_norm_act_are_swapped_or_kept_and_reported():
    timm_layers = pytest.importorskip("timm.layers")
    model = nn.Sequential(nn.Conv2d(3, 8, 1), timm_layers.EvoNorm2dS0(8, group_size=4),
                          timm_layers.EvoNorm2dS0a(8, group_size=4, apply_act=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = convert.convert_norm_act(model, "evonorm_s0", dtype=torch.float64)
    report = gm.norm_act_report
    swapped_why = "timm's EvoNorm2dS0(groups=2 (4 channels each), eps=1e-05) swapped for evonorm_s0 with the same configuration"
    assert report.entries == [ConvertedNorm("1", None, "EvoNorm2dS0", swapped_why, carried=True, nonlinearity=True,
                                            family="EvoNorm")]
    assert gm.get_submodule("1").weight.dtype == torch.float64  # the options reach the swapped layer
    (kept,) = report.kept
    assert (kept.name, kept.source) == ("2", "EvoNorm2dS0a") and kept.reason.endswith("no equivalent, left as it is")
    assert [str(w.message) for w in caught] == report.warnings == [f"'2': {kept.reason}"]
    assert isinstance(gm.get_submodule("2"), timm_layers.EvoNorm2dS0a)
    assert type(gm).__name__ == "Sequential"  # the GraphModule keeps the model's class name


def test_an_unused_output_and_a_gate_are_not_folded_and_say_why():
    """Nothing reads the norm's output (through two pass-throughs); a gate (sigmoid) reads it: no fold,
    each with its reason, the gate with a warning."""
    model, gm, entry, caught = convert_block(lambda self, y, x: (self.d2(self.d1(y)), x)[1],
                                             d1=nn.Dropout(0.1), d2=nn.Identity())
    assert (entry.folded_activation, entry.nonlinearity, caught) == (None, False, [])
    assert entry.reason == "its output is not used through 'd1' (Dropout), 'd2' (Identity) (passing its input through)"
    model, gm, entry, caught = convert_block(lambda self, y, x: self.gate(self.d1(y)), d1=nn.Dropout(0.1),
                                             gate=nn.Sigmoid())
    through = " through 'd1' (Dropout) (passing its input through)"
    assert (entry.folded_activation, entry.nonlinearity, entry.warned) == (None, False, True)
    assert entry.reason == f"it feeds 'gate' (Sigmoid){through}, a gate"
    assert caught == [f"BatchNorm2d 'bn' feeds 'gate' (Sigmoid){through}, an activation that a norm-act layer does "
                      "not replace: converted with nonlinearity=False and the activation kept after it"]
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(gm(x), model(x))


@pytest.mark.parametrize("after,act", [
    (lambda self, y, x: self.act(y) + self.conv2(y), "'act' (ReLU)"),
    (lambda self, y, x: torch.sigmoid(y) * self.conv2(y), "sigmoid"),  # a gate counts as an activation here too
])
def test_an_output_with_several_consumers_is_not_folded_and_says_why(after, act):
    model, gm, entry, caught = convert_block(after, act=nn.ReLU(), conv2=nn.Conv2d(4, 4, 1))
    consumers = f"{act}, 'conv2' (Conv2d)"
    assert (entry.folded_activation, entry.nonlinearity, entry.warned) == (None, False, True)
    assert entry.reason == f"its output has 2 consumers ({consumers})"
    assert caught == [f"BatchNorm2d 'bn' feeds the activation {act} and 1 other consumer(s) ({consumers}): an "
                      "activation applied to only some uses cannot be folded; converted with nonlinearity=False and the "
                      "activation kept"]
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(gm(x), model(x))


def test_an_output_with_several_consumers_none_an_activation():
    model, gm, entry, caught = convert_block(lambda self, y, x: self.conv2(y) + self.conv3(y),
                                             conv2=nn.Conv2d(4, 4, 1), conv3=nn.Conv2d(4, 4, 1))
    assert (entry.reason, entry.warned, caught) == (
        "its output has 2 consumers ('conv2' (Conv2d), 'conv3' (Conv2d)), none an activation", False, [])
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(gm(x), model(x))


def add_into(self, y, x):
    y += self.conv2(x)
    return y


def add_into_activation(self, y, x):
    out = self.drop(self.act(y))
    out += self.conv2(x)
    return out


def test_an_augmented_assignment_stays_in_place():
    """``y += ...`` is recorded as ``operator.iadd`` into the norm's output (fx's own proxy makes ``y = y + ...``)."""
    model, gm, entry, caught = convert_block(add_into, conv2=nn.Conv2d(3, 4, 1))
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert (node.target, node.args[0].target) == (operator.iadd, "bn")
    assert "bn += conv2" in gm.code
    assert entry.reason == "its output goes to add (in place), not an activation"
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(gm(x), model(x))


@pytest.mark.parametrize("training", [False, True])
def test_an_augmented_assignment_into_a_folded_activation_makes_a_new_tensor(training):
    """The model's SiLU (which keeps its input for backward) is folded into a BN-ReLU layer, whose ReLU keeps
    its output: adding into that output in place would fail in backward, so the addition returns a new tensor,
    also through a dropout (in eval mode it returns its input itself)."""
    model = Block(add_into_activation)
    model.add_module("act", nn.SiLU())
    model.add_module("drop", nn.Dropout(0.1))
    model.add_module("conv2", nn.Conv2d(3, 4, 1))
    gm = evonorm_core.convert_norm_act(model.train(training), "bn_relu")
    (entry,) = gm.norm_act_report.entries
    assert (entry.folded_activation, entry.nonlinearity) == ("silu", True)
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert (node.target, node.args[0].target) == (operator.add, "drop")
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    gm(x).sum().backward()
    assert x.grad is not None


class AddIntoNorm(nn.Module):
    """``out = bn(h); out += 1``, with ``h`` read again afterwards (``reads_h``) or the model's input itself."""

    def __init__(self, reads_h: bool):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1) if reads_h else nn.Identity()
        self.bn = nn.BatchNorm2d(3)
        self.reads_h = reads_h

    def forward(self, x):
        h = self.conv(x) if self.reads_h else x
        out = self.bn(h)
        out += 1
        return out + h if self.reads_h else out


@pytest.mark.parametrize("reads_h", [True, False])
def test_an_augmented_assignment_into_a_layer_whose_input_is_read_elsewhere_makes_a_new_tensor(reads_h):
    """An identity layer (no normalization, no affine) returns its input itself: adding into its output in
    place would change a value read again later, or the caller's input."""
    gm = evonorm_core.convert_norm_act(AddIntoNorm(reads_h), "no_norm_relu", affine=False)
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in (operator.add, operator.iadd)
               and n.args[1] == 1]
    assert node.target is operator.add
    x = torch.randn(2, 3, 4, 4)
    given = x.clone()
    expected = (gm.conv(x) + 1) + gm.conv(x) if reads_h else x + 1
    torch.testing.assert_close(gm(x), expected)
    torch.testing.assert_close(x, given)


class PlainScale(nn.Module):
    """A third-party norm-act layer: no device/dtype arguments, one option of its own."""

    uses_batch_statistics = True

    def __init__(self, num_channels, nonlinearity=True, scale=1.0):
        super().__init__()
        self.num_channels, self.nonlinearity, self.scale = num_channels, nonlinearity, scale
        self.weight = nn.Parameter(torch.ones(num_channels))

    def forward(self, x):
        return x * self.weight.view(1, -1, 1, 1) * self.scale


def test_a_registered_layer_without_device_and_dtype_is_built_with_the_options_then_moved(scratch_registry):
    evonorm_core.register_norm_act("test_plain_scale")(PlainScale)
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4))
    gm = convert.convert_norm_act(model.double(), "test_plain_scale", scale=2.0)
    first, second = gm.get_submodule("1"), gm.get_submodule("4")
    assert (type(first), first.num_channels, first.nonlinearity, first.scale) == (PlainScale, 8, True, 2.0)
    assert (second.num_channels, second.nonlinearity, second.scale) == (4, False, 2.0)
    assert first.weight.dtype == torch.float64  # moved to its BatchNorm's dtype after building


def test_a_sync_batchnorm_with_the_callers_sync_option_or_a_layer_that_cannot_sync(scratch_registry):
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.SyncBatchNorm(8), nn.ReLU())
    assert convert.convert_norm_act(model, "evonorm_b0", sync=False).get_submodule("1").sync is False  # the caller's
    evonorm_core.register_norm_act("test_plain_scale")(PlainScale)
    with pytest.raises(ValueError, match=r"^convert_norm_act cannot convert '1': it is a SyncBatchNorm and "
                                         r"test_plain_scale uses batch statistics without a sync option; convert the "
                                         r"model before nn\.SyncBatchNorm\.convert_sync_batchnorm, or pass a registered "
                                         r"layer name \(its sync=True is set\)$"):
        convert.convert_norm_act(model, "test_plain_scale")


@pytest.mark.parametrize("build,entry", [
    (lambda L: L.BatchNormAct2d(4, act_layer=nn.ReLU, drop_layer=lambda: nn.Dropout(0.5)),
     ConvertedNorm("1", "relu", "BatchNormAct2d", "its own act (ReLU) folded in (its drop Dropout now follows the layer)",
                   family="BatchNorm")),
    (lambda L: L.GroupNormAct(4, 2, act_layer=nn.SiLU),
     ConvertedNorm("1", "silu", "GroupNormAct", "its own act (SiLU) folded in", family="GroupNorm")),
    (lambda L: nn.Sequential(L.BatchNormAct2d(4, apply_act=False), nn.ReLU()),
     ConvertedNorm("1.0", "relu", "BatchNormAct2d", "its act is Identity (apply_act=False); relu '1.1' (ReLU) follows it",
                   family="BatchNorm")),
    (lambda L: nn.Sequential(nn.BatchNorm2d(4), L.DropPath(0.1), nn.ReLU()),  # DropPath stays one call: a pass-through
     ConvertedNorm("1.0", "relu", "BatchNorm2d", "relu '1.2' (ReLU) follows it through '1.1' (DropPath) (passing its "
                   "input through)", family="BatchNorm")),
])
def test_timm_norm_acts_are_reported_with_their_own_act_and_family(build, entry):
    model = nn.Sequential(nn.Conv2d(3, 4, 1), build(pytest.importorskip("timm.layers"))).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gm = convert.convert_norm_act(model, "evonorm_s0", groups=2)
    assert gm.norm_act_report.entries == [entry] and not caught
    assert gm.get_submodule(entry.name).num_channels == 4


def test_a_norm_acts_own_act_it_cannot_fold_is_kept_with_a_warning_naming_it():
    L = pytest.importorskip("timm.layers")
    model = nn.Sequential(nn.Conv2d(3, 4, 1), L.BatchNormAct2d(4, act_layer=nn.Softplus))
    with pytest.warns(ConversionWarning) as caught:
        convert.convert_norm_act(model, lambda channels, nonlinearity: nn.BatchNorm2d(channels))
    assert [str(w.message) for w in caught] == [
        "BatchNormAct2d '1''s own act Softplus is not an activation that a norm-act layer replaces: converted with "
        "nonlinearity=False and '1_act' kept after it"]


def test_a_sync_batchnorm_with_a_maker_that_declares_no_batch_statistics_converts():
    def maker(channels, nonlinearity):
        return evonorm_core.build_norm_act("evonorm_s0", channels, nonlinearity, groups=2)

    maker.uses_batch_statistics = False
    gm = convert.convert_norm_act(nn.Sequential(nn.Conv2d(3, 4, 1), nn.SyncBatchNorm(4), nn.ReLU()), maker)
    assert gm.norm_act_report.entries[0].nonlinearity is True


def test_options_with_a_maker_are_refused_before_anything_is_traced():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU())
    with pytest.raises(ValueError, match=r"^options \['groups'\] can only be given with a layer name, not a callable$"):
        convert.convert_norm_act(model, lambda channels, nonlinearity: nn.BatchNorm2d(channels), groups=2)
