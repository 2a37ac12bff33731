"""BigGAN-deep shapes, norm swapping and the class-conditional norm-act against float64 formulas."""
import pytest
import torch
from torch import nn

from evonorm_core import build_norm_act, list_norm_acts
from evonorm_core.layers import BatchNormAct2d
from gan.biggan_deep import Discriminator, GBlock, Generator, GeneratorSpec
from gan.conditional import ConditionalNormAct2d
from gan.layers import SelfAttention

EPS = 1e-5


def tiny_generator(norm="evonorm_s0", resolution=32, channels=16, depth=2, **options):
    spec = GeneratorSpec(resolution=resolution, channels=channels, num_classes=10, dim_z=8, shared_dim=8, depth=depth)
    return Generator(spec, norm, **options)


@pytest.mark.parametrize("resolution", [32, 64, 128])
def test_generator_and_discriminator_shapes(resolution):
    generator = tiny_generator(resolution=resolution, channels=4)
    discriminator = Discriminator(resolution, channels=4, num_classes=10)
    z, y = torch.randn(2, 8), torch.tensor([3, 7])
    images = generator(z, y)
    assert images.shape == (2, 3, resolution, resolution)
    assert images.abs().max() <= 1
    assert discriminator(images, y).shape == (2, 1)
    # self-attention on 64x64 feature maps only (G_attn = D_attn = 64): G's 64x64 stage
    # exists at 64 and 128, D's (the output of its first stage) only at 128
    assert sum(isinstance(m, SelfAttention) for m in generator.modules()) == (resolution >= 64)
    assert sum(isinstance(m, SelfAttention) for m in discriminator.modules()) == (resolution == 128)


def test_generator_block_structure():
    generator = tiny_generator(resolution=64, channels=4)  # stages 64 -> 64 -> 32 -> 16 -> 8 channels
    blocks = [b for b in generator.blocks if isinstance(b, GBlock)]
    assert len(blocks) == 4 * 2  # 4 stages x G_depth 2
    assert [b.upsample for b in blocks] == [False, True] * 4
    assert [b.out_channels for b in blocks] == [64, 64, 64, 32, 32, 16, 16, 8]
    assert blocks[0].conv1.weight.shape[:2] == (16, 64)  # 1x1 bottleneck to in/4
    x = torch.randn(2, 64, 8, 8)
    out = blocks[3](x, generator.condition(torch.randn(2, 8), torch.tensor([0, 1])))
    assert out.shape == (2, 32, 16, 16)  # channels dropped in the skip, upsampled x2


def test_spectral_norm_everywhere_but_g_embedding():
    generator, discriminator = tiny_generator(), Discriminator(32, 8, 10)
    for model in (generator, discriminator):
        for module in model.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)) or module is getattr(model, "embed", None):
                assert hasattr(module, "parametrizations"), module
    assert not hasattr(generator.shared, "parametrizations")


@pytest.mark.parametrize("norm", list_norm_acts())
def test_every_norm_builds_without_batchnorm_relu_pair(norm):
    generator = tiny_generator(norm, channels=4, depth=1)
    modules = list(generator.modules())
    assert not any(isinstance(m, (nn.BatchNorm2d, nn.ReLU)) for m in modules)
    conditional = [m for m in modules if isinstance(m, ConditionalNormAct2d)]
    assert len(conditional) == 4 * len([b for b in generator.blocks if isinstance(b, GBlock)])
    assert all(m.norm.weight is None and m.norm.bias is None for m in conditional)  # replaced by 1 + W_g c, W_b c
    assert type(generator.output_norm) is type(build_norm_act(norm, 4))  # plain layer before the output conv
    if not norm.startswith("bn_"):
        assert not any(isinstance(m, BatchNormAct2d) for m in modules)
    assert torch.isfinite(generator(torch.randn(4, 8), torch.arange(4))).all()


def test_gn_relu_defaults_and_bad_options():
    from gan.config import make_config

    assert make_config("imagenet128", norm="gn_relu").norm_options == {"groups": 16}
    with pytest.raises(ValueError, match="groups"):
        tiny_generator("gn_relu", channels=8, groups=16)  # 8 hidden channels: 16 groups cannot divide them
    with pytest.raises(KeyError, match="valid names"):
        tiny_generator("batchnorm_tanh")
    with pytest.raises(ValueError, match="accepted"):
        tiny_generator(resolution=48)


def reference_transform(norm: str, x: torch.Tensor, layer) -> torch.Tensor:
    """The paper's normalization part in float64 (training mode), before gamma/beta."""
    if norm == "evonorm_s0":
        n, c, h, w = x.shape
        grouped = x.view(n, layer.groups, -1)
        var = grouped.var(dim=-1, unbiased=False, keepdim=True).expand_as(grouped).reshape(n, c, h, w)
        return x * torch.sigmoid(layer.v1.double().view(1, -1, 1, 1) * x) / torch.sqrt(var + EPS)
    if norm == "evonorm_b0":
        batch_std = torch.sqrt(x.var(dim=(0, 2, 3), unbiased=False, keepdim=True) + EPS)
        instance = layer.v1.double().view(1, -1, 1, 1) * x + torch.sqrt(x.var(dim=(2, 3), unbiased=False, keepdim=True) + EPS)
        return x / torch.maximum(batch_std, instance)
    mean = x.mean(dim=(0, 2, 3), keepdim=True)  # bn_relu
    return (x - mean) / torch.sqrt(x.var(dim=(0, 2, 3), unbiased=False, keepdim=True) + EPS)


@pytest.mark.parametrize("norm", ["evonorm_s0", "evonorm_b0", "bn_relu"])
def test_conditional_layer_matches_float64_formula(norm):
    layer = ConditionalNormAct2d(build_norm_act(norm, 8, groups=4) if norm == "evonorm_s0" else build_norm_act(norm, 8),
                                 cond_dim=5, make_linear=lambda i, o: nn.Linear(i, o, bias=False))
    with torch.no_grad():
        if hasattr(layer.norm, "v1"):
            layer.norm.v1.uniform_(0.5, 1.5)
    x, cond = torch.randn(6, 8, 4, 4), torch.randn(6, 5)
    out = layer(x, cond)
    xd, cd = x.double(), cond.double()
    gamma = 1 + cd @ layer.gain.weight.double().t()
    beta = cd @ layer.bias.weight.double().t()
    expected = reference_transform(norm, xd, layer.norm) * gamma.view(6, 8, 1, 1) + beta.view(6, 8, 1, 1)
    if norm == "bn_relu":
        expected = expected.relu()
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-5)


def test_conditional_gamma_beta_depend_on_class():
    generator = tiny_generator("evonorm_b0")
    layer = generator.blocks[0].norm1
    z = torch.randn(1, 8).repeat(2, 1)
    cond = generator.condition(z, torch.tensor([1, 2]))
    gamma, beta = layer.gamma_beta(cond)
    assert not torch.allclose(gamma[0], gamma[1]) and not torch.allclose(beta[0], beta[1])
    x = torch.randn(1, layer.num_channels, 4, 4).repeat(2, 1, 1, 1)
    layer.eval()
    out = layer(x, cond)
    assert not torch.allclose(out[0], out[1])


def test_zero_projections_give_the_plain_layer():
    """With W_g = W_b = 0 the conditional layer is the plain one at gamma = 1, beta = 0 (the "1 +")."""
    plain = build_norm_act("evonorm_s0", 8, groups=2)
    conditional = ConditionalNormAct2d(build_norm_act("evonorm_s0", 8, groups=2), 3, lambda i, o: nn.Linear(i, o, bias=False))
    with torch.no_grad():
        conditional.gain.weight.zero_()
        conditional.bias.weight.zero_()
    x = torch.randn(2, 8, 4, 4)
    torch.testing.assert_close(conditional(x, torch.randn(2, 3)), plain(x))


def test_conditional_rejects_a_layer_without_transform():
    with pytest.raises(TypeError, match="NormAct2d"):
        ConditionalNormAct2d(nn.BatchNorm2d(4), 3, lambda i, o: nn.Linear(i, o, bias=False))


@pytest.mark.slow
def test_paper_preset_is_biggan_deep_128():
    from gan.checkpoint import build_discriminator, build_generator
    from gan.config import make_config

    config = make_config("imagenet128", norm="bn_relu")
    assert (config.resolution, config.channels, config.dim_z, config.shared_dim, config.depth) == (128, 128, 128, 128, 2)
    assert (config.g_lr, config.d_lr, config.betas, config.d_steps, config.batch_size) == (5e-5, 2e-4, (0.0, 0.999), 2, 2048)
    assert config.accumulation(world_size=1) == 8 and config.accumulation(world_size=8) == 1
    generator, discriminator = build_generator(config, 1000), build_discriminator(config, 1000)
    # measured once and pinned: the architecture must not drift
    assert sum(p.numel() for p in generator.parameters()) == 50_244_484
    assert sum(p.numel() for p in discriminator.parameters()) == 34_590_210


def test_norm_act_can_be_a_callable_like_everywhere_in_the_suite():
    from evonorm_core.layers import EvoNormS0

    built = []

    def make(num_channels, nonlinearity):
        built.append((num_channels, nonlinearity))
        return EvoNormS0(num_channels, nonlinearity, groups=2)

    generator = tiny_generator(make, channels=4, depth=1)
    assert built and all(nonlinearity for _, nonlinearity in built)
    assert all(m.norm.groups == 2 for m in generator.modules() if isinstance(m, ConditionalNormAct2d))
    with pytest.raises(ValueError, match="callable"):
        tiny_generator(make, channels=4, depth=1, groups=4)
