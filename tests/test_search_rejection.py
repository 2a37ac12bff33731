"""Rejection (section 4.4): static checks, quality on the real anchors, stability."""
import pytest
import torch
import torch.nn.functional as F

from classification.anchors import build_anchor
from evonorm_core.search import genome_norm_act, parse, static_rejection, worst_case_gradient_norm
from search.config import REFERENCE_LAYERS as BASELINES
from evonorm_core.search import Stage
from search.proxy import ProxyConfig, ProxyEvaluator, load_data


@pytest.mark.parametrize("expression, reason", [
    ("x * 0", "does not depend on x"), ("sigmoid(v1) + v0", "does not depend on x"),
    ("x / 0", "non-finite output"), ("x + sqrt(x * 0)", "non-finite gradient"), ("x * sigmoid(x)", None),
])
def test_static_rejection(expression, reason):
    got = static_rejection(parse(expression))
    assert got == reason if reason is None else reason in got


def tiny_proxy(**overrides):
    settings = dict(anchors=("resnet50_cifar",), image_size=8, crop_size=8, batch_size=16, train_steps=2,
                    quality_steps=2, quality_threshold=0.2, stability_steps=0)
    return ProxyConfig(**{**settings, **overrides})


def test_quality_rejects_a_constant_zero_layer():
    result = ProxyEvaluator(tiny_proxy(), threads=1)(parse("x * 0").to_dict())
    assert result.status == "rejected" and result.stage is Stage.QUALITY
    assert result.accuracies["resnet50_cifar"] < 0.2 and "resnet50_cifar after 2 steps" in result.reason


@pytest.mark.slow
def test_quality_and_stability_accept_bn_relu():
    proxy = tiny_proxy(image_size=16, crop_size=12, batch_size=32, quality_steps=30, train_steps=30,
                       quality_threshold=0.2, stability_steps=3, stability_batch_size=8, recalibration_batches=4)
    result = ProxyEvaluator(proxy, threads=1)(parse(BASELINES["bn_relu"]).to_dict())
    assert result.status == "accepted", result
    assert result.accuracies["resnet50_cifar"] >= 0.2


def test_stability_rejects_an_exploding_layer_and_passes_bn_relu():
    inputs, targets = (t[:8] for t in load_data("digits", None, 8)[:2])
    norms = {}
    for name, expression in (("bn_relu", BASELINES["bn_relu"]), ("cubic", "x * square(x)")):
        torch.manual_seed(0)
        model = build_anchor("resnet50_cifar", genome_norm_act(parse(expression)))
        norms[name] = worst_case_gradient_norm(model, lambda m: F.cross_entropy(m(inputs), targets), steps=3)
    assert norms["bn_relu"][0] < 1e8 and norms["bn_relu"][1] == 3
    assert norms["cubic"][0] > 1e8 and norms["cubic"][1] == 1


def test_stability_measures_the_gradient_norm_and_ascends_it():
    """Section 4.4's ||dL/dtheta|| on a model whose value is known by hand: one 1x1 conv of weight w on a
    constant input s, L = (w s)^2 / 2, so dL/dw = w s^2 and the norm is |w| s^2; each ascent step
    adds lr * d(norm)/dw = lr * s^2 to a positive w."""
    s, w0, lr = 3.0, 0.5, 0.01
    conv = torch.nn.Conv2d(1, 1, 1, bias=False).double()
    with torch.no_grad():
        conv.weight.fill_(w0)
    x = torch.full((1, 1, 1, 1), s, dtype=torch.float64)
    w1 = w0 + lr * s ** 2
    w2 = w1 + lr * s ** 2
    worst, steps = worst_case_gradient_norm(conv, lambda m: m(x).square().sum() / 2, steps=3, lr=lr)
    assert steps == 3 and worst == pytest.approx(w2 * s ** 2, rel=1e-12)  # the largest of the three norms
    assert worst_case_gradient_norm(conv, lambda m: m(x).square().sum() / 2, steps=1, threshold=1.0) == (
        pytest.approx((w2 + lr * s ** 2) * s ** 2, rel=1e-12), 1)  # above the threshold: stops at once


def test_stability_stage_in_the_evaluator_names_the_anchor():
    proxy = tiny_proxy(quality_steps=0, quality_threshold=0.0, stability_steps=2, stability_batch_size=4)
    result = ProxyEvaluator(proxy, threads=1)(parse("x * square(x) + x").to_dict())
    assert result.stage is Stage.STABILITY and "on resnet50_cifar after 1 ascent steps" in result.reason, result
