"""BigGAN-deep shapes, norm swapping and the class-conditional norm-act against float64 formulas."""
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from evonorm_core import ConditionalNormAct2d, build_norm_act, list_norm_acts
from evonorm_core.layers import BatchNormAct2d, EvoNormS0
from evonorm_suite.gan.biggan_deep import DBlock, Discriminator, GBlock, Generator, GeneratorSpec
from evonorm_suite.gan.checkpoint import build_discriminator, build_generator
from evonorm_suite.gan.config import PRESETS
from evonorm_suite.gan.layers import SelfAttention, sn_conv, sn_embedding, sn_linear


def tiny_generator(norm="evonorm_s0", resolution=32, channels=16, depth=2, **options):
    spec = GeneratorSpec(resolution=resolution, channels=channels, num_classes=10, dim_z=8, shared_dim=8, depth=depth)
    return Generator(spec, norm, **options)


@pytest.mark.parametrize("resolution", [16, 32, 64, 128])
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
    assert replace(PRESETS["imagenet128"], norm="gn_relu").norm_options == {"groups": 16}
    with pytest.raises(ValueError, match="groups"):
        tiny_generator("gn_relu", channels=8, groups=16)  # 8 hidden channels: 16 groups cannot divide them
    with pytest.raises(KeyError, match="valid names"):
        tiny_generator("batchnorm_tanh")
    with pytest.raises(ValueError, match="accepted"):
        tiny_generator(resolution=48)


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


@pytest.mark.slow
def test_paper_preset_is_biggan_deep_128():
    config = PRESETS["imagenet128"]
    assert (config.resolution, config.channels, config.dim_z, config.shared_dim, config.depth) == (128, 128, 128, 128, 2)
    assert (config.g_lr, config.d_lr, config.betas, config.d_steps, config.batch_size) == (5e-5, 2e-4, (0.0, 0.999), 2, 2048)
    assert config.accumulation(world_size=1) == 8 and config.accumulation(world_size=8) == 1
    generator, discriminator = build_generator(config, 1000), build_discriminator(config, 1000)
    # measured once and pinned: the architecture must not drift
    assert sum(p.numel() for p in generator.parameters()) == 50_244_484
    assert sum(p.numel() for p in discriminator.parameters()) == 34_590_210


def test_norm_act_can_be_a_callable_like_everywhere_in_the_suite():
    built = []

    def make(num_channels, nonlinearity):
        built.append((num_channels, nonlinearity))
        return EvoNormS0(num_channels, nonlinearity, groups=2, affine=False)  # conditional layers bring gamma/beta

    generator = tiny_generator(make, channels=4, depth=1)
    assert built and all(nonlinearity for _, nonlinearity in built)
    assert all(m.norm.groups == 2 for m in generator.modules() if isinstance(m, ConditionalNormAct2d))
    with pytest.raises(ValueError, match="callable"):
        tiny_generator(make, channels=4, depth=1, groups=4)


def test_greyscale_generator_and_discriminator():
    spec = GeneratorSpec(resolution=16, channels=8, num_classes=10, dim_z=8, shared_dim=8, depth=1, attention=(),
                         image_channels=1)
    generator, discriminator = Generator(spec, "evonorm_s0"), Discriminator(16, 8, 10, 1, (), image_channels=1)
    images = generator(torch.randn(3, 8), torch.tensor([0, 4, 9]))
    assert images.shape == (3, 1, 16, 16) and discriminator(images, torch.tensor([0, 4, 9])).shape == (3, 1)


def test_discriminator_is_a_projection_discriminator():
    """Miyato & Koyama (2018), BigGAN's D: ``D(x, y) = w . h(x) + b + embed(y) . h(x)``, ``h`` the
    globally sum-pooled ReLU features, so logits for two classes of one image differ by
    ``(embed(y1) - embed(y2)) . h``; checked with ``h`` read at the final linear layer's input."""
    torch.manual_seed(0)
    discriminator = Discriminator(16, 8, 10, 1, (), image_channels=1).eval()
    features = []
    discriminator.linear.register_forward_hook(lambda module, inputs, output: features.append(inputs[0]))
    x = torch.randn(3, 1, 16, 16)
    y1, y2 = torch.tensor([0, 4, 9]), torch.tensor([1, 4, 2])
    with torch.no_grad():
        d1, d2 = discriminator(x, y1), discriminator(x, y2)
        h = features[0]
        expected = ((discriminator.embed(y1) - discriminator.embed(y2)) * h).sum(1, keepdim=True)
        unconditional = discriminator.linear(h)
    assert torch.allclose(d1 - d2, expected, atol=1e-5)
    assert torch.allclose(d1, unconditional + (discriminator.embed(y1) * h).sum(1, keepdim=True), atol=1e-5)
    assert not torch.allclose(d1[0], d2[0])  # a different class changes the logit


def test_discriminator_sum_pools_its_last_features():
    """BigGAN's D: ``h = sum_{h,w} relu(features)`` (global sum pooling, not the mean) before the
    final linear layer and the class projection."""
    torch.manual_seed(0)
    discriminator = Discriminator(16, 8, 10, 1, (), image_channels=1).eval()
    last, pooled = [], []
    discriminator.blocks[-1].register_forward_hook(lambda module, inputs, output: last.append(output))
    discriminator.linear.register_forward_hook(lambda module, inputs, output: pooled.append(inputs[0]))
    with torch.no_grad():
        discriminator(torch.randn(2, 1, 16, 16), torch.tensor([0, 3]))
    assert last[0].shape[-2:].numel() > 1  # more than one position, so a sum and a mean differ
    assert torch.allclose(pooled[0], torch.relu(last[0]).sum((2, 3)), rtol=1e-5)


def test_generator_block_follows_biggan_deeps_order():
    """BigGANdeep.py's GBlock: h = conv1(bn1(x)); h = bn2(h); drop x's extra channels; upsample h and x;
    h = conv3(bn3(conv2(h))); out = conv4(bn4(h)) + x (each bn a conditional norm-act)."""
    generator = tiny_generator("evonorm_s0", resolution=64, channels=4, depth=2).eval()
    block = [b for b in generator.blocks if isinstance(b, GBlock)][3]  # the second stage's last: 64 -> 32, upsamples
    cond = generator.condition(torch.randn(2, 8), torch.tensor([1, 6]))
    x = torch.randn(2, 64, 8, 8)
    with torch.no_grad():
        h = block.norm2(block.conv1(block.norm1(x, cond)), cond)
        h, skip = F.interpolate(h, scale_factor=2), F.interpolate(x[:, : block.out_channels], scale_factor=2)
        h = block.conv3(block.norm3(block.conv2(h), cond))
        expected = block.conv4(block.norm4(h, cond)) + skip
        torch.testing.assert_close(block(x, cond), expected)
    assert block.upsample and block.out_channels == 32 and block.conv1.out_channels == 64 // 4  # hidden: in / 4


def test_discriminator_block_follows_biggan_deeps_order():
    """BigGANdeep.py's DBlock (preactivation): h = conv1(relu(x)); h = conv2(relu(h)); h = conv3(relu(h));
    h = avgpool(relu(h)); out = conv4(h) + shortcut, shortcut = [avgpool(x), conv_sc(avgpool(x))]."""
    torch.manual_seed(0)
    block = DBlock(8, 16, downsample=True).eval()
    x = torch.randn(2, 8, 8, 8)
    with torch.no_grad():
        h = block.conv3(F.relu(block.conv2(F.relu(block.conv1(F.relu(x))))))
        h = block.conv4(F.avg_pool2d(F.relu(h), 2))
        pooled = F.avg_pool2d(x, 2)
        torch.testing.assert_close(block(x), h + torch.cat([pooled, block.conv_sc(pooled)], 1))
    assert block.conv1.out_channels == 16 // 4 and block.conv_sc.out_channels == 16 - 8


def test_self_attention_against_the_sagan_formula():
    """x + gamma * o(sum_j softmax_j(theta_i . phi_j) g_j), keys and values 2x2 max-pooled (SAGAN / BigGAN)."""
    torch.manual_seed(0)
    attention = SelfAttention(16).eval()
    with torch.no_grad():
        attention.gamma.fill_(0.7)
        x = torch.randn(2, 16, 4, 6)
        theta = attention.theta(x).flatten(2)  # (N, 2, 24)
        phi = F.max_pool2d(attention.phi(x), 2).flatten(2)  # (N, 2, 6)
        g = F.max_pool2d(attention.g(x), 2).flatten(2)  # (N, 8, 6)
        weights = torch.softmax(torch.einsum("nci,ncj->nij", theta, phi), dim=2)  # each query's weights sum to 1
        out = torch.einsum("nij,ncj->nci", weights, g).view(2, 8, 4, 6)
        torch.testing.assert_close(attention(x), x + 0.7 * attention.o(out))
    assert (attention.theta.out_channels, attention.phi.out_channels, attention.g.out_channels) == (2, 2, 8)
    assert SelfAttention(16).gamma.item() == 0  # starts as the identity


def test_spectral_norm_eps_power_iterations_and_orthogonal_init():
    """BigGAN-deep's launch script: SN_eps 1e-6, one power iteration per forward, orthogonal init (G_init=ortho)."""
    torch.manual_seed(0)
    for module in (sn_conv(4, 6, 3), sn_linear(4, 6), sn_embedding(6, 4)):
        (norm,) = module.parametrizations.weight
        assert norm.eps == 1e-6 and norm.n_power_iterations == 1
        weight = module.parametrizations.weight.original.detach().flatten(1)
        small = weight @ weight.T if weight.shape[0] <= weight.shape[1] else weight.T @ weight
        torch.testing.assert_close(small, torch.eye(len(small)), atol=1e-5, rtol=0)
    assert sn_conv(4, 6, 3).padding == (1, 1) and sn_conv(4, 6, 1).padding == (0, 0)
