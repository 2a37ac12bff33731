"""convert_norm_act over a matrix of timm and torchvision models, against the data flow observed at run time.

The reference for "this BatchNorm's output goes to an activation" is not the converter's graph
reading: the original model is run with hooks that record each norm's output tensor and each
activation module's input tensor (Identity, eval-mode dropout and drop-block return their input
itself, with the tensor's version counter telling in-place changes such as ``x += shortcut`` apart);
timm's norm-act modules carry their activation as ``act``. Every such position must
come back as a layer with its nonlinearity, every other one without, and no converted layer
without nonlinearity may feed an activation in the converted model (checked the same way).
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision import models

import evonorm_core
from evonorm_core.layers import NormAct2d

timm = pytest.importorskip("timm", reason="timm is not installed (pip install -e .[timm]); timm models are untested")
from timm.layers import BatchNormAct2d, DropBlock2d, DropPath, EvoNorm2dS0, GroupNormAct  # noqa: E402

ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.SiLU, nn.Hardswish, nn.GELU, nn.Mish)
NORMS = (nn.modules.batchnorm._BatchNorm, GroupNormAct)


def fed_activations(model, x, sources):
    """Names of the modules of type ``sources`` whose output tensor is the input of an activation module when
    ``model(x)`` runs in eval mode (outputs kept alive, so no later tensor reuses their memory)."""
    outputs, fed, handles = [], set(), []

    def record(module, args, out, name):
        outputs.append((out, out._version, name))

    def check(module, args):  # the same values: same memory and shape, not modified in place since (x += shortcut)
        x = args[0]
        fed.update(name for out, version, name in outputs
                   if (x.data_ptr(), x.shape, x._version) == (out.data_ptr(), out.shape, version))

    for name, module in model.named_modules():
        if isinstance(module, sources):
            handles.append(module.register_forward_hook(lambda m, a, o, name=name: record(m, a, o, name)))
        elif isinstance(module, ACTIVATIONS):
            handles.append(module.register_forward_pre_hook(check))
    was_training = model.training
    with torch.no_grad():
        model.eval()(x)
    model.train(was_training)
    for handle in handles:
        handle.remove()
    return fed


def normalizing_positions(model, x):
    """name -> whether that norm is followed by an activation: its own ``act`` (timm's norm-acts) or, seen at
    run time, an activation module taking its output."""
    fed = fed_activations(model, x, NORMS)
    return {name: (not isinstance(getattr(m, "act", nn.Identity()), nn.Identity)) or name in fed
            for name, m in model.named_modules() if isinstance(m, NORMS)}


def timm_model(name, **kwargs):
    return lambda: timm.create_model(name, **kwargs)


# (model, layer, number of norms, activations folded in): the counts pinned from a reading of each architecture
MATRIX = {
    "timm resnet50": (timm_model("resnet50"), "evonorm_s0", 53, {"relu": 33}),  # as torchvision's: bn2 -> drop_block -> act2
    "timm resnetv2_50": (timm_model("resnetv2_50"), "evonorm_b0", 49, {"relu": 49}),  # pre-activation: all with act
    "timm efficientnet_b0": (timm_model("efficientnet_b0"), "evonorm_s0", 49, {"silu": 33}),
    "timm mobilenetv3_large_100": (timm_model("mobilenetv3_large_100"), "evonorm_b0", 46, {"hardswish": 20, "relu": 11}),
    "timm regnetz_b16": (timm_model("regnetz_b16"), "evonorm_s0", 68, {"silu": 46}),
    "torchvision resnet50": (models.resnet50, "evonorm_b0", 53, {"relu": 33}),
    "torchvision mobilenet_v2": (models.mobilenet_v2, "evonorm_s0", 52, {"relu6": 35}),
    "torchvision efficientnet_b0": (models.efficientnet_b0, "evonorm_s0", 49, {"silu": 33}),
}


@pytest.mark.slow
@pytest.mark.parametrize("key", list(MATRIX))
def test_every_norm_is_replaced_and_every_activated_position_keeps_its_nonlinearity(key):
    build, layer, total, folded = MATRIX[key]
    torch.manual_seed(0)
    model = build().train()
    x = torch.randn(2, 3, 64, 64)  # at 32 px the last maps are 1x1, where EvoNorm-B0's instance variance is 0
    expected = normalizing_positions(model, x)
    assert len(expected) == total and sum(expected.values()) == sum(folded.values())
    gm = evonorm_core.convert_norm_act(model, layer)
    report = gm.norm_act_report
    assert {e.name: e.nonlinearity for e in report.entries} == expected
    assert dict(__import__("collections").Counter(e.folded_activation for e in report.folded)) == folded
    assert not report.warnings and not report.kept
    assert not any(isinstance(m, NORMS) for m in gm.modules())  # every BatchNorm (and timm norm-act) replaced
    for name, nonlinearity in expected.items():
        assert isinstance(gm.get_submodule(name), NormAct2d) and gm.get_submodule(name).nonlinearity is nonlinearity
    # no converted layer without nonlinearity (an EvoNorm's affine x * gamma + beta) feeds an activation
    assert fed_activations(gm, x, NormAct2d) == set()
    assert gm.training
    out = gm(x)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in gm.parameters() if p.grad is not None)


def test_timm_resnet50_bn2_reaches_its_relu_through_drop_block():
    """The case that lost 16 of 33 normalizations: every bottleneck's bn2 feeds drop_block (Identity), then act2."""
    gm = evonorm_core.convert_norm_act(timm.create_model("resnet50"), "evonorm_s0")
    entries = {e.name: e for e in gm.norm_act_report.entries}
    bn2 = [e for name, e in entries.items() if name.endswith(".bn2")]
    assert len(bn2) == 16 and all(e.folded_activation == "relu" for e in bn2)
    assert entries["layer1.0.bn2"].reason == (
        "relu 'layer1.0.act2' (ReLU) follows it through 'layer1.0.drop_block' (Identity) (passing its input through)")
    assert entries["layer1.0.bn3"].reason == "its output goes to add (in place), not an activation"  # x += shortcut
    assert "layer1.0.bn2 (BatchNorm2d): activation relu folded in: relu 'layer1.0.act2'" in gm.norm_act_report.details()
    calls = [n.target for n in gm.graph.nodes if n.op == "call_module" and n.target.startswith("layer1.0.")]
    assert calls.index("layer1.0.drop_block") == calls.index("layer1.0.bn2") + 1 and "layer1.0.act2" not in calls


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_drop_path_and_drop_block_stay_and_follow_the_mode(mode):
    """Converted in either mode, timm's DropPath and DropBlock2d and torchvision's StochasticDepth remain modules
    of the graph (a trace through them would fix their ``if self.training`` at conversion time): the converted
    model drops in training and is deterministic in eval, whatever mode it was converted in."""
    model = timm.create_model("resnet50", drop_block_rate=0.5, drop_path_rate=0.5).train(mode == "train")
    gm = evonorm_core.convert_norm_act(model, "evonorm_s0")
    kinds = {type(gm.get_submodule(n.target)) for n in gm.graph.nodes if n.op == "call_module"}
    assert {DropPath, DropBlock2d} <= kinds
    entries = {e.name: e for e in gm.norm_act_report.entries}
    assert "through 'layer4.0.drop_block' (DropBlock2d)" in entries["layer4.0.bn2"].reason
    x = torch.randn(2, 3, 64, 64)
    gm.eval()
    with torch.no_grad():
        torch.testing.assert_close(gm(x), gm(x))
        gm.train()
        assert not torch.allclose(gm(x), gm(x))
    tv = evonorm_core.convert_norm_act(models.efficientnet_b0().train(mode == "train"), "evonorm_s0")
    depth = [n for n in tv.graph.nodes if n.op == "call_module" and type(tv.get_submodule(n.target)).__name__ ==
             "StochasticDepth"]
    assert len(depth) == 9


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_timms_evonorm_model_gives_timms_outputs_after_the_swap(mode):
    """timm's resnetv2_50d_evos converted (and swapped keeping its class) computes timm's outputs in float64,
    with random layer parameters; forward and backward."""
    torch.manual_seed(0)
    model = timm.create_model("resnetv2_50d_evos").double().train(mode == "train")
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, EvoNorm2dS0):
                for p in module.parameters():
                    p.add_(torch.randn_like(p) * 0.2)
    gm = evonorm_core.convert_norm_act(model, "evonorm_s0")
    swapped = evonorm_core.swap_timm_evonorms(model)
    assert type(swapped) is type(model) and swapped.training is model.training
    count = sum(isinstance(m, EvoNorm2dS0) for m in model.modules())
    for converted in (gm, swapped):
        report = converted.norm_act_report
        assert len(report.carried) == count > 0 and all(e.nonlinearity for e in report.entries)
        assert not any(isinstance(m, EvoNorm2dS0) for m in converted.modules())
        assert all(type(m).__name__ == "EvoNormS0" and m.impl == "fused" for m in converted.modules()
                   if isinstance(m, NormAct2d))
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    xs = [x.clone().requires_grad_() for _ in range(3)]
    outs = [m(xi) for m, xi in zip((model, gm, swapped), xs)]
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=1e-5, atol=1e-6)  # timm's statistics are float32
    for out in outs:
        out.pow(2).sum().backward()
    for xi in xs[1:]:
        torch.testing.assert_close(xi.grad, xs[0].grad, rtol=1e-4, atol=1e-6)


def test_regnetz_evos_swaps_what_has_an_equivalent_and_names_the_rest():
    model = timm.create_model("regnetz_b16_evos").double()  # also ese_vovnet39b_evos: EvoNorm2dS0, all swapped
    with pytest.warns(evonorm_core.ConversionWarning) as caught:
        gm = evonorm_core.convert_norm_act(model, "evonorm_s0")
    report = gm.norm_act_report
    assert (len(report.carried), len(report.kept), len(report.warnings)) == (46, 22, 22)
    assert [str(w.message) for w in caught] == report.warnings
    assert report.warnings[0].startswith("'stages.0.0.conv3_1x1.bn': timm's EvoNorm2dS0a without v")
    assert all(k.source == "EvoNorm2dS0a" and "no equivalent" in k.reason for k in report.kept)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-6)


def test_a_model_without_batchnorm_is_told_so():
    with pytest.raises(ValueError, match=r"found nothing to convert in ConvNeXt: no BatchNorm2d.*its normalization "
                                         r"layers are LayerNorm2d x\d+, which it does not replace"):
        evonorm_core.convert_norm_act(timm.create_model("convnext_atto"), "evonorm_s0")
    with pytest.raises(ValueError, match="found nothing to convert in Sequential.*it has no normalization layer"):
        evonorm_core.convert_norm_act(nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU()), "evonorm_s0")


# --- what cannot be proved harmless is loud ---------------------------------------------------------------------

class Scale(nn.Module):
    def forward(self, x):
        return x * 2.0 - 1.0


def test_an_activation_behind_an_unknown_operation_is_a_warning_naming_it():
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), Scale(), nn.ReLU())
    with pytest.warns(evonorm_core.ConversionWarning, match=r"BatchNorm2d '1' reaches the activation '3' \(ReLU\) "
                                                            r"through mul, sub, which convert_norm_act cannot"):
        gm = evonorm_core.convert_norm_act(model, "evonorm_s0", groups=4)
    (entry,) = gm.norm_act_report.entries
    assert not entry.nonlinearity and entry.warned and isinstance(gm.get_submodule("3"), nn.ReLU)


def test_a_gate_after_a_batchnorm_is_a_warning():
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.Dropout(0.1), nn.Sigmoid())
    with pytest.warns(evonorm_core.ConversionWarning, match=r"'1' feeds '3' \(Sigmoid\) through '2' \(Dropout\) "
                                                            r"\(passing its input through\), an activation that a "
                                                            "norm-act layer does not replace"):
        gm = evonorm_core.convert_norm_act(model, "evonorm_s0", groups=4)
    assert not gm.norm_act_report.entries[0].nonlinearity


def test_timms_norm_acts_fold_their_own_act_and_keep_their_drop():
    """A BatchNormAct2d's own act is read: SiLU folded in, its drop layer kept after the new layer; an act that
    is a gate stays after the layer, with a warning; GroupNormAct and GroupNorm1Act convert the same way; an act
    of Identity (apply_act=False) leaves the data flow to decide (here a ReLU after an Identity)."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 1),
        BatchNormAct2d(8, act_layer=nn.SiLU, drop_layer=lambda: DropBlock2d(0.5, 3)),
        BatchNormAct2d(8, act_layer=nn.Sigmoid),
        GroupNormAct(8, num_groups=2, act_layer=nn.GELU),
        timm.layers.GroupNorm1Act(8, act_layer=nn.ReLU),
        BatchNormAct2d(8, apply_act=False), nn.Identity(), nn.ReLU(),
    )
    with pytest.warns(evonorm_core.ConversionWarning, match="BatchNormAct2d '2''s own act Sigmoid is not an activation"):
        gm = evonorm_core.convert_norm_act(model.eval(), "evonorm_s0", groups=2)
    entries = {e.name: e for e in gm.norm_act_report.entries}
    assert {n: (e.folded_activation, e.family) for n, e in entries.items()} == {
        "1": ("silu", "BatchNorm"), "2": (None, "BatchNorm"), "3": ("gelu", "GroupNorm"), "4": ("relu", "GroupNorm"),
        "5": ("relu", "BatchNorm")}
    assert entries["1"].reason == "its own act (SiLU) folded in (its drop DropBlock2d now follows the layer)"
    assert entries["5"].reason.startswith("its act is Identity (apply_act=False); relu '7' (ReLU) follows it through '6'")
    calls = [(n.target, type(gm.get_submodule(n.target)).__name__) for n in gm.graph.nodes if n.op == "call_module"]
    assert calls == [("0", "Conv2d"), ("1", "EvoNormS0"), ("1_drop", "DropBlock2d"), ("2", "EvoNormS0"),
                     ("2_act", "Sigmoid"), ("3", "EvoNormS0"), ("4", "EvoNormS0"), ("5", "EvoNormS0"), ("6", "Identity")]
    with torch.no_grad():  # biases below zero: a ReLU applied a second time would show
        for layer in gm.modules():
            if isinstance(layer, NormAct2d):
                layer.bias.uniform_(-2.0, -1.0)
    x = torch.randn(2, 3, 8, 8)
    by_hand = gm.get_submodule("1")(gm.get_submodule("0")(x))  # eval: the drop block is the identity
    by_hand = torch.sigmoid(gm.get_submodule("2")(by_hand))
    for name in ("3", "4", "5"):
        by_hand = gm.get_submodule(name)(by_hand)
    assert F.relu(by_hand).ne(by_hand).any()
    torch.testing.assert_close(gm(x), by_hand)


def test_timms_sync_norm_act_keeps_syncing_and_its_frozen_one_is_refused():
    """timm.layers.convert_sync_batchnorm makes SyncBatchNormAct (its act carried over): converted with the act
    folded in and sync=True on the same process group; freeze_batch_norm_2d makes FrozenBatchNormAct2d: refused."""
    model = nn.Sequential(nn.Conv2d(3, 8, 1), BatchNormAct2d(8, act_layer=nn.SiLU), nn.Conv2d(8, 8, 1),
                          BatchNormAct2d(8, apply_act=False))
    synced = timm.layers.convert_sync_batchnorm(model)
    assert type(synced[1]).__name__ == "SyncBatchNormAct"
    gm = evonorm_core.convert_norm_act(synced, "evonorm_b0")
    assert [(e.source, e.folded_activation) for e in gm.norm_act_report.entries] == [
        ("SyncBatchNormAct", "silu"), ("SyncBatchNormAct", None)]
    assert gm.get_submodule("1").sync and not gm.get_submodule("3").nonlinearity
    frozen = timm.layers.freeze_batch_norm_2d(model)
    with pytest.raises(ValueError, match="'1' is a frozen BatchNorm .*unfreeze_batch_norm_2d"):
        evonorm_core.convert_norm_act(frozen, "evonorm_b0")
