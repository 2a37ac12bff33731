"""evonorm_core.classifiers: classifier and anchor architectures: shapes, parameter counts, norm-act slots."""
import pytest
import torch
import torchvision
from torch import nn
from torchvision.models._utils import _make_divisible
from torchvision.ops import StochasticDepth

from evonorm_core import list_norm_acts
from evonorm_core.classifiers.anchors import ANCHOR_NAMES, build_anchor
from evonorm_core.classifiers.blocks import StridePlan, make_divisible
from evonorm_core.classifiers.mbconv import EFFICIENTNET_SCALING, efficientnet_config
from evonorm_core.classifiers.models import MODEL_NAMES, MODEL_RESOLUTIONS, build_model
from evonorm_core.classifiers.resnet import PreActBottleneck
from evonorm_core.layers import EvoNormB0
from evonorm_core.search import genome_norm_act, parse

from . import paper_reference as ref

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
    torch.manual_seed(0)
    model = build_anchor(anchor, genome_norm_act(parse("tanh(x)")), depth_multiplier=0.01)
    depthwise = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups == m.in_channels > 1]
    big = [m for m in depthwise if m.weight.numel() >= 900]
    assert big and all(m.weight.std().item() == pytest.approx((2 / m.weight[0, 0].numel()) ** 0.5, rel=0.1) for m in big)
    with torch.no_grad():
        features = model.head(model.blocks(model.stem(torch.randn(16, 3, 8, 8))))
    assert features.std().item() > 1e-3  # before the fix: about 5e-7 on MobileNetV2-CIFAR


def test_resnet_strides_stem_and_stage_widths():
    """He et al.'s ResNet-50 layout in its v2 form (TensorFlow's official ``_bottleneck_block_v2``): a 7x7/2
    stem convolution and a 3x3/2 max-pool, then stages of 256, 512, 1024, 2048 output channels whose first
    block downsamples in its 3x3 convolution and its projection shortcut (the 1x1s keep stride 1), so a
    64x64 image ends at 2x2 (a 32x reduction)."""
    model = build_model("resnet50", "bn_relu")
    stem_conv, pool = model.stem
    assert (stem_conv.kernel_size, stem_conv.stride, stem_conv.padding) == ((7, 7), (2, 2), (3, 3))
    assert stem_conv.out_channels == 64
    assert (pool.kernel_size, pool.stride, pool.padding) == (3, 2, 1)
    blocks = [b for b in model.blocks if isinstance(b, PreActBottleneck)]
    firsts = {0: 0, 3: 1, 7: 2, 13: 3}  # block index -> stage of the stages' first blocks (3, 4, 6, 3)
    for index, block in enumerate(blocks):
        stride = 2 if index in firsts and index > 0 else 1
        assert (block.conv1.stride, block.conv2.stride, block.conv3.stride) == ((1, 1), (stride, stride), (1, 1)), index
        assert block.conv2.kernel_size == (3, 3) and block.conv2.padding == (1, 1)
        if index in firsts:
            assert block.shortcut is not None and block.shortcut.stride == (stride, stride)
            assert block.conv3.out_channels == (256, 512, 1024, 2048)[firsts[index]]
        else:
            assert block.shortcut is None
    features = {}
    model.final_norm_act.register_forward_hook(lambda m, i, o: features.setdefault("x", o))
    model.eval()(torch.randn(1, 3, 64, 64))
    assert features["x"].shape == (1, 2048, 2, 2) and model.fc.in_features == 2048


def test_resnet_norm_act_slots_precede_each_convolution():
    """v2 ordering: each block asks for norm-act(in) before conv1, then norm-act(width) before conv2 and
    conv3, and one final norm-act(2048) follows the last block (no slot in the stem)."""
    recorder = SlotRecorder()
    build_model("resnet50", recorder)
    expected, channels = [], 64
    for width, depth in zip((64, 128, 256, 512), (3, 4, 6, 3)):
        for _ in range(depth):
            expected += [(channels, True), (width, True), (width, True)]
            channels = 4 * width
    assert recorder.calls == expected + [(2048, True)]


def test_convolutions_start_he_normal_fan_out_and_the_classifier_small():
    """He et al. (2015) normal init with fan-out ``k*k*C_out`` (as torchvision's ResNets): std sqrt(2 / fan_out)
    for every convolution, N(0, 0.01) for the classifier, zero biases."""
    torch.manual_seed(0)
    model = build_model("resnet50", "bn_relu", num_classes=100)
    wide = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.weight.numel() >= 200_000]
    assert wide
    for conv in wide:
        fan_out = conv.out_channels * conv.kernel_size[0] * conv.kernel_size[1]
        assert conv.weight.std().item() == pytest.approx((2 / fan_out) ** 0.5, rel=0.02)
        assert abs(conv.weight.mean().item()) < 0.1 * (2 / fan_out) ** 0.5
    assert model.fc.weight.std().item() == pytest.approx(0.01, rel=0.05)
    assert torch.equal(model.fc.bias, torch.zeros(100))


def test_make_divisible_rounds_as_torchvision():
    """MobileNetV2's ``_make_divisible`` (torchvision's copy of the TF code): nearest multiple of 8, at
    least 8, bumped up one step when rounding down lost more than 10%."""
    for value in [x / 4 for x in range(1, 4000)]:
        assert make_divisible(value) == _make_divisible(value, 8), value
    assert make_divisible(20, 16) == _make_divisible(20, 16) == 32


def test_stride_plan_skips_only_the_first_downsamplings():
    plan = StridePlan(2)
    assert [plan.next(s) for s in (1, 2, 1, 2, 1, 2, 2)] == [1, 1, 1, 1, 1, 2, 2]
    assert [StridePlan(0).next(s) for s in (2, 1)] == [2, 1]
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError, match="unstrided_downsamples must be a non-negative int"):
            StridePlan(bad)


def depthwise_convs(model):
    return [(m.kernel_size, m.stride) for m in model.modules()
            if isinstance(m, nn.Conv2d) and m.groups == m.in_channels == m.out_channels > 1]


@pytest.mark.parametrize("name, reference", [("mobilenetv2", "mobilenet_v2"), ("efficientnet_b0", "efficientnet_b0"),
                                             ("mnasnet_b1", "mnasnet1_0")])
def test_mbconv_kernels_strides_and_residuals_match_torchvision(name, reference):
    """Stage by stage as torchvision's models: each depthwise convolution's kernel and stride in order, and
    which blocks add their input back (stride 1 and equal channels)."""
    ours = build_model(name, "bn_relu")
    theirs = getattr(torchvision.models, reference)()
    assert depthwise_convs(ours) == depthwise_convs(theirs)
    if name != "mnasnet_b1":  # torchvision's MnasNet blocks name it apply_residual
        theirs_residual = [m.use_res_connect for m in theirs.modules() if hasattr(m, "use_res_connect")]
    else:
        theirs_residual = [m.apply_residual for m in theirs.modules() if hasattr(m, "apply_residual")]
    ours_residual = [m.use_residual for m in ours.blocks]
    if name == "mnasnet_b1":  # torchvision's first "SepConv" is not one of its _InvertedResidual blocks
        ours_residual = ours_residual[1:]
    assert ours_residual == theirs_residual


def test_efficientnet_stochastic_depth_and_dropout_as_torchvision():
    """EfficientNet-B0's drop-connect rate grows linearly to 0.2 over the blocks (block i of 16 drops
    0.2 * i / 16; only residual blocks have it) and its classifier dropout is 0.2; MobileNetV2's is 0.2."""
    ours = build_model("efficientnet_b0", "bn_swish1")
    theirs = torchvision.models.efficientnet_b0()
    rates = [m.p for m in theirs.modules() if isinstance(m, StochasticDepth)]
    theirs_residual = [m.use_res_connect for m in theirs.modules() if hasattr(m, "use_res_connect")]
    expected = [rate for rate, residual in zip(rates, theirs_residual) if residual and rate > 0]
    assert [m.p for m in ours.modules() if isinstance(m, StochasticDepth)] == pytest.approx(expected)
    assert ours.dropout.p == theirs.classifier[0].p == 0.2
    assert build_model("mobilenetv2").dropout.p == torchvision.models.mobilenet_v2().classifier[0].p


def test_efficientnet_scaling_is_the_official_table():
    """(width, depth, resolution, dropout) of B0-B7 from the official EfficientNet code (``efficientnet_params``);
    B5 trains at 456 (paper section 5.1) with dropout 0.4."""
    assert EFFICIENTNET_SCALING == {
        "b0": (1.0, 1.0, 224, 0.2), "b1": (1.0, 1.1, 240, 0.2), "b2": (1.1, 1.2, 260, 0.3), "b3": (1.2, 1.4, 300, 0.3),
        "b4": (1.4, 1.8, 380, 0.4), "b5": (1.6, 2.2, 456, 0.4), "b6": (1.8, 2.6, 528, 0.5), "b7": (2.0, 3.1, 600, 0.5)}
    config, width, depth, resolution = efficientnet_config("b5")
    assert (config.dropout, width, depth, resolution) == (0.4, 1.6, 2.2, MODEL_RESOLUTIONS["efficientnet_b5"])
    assert config.se_ratio == 0.25 and config.drop_path_rate == 0.2


def test_anchor_widths_are_the_papers_multipliers():
    """Section 4.2: ResNet50 at 0.25x, MobileNetV2 and EfficientNet-B0 at 0.5x channels. ResNet's stem is
    64/4 = 16 and its features 2048/4 = 512; the MBConv stems are 32/2 = 16; MobileNetV2 keeps its 1280-channel
    head below 1x, EfficientNet scales its head to 640."""
    resnet = build_anchor("resnet50_cifar", "bn_relu")
    assert resnet.stem[0].out_channels == 16 and resnet.num_features == 512
    mobilenet = build_anchor("mobilenetv2_cifar", "bn_relu")
    efficientnet = build_anchor("efficientnet_cifar", "bn_swish1")
    assert mobilenet.stem[0].out_channels == efficientnet.stem[0].out_channels == 16
    assert (mobilenet.num_features, efficientnet.num_features) == (1280, 640)
    stages = [(8, 1), (16, 2), (16, 3), (32, 4), (48, 3), (80, 3), (160, 1)]  # 16..320 x 0.5, to multiples of 8
    assert [b.body[-2].out_channels for b in mobilenet.blocks] == [c for c, n in stages for _ in range(n)]


def test_evonorm_b0_on_a_1x1_map_divides_a_negative_input_by_the_batch_std_alone():
    """Why EvoNorm-B0 diverges on 8 px images in MobileNetV2-CIFAR (docs/reliability.md): on a 1x1 map the
    instance variance is 0, so for x < 0 the denominator is sqrt(s2_bwh(x) + eps) alone, and B0, which does not
    subtract the batch mean, maps a channel with a large mean and a small spread to about |mean| / std."""
    layer = EvoNormB0(1, dtype=torch.float64).train()
    x = -5.0 + 0.01 * torch.randn(16, 1, 1, 1, dtype=torch.float64)
    params = {"gamma": layer.weight.detach(), "beta": layer.bias.detach(), "v1": layer.v1.detach()}
    y = layer(x)
    torch.testing.assert_close(y, ref.evonorm_b0(x, params, layer.eps, training=True))
    torch.testing.assert_close(y, x / torch.sqrt(ref.s2(x, ref.BATCH) + layer.eps))
    assert y.abs().min() > 100


@pytest.mark.parametrize("seed", [0, 1])
def test_evonorm_b0_blows_up_only_on_the_1x1_maps_of_mobilenetv2_cifar_at_8_px(seed):
    """At initialization, on 16 Gaussian 8 px images, the B0 layers on 1x1 maps give outputs 20x larger than on
    any larger map; at 16 px (smallest map 2x2) no layer does."""
    largest = {}
    for size in (8, 16):
        torch.manual_seed(seed)
        model = build_anchor("mobilenetv2_cifar", "evonorm_b0", 10).train()
        seen: dict[int, float] = {}
        for module in model.modules():
            if isinstance(module, EvoNormB0):
                module.register_forward_hook(lambda m, inputs, out: seen.__setitem__(
                    inputs[0].shape[-1], max(seen.get(inputs[0].shape[-1], 0.0), out.detach().abs().max().item())))
        with torch.no_grad():
            model(torch.randn(16, 3, size, size))
        largest[size] = seen
    assert set(largest[8]) == {1, 2, 4, 8} and min(largest[16]) == 2
    assert largest[8][1] > 20 * max(v for k, v in largest[8].items() if k > 1)
    assert max(largest[16].values()) < 2 * max(v for k, v in largest[8].items() if k > 1)
