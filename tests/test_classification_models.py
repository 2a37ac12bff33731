"""Classifier and anchor architectures: shapes, parameter counts, norm-act slots."""
import pytest
import torch
import torchvision
from torch import nn

from classification.anchors import ANCHOR_NAMES, build_anchor
from classification.models import MODEL_NAMES, build_model
from evonorm_core import list_norm_acts


# These models see tiny batches: a second intra-op thread only adds contention.
pytestmark = pytest.mark.usefixtures("one_thread")


def num_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def conv_linear_params(module: nn.Module) -> int:
    return sum(num_params(m) for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))


@pytest.mark.parametrize(
    "name, reference",
    [("mobilenetv2", "mobilenet_v2"), ("mnasnet_b1", "mnasnet1_0"), ("efficientnet_b0", "efficientnet_b0")],
)
def test_mbconv_param_counts_match_torchvision(name, reference):
    ours = build_model(name, "bn_relu")
    theirs = getattr(torchvision.models, reference)()
    assert num_params(ours) == num_params(theirs)


@pytest.mark.slow
def test_efficientnet_b5_param_count_matches_torchvision():
    assert num_params(build_model("efficientnet_b5", "bn_swish1")) == num_params(torchvision.models.efficientnet_b5())


@pytest.mark.parametrize("depth", [50, 101])
def test_preact_resnet_matches_torchvision_up_to_norm_placement(depth):
    """torchvision's ResNets are v1: identical convolutions and classifier, different BNs.

    v2 drops the stem BN and the shortcut BNs, normalizes each block's *input* instead of
    its output, and adds one final BN; each BN-ReLU carries 2 parameters per channel.
    """
    ours = build_model(f"resnet{depth}", "bn_relu")
    theirs = getattr(torchvision.models, f"resnet{depth}")()
    assert conv_linear_params(ours) == conv_linear_params(theirs)
    norm_channels = sum(m.num_channels for m in ours.modules() if hasattr(m, "num_channels"))
    assert num_params(ours) == conv_linear_params(ours) + 2 * norm_channels
    assert num_params(ours) == {50: 25_549_352, 101: 44_541_480}[depth]


def test_projection_shortcut_reads_the_pre_activated_input():
    """ResNet v2 as TensorFlow's official ``_bottleneck_block_v2`` ("the projection shortcut should come
    after the first batch norm and ReLU") and timm's ``PreActBottleneck``: where the shape changes, the
    shortcut convolution gets norm-act(x), not x."""
    model = build_model("resnet50", "bn_relu", width_multiplier=0.25)
    projected = [block for block in model.blocks if block.shortcut is not None]
    seen = {"preact": [], "read": []}
    for block in projected:
        block.preact.register_forward_hook(lambda m, args, out: seen["preact"].append(out))
        block.shortcut.register_forward_pre_hook(lambda m, args: seen["read"].append(args[0]))
    model(torch.randn(2, 3, 32, 32))
    assert len(projected) == len(seen["read"]) == 4  # the first block of each stage
    assert all(torch.equal(read, preact) for read, preact in zip(seen["read"], seen["preact"]))


class SlotRecorder:
    """A norm-act spec that records every (channels, nonlinearity) it is asked for."""

    def __init__(self):
        self.calls = []

    def __call__(self, num_channels, nonlinearity=True):
        self.calls.append((num_channels, nonlinearity))
        return nn.Identity()


def test_resnet_has_only_activated_slots_and_mbconv_has_linear_projections():
    resnet, mobilenet = SlotRecorder(), SlotRecorder()
    build_model("resnet50", resnet)
    build_model("mobilenetv2", mobilenet)
    assert len(resnet.calls) == 16 * 3 + 1 and all(nl for _, nl in resnet.calls)
    linear = [c for c, nl in mobilenet.calls if not nl]
    assert linear == [16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160, 320]
    assert len(mobilenet.calls) == 2 + 17 * 3 - 1  # stem + head, 3 per block minus the t=1 expansion


@pytest.mark.parametrize("width, channels", [(0.9, 1280), (1.0, 1280), (1.1, 1408)])
def test_mobilenetv2_width_multipliers(width, channels):
    model = build_model("mobilenetv2", "bn_relu", width_multiplier=width)
    assert model.num_features == channels
    reference = torchvision.models.mobilenet_v2(width_mult=width)
    assert num_params(model) == num_params(reference)


@pytest.mark.parametrize("anchor", ANCHOR_NAMES)
def test_anchor_keeps_depth_and_unstrides_the_first_two_downsamplings(anchor):
    model = build_anchor(anchor, "bn_relu").eval()
    features = {}
    last = model.final_norm_act if anchor.startswith("resnet") else model.head
    last.register_forward_hook(lambda m, i, o: features.setdefault("x", o))
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    # ImageNet models reduce 32x; with two downsamplings at stride 1 the anchors reduce 8x
    assert features["x"].shape[-1] == 4
    imagenet = {"resnet50_cifar": "resnet50", "mobilenetv2_cifar": "mobilenetv2",
                "efficientnet_cifar": "efficientnet_b0"}[anchor]
    convs = lambda m: sum(isinstance(x, nn.Conv2d) for x in m.modules())  # noqa: E731
    assert convs(model) == convs(build_model(imagenet))


@pytest.mark.parametrize("layer", list_norm_acts())
def test_every_layer_builds_every_anchor(layer):
    x = torch.randn(2, 3, 8, 8)
    for anchor in ANCHOR_NAMES:
        out = build_anchor(anchor, layer)(x)
        assert out.shape == (2, 10) and torch.isfinite(out).all(), (layer, anchor)


@pytest.mark.parametrize("model_name", MODEL_NAMES)
def test_every_model_takes_a_layer_name_and_runs(model_name):
    model = build_model(model_name, "evonorm_s0", num_classes=7)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 7)


def test_bad_names_raise_clear_errors():
    with pytest.raises(ValueError, match="accepted: resnet50_cifar"):
        build_anchor("vgg_cifar", "bn_relu")
    with pytest.raises(ValueError, match="accepted: resnet50"):
        build_model("resnet18")
    with pytest.raises(ValueError, match="valid names"):
        build_anchor("resnet50_cifar", "batchnorm_tanh")


def test_anchor_depth_multiplier_keeps_one_block_per_stage():
    from classification.resnet import PreActBottleneck

    def blocks(model):
        return sum(isinstance(m, PreActBottleneck) for m in model.modules())

    assert blocks(build_anchor("resnet50_cifar", "bn_relu")) == 16
    assert blocks(build_anchor("resnet50_cifar", "bn_relu", depth_multiplier=0.01)) == 4
    shallow = build_anchor("mobilenetv2_cifar", "evonorm_s0", depth_multiplier=0.01)
    full = build_anchor("mobilenetv2_cifar", "evonorm_s0")
    assert sum(p.numel() for p in shallow.parameters()) < sum(p.numel() for p in full.parameters())
    assert shallow(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    with pytest.raises(ValueError, match="depth_multiplier must be positive, got 0"):
        build_anchor("resnet50_cifar", "bn_relu", depth_multiplier=0)


@pytest.mark.parametrize("anchor", ["mobilenetv2_cifar", "efficientnet_cifar"])
def test_depthwise_init_keeps_the_signal_without_normalization(anchor):
    """He fan-out per group: a depthwise k x k starts with std sqrt(2 / k^2), not sqrt(2 / k^2 C),
    so an unnormalized layer (tanh) still carries signal to the head."""
    from evonorm_core.search import genome_norm_act, parse

    torch.manual_seed(0)
    model = build_anchor(anchor, genome_norm_act(parse("tanh(x)")), depth_multiplier=0.01)
    depthwise = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups == m.in_channels > 1]
    big = [m for m in depthwise if m.weight.numel() >= 900]
    assert big and all(m.weight.std().item() == pytest.approx((2 / m.weight[0, 0].numel()) ** 0.5, rel=0.1) for m in big)
    with torch.no_grad():
        features = model.head(model.blocks(model.stem(torch.randn(16, 3, 8, 8))))
    assert features.std().item() > 1e-3  # before the fix: about 5e-7 on MobileNetV2-CIFAR
