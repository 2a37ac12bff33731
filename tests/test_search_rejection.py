"""Rejection (section 4.4): static checks, quality on the real anchors, stability."""
import pytest
import torch
import torch.nn.functional as F

from evonorm_core.classifiers.anchors import build_anchor
from evonorm_core.classifiers.data import load_cifar10, load_digits_proxy
from evonorm_core.search import Stage, genome_norm_act, parse, static_rejection, worst_case_gradient_norm
from evonorm_core.search.equivalence import FINGERPRINT_SHAPE, probe_outputs
from evonorm_suite.search.config import REFERENCE_LAYERS as BASELINES
from evonorm_suite.search.proxy import ProxyConfig, ProxyEvaluator, load_data

from .test_classifiers_data import write_fake_cifar


@pytest.mark.parametrize("expression, reason", [
    ("x * 0", "does not depend on x"), ("sigmoid(v1) + v0", "does not depend on x"),
    ("x / 0", "non-finite output"), ("x + sqrt(x * 0)", "non-finite gradient"), ("x * sigmoid(x)", None),
])
def test_static_rejection(expression, reason):
    got = static_rejection(parse(expression))
    assert got == reason if reason is None else reason in got


def tiny_proxy(**overrides):
    settings = dict(data="digits", anchors=("resnet50_cifar",), image_size=8, crop_size=8, batch_size=16,
                    train_steps=2, quality_steps=2, quality_threshold=0.2, stability_steps=0)
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


def test_stability_threshold_is_exclusive():
    """Section 4.4 rejects a worst-case norm *greater than* 1e8: a norm equal to the threshold goes on (the
    1x1-conv model above with lr 0: the norm stays w0 s^2 = 4.5 exactly at every step)."""
    s, w0 = 3.0, 0.5
    conv = torch.nn.Conv2d(1, 1, 1, bias=False).double()
    with torch.no_grad():
        conv.weight.fill_(w0)
    x = torch.full((1, 1, 1, 1), s, dtype=torch.float64)
    loss = lambda m: m(x).square().sum() / 2  # noqa: E731
    assert worst_case_gradient_norm(conv, loss, steps=3, lr=0.0, threshold=w0 * s ** 2) == (4.5, 3)
    assert worst_case_gradient_norm(conv, loss, steps=3, lr=0.0, threshold=4.49) == (4.5, 1)


class ScriptedTraining:
    """Stands in for the proxy's anchor training: ``ACCURACY[(anchor, steps trained)]``; ``DIVERGES``: (anchor,
    steps) at which the loss becomes non-finite. Logs every call in ``LOG``."""

    ACCURACY: dict = {}
    DIVERGES: set = set()
    LOG: list = []

    def __init__(self, model, config, data, seed):
        self.anchor, self.steps = model.anchor, 0

    def train_to(self, steps):
        self.LOG.append(("train_to", self.anchor, steps))
        if (self.anchor, steps) in self.DIVERGES:
            return False
        self.steps = steps
        return True

    def accuracy(self):
        self.LOG.append(("accuracy", self.anchor, self.steps))
        return self.ACCURACY[(self.anchor, self.steps)]


class ShapeRecorder(torch.nn.Module):
    """A model that logs the input shapes it sees and predicts from their mean (a conv so the stability test
    has weights)."""

    def __init__(self, anchor):
        super().__init__()
        self.anchor, self.shapes = anchor, []
        self.conv = torch.nn.Conv2d(3, 10, 1)

    def forward(self, x):
        self.shapes.append(tuple(x.shape))
        return self.conv(x).mean(dim=(2, 3))


@pytest.fixture
def scripted(monkeypatch):
    import evonorm_suite.search.proxy as proxy

    ScriptedTraining.ACCURACY, ScriptedTraining.DIVERGES, ScriptedTraining.LOG = {}, set(), []
    built = []

    def build(self, anchor, genome, depth=None):
        built.append(ShapeRecorder(anchor))
        built[-1].depth = depth
        return built[-1]

    monkeypatch.setattr(proxy, "_AnchorTraining", ScriptedTraining)
    monkeypatch.setattr(proxy.ProxyEvaluator, "build", build)
    monkeypatch.setattr(proxy.ProxyEvaluator, "data", lambda self: (
        torch.randn(20, 3, 16, 16), torch.arange(20) % 10, torch.randn(6, 3, 16, 16), torch.arange(6) % 10))
    return built


ANCHORS3 = ("resnet50_cifar", "mobilenetv2_cifar", "efficientnet_cifar")


def scripted_proxy(**overrides):
    settings = dict(anchors=ANCHORS3, image_size=16, crop_size=12, quality_steps=10, train_steps=30,
                    quality_threshold=0.2, stability_steps=0)
    return ProxyConfig(**{**settings, **overrides})


def test_quality_stage_tries_anchors_in_order_and_stops_at_the_first_below_the_threshold(scripted):
    """Section 4.4: reject a layer with "less than 20% validation accuracy in 100 training steps on *any*" anchor:
    anchors in order, each measured after the quality steps; the first below the threshold stops the candidate
    (later anchors never train), with the accuracies measured so far; exactly 20% passes."""
    ScriptedTraining.ACCURACY = {("resnet50_cifar", 10): 0.5, ("mobilenetv2_cifar", 10): 0.19,
                                 ("efficientnet_cifar", 10): 0.9}
    result = ProxyEvaluator(scripted_proxy())(parse("tanh(x)").to_dict())
    assert result.stage is Stage.QUALITY and result.accuracies == {"resnet50_cifar": 0.5, "mobilenetv2_cifar": 0.19}
    assert "mobilenetv2_cifar after 10 steps" in result.reason and "0.190 < 0.2" in result.reason
    assert [a for kind, a, _ in ScriptedTraining.LOG if kind == "train_to"] == ["resnet50_cifar", "mobilenetv2_cifar"]
    assert "quality" in result.timings and "fitness" not in result.timings

    ScriptedTraining.LOG.clear()
    ScriptedTraining.ACCURACY[("mobilenetv2_cifar", 10)] = 0.2  # at the threshold: not "less than 20%"
    ScriptedTraining.ACCURACY.update({(a, 30): 0.6 + i / 10 for i, a in enumerate(ANCHORS3)})
    result = ProxyEvaluator(scripted_proxy())(parse("tanh(x)").to_dict())
    assert result.accepted and result.accuracies == {"resnet50_cifar": 0.6, "mobilenetv2_cifar": 0.7,
                                                     "efficientnet_cifar": 0.8}
    assert list(result.accuracies) == list(ANCHORS3) and result.mean_accuracy == pytest.approx(0.7)
    # every anchor trained to the quality steps first, then each continued to train_steps (the fitness)
    assert [(a, s) for kind, a, s in ScriptedTraining.LOG if kind == "train_to"] == [
        *((a, 10) for a in ANCHORS3), *((a, 30) for a in ANCHORS3)]
    assert set(result.timings) == {"quality", "stability", "fitness"}


def test_divergence_is_a_quality_rejection_early_and_a_fitness_rejection_late(scripted):
    ScriptedTraining.ACCURACY = {(a, 10): 0.5 for a in ANCHORS3}
    ScriptedTraining.DIVERGES = {("efficientnet_cifar", 10)}
    result = ProxyEvaluator(scripted_proxy())(parse("tanh(x)").to_dict())
    assert result.stage is Stage.QUALITY and "non-finite loss on efficientnet_cifar within 10 steps" in result.reason
    assert list(result.accuracies) == ["resnet50_cifar", "mobilenetv2_cifar"]
    ScriptedTraining.DIVERGES = {("mobilenetv2_cifar", 30)}
    ScriptedTraining.ACCURACY[("resnet50_cifar", 30)] = 0.7
    result = ProxyEvaluator(scripted_proxy())(parse("tanh(x)").to_dict())
    assert result.stage is Stage.FITNESS and "non-finite loss on mobilenetv2_cifar within 30 steps" in result.reason


class SteppedClock:
    """``time.monotonic`` for the proxy module: each call returns the next of ``ticks``."""

    def __init__(self, *ticks):
        self.ticks = iter(ticks)

    def monotonic(self):
        return next(self.ticks)


# each stage starts on an even second; quality lasts 1.2344 s, stability 0.5 s, fitness 3.33333 s
CLOCK = (10.0, 11.2344, 20.0, 20.5, 30.0, 33.33333)


@pytest.mark.parametrize("outcome, timings", [
    ("diverges in quality", {"quality": 1.234}), ("below the threshold", {"quality": 1.234}),
    ("unstable", {"quality": 1.234, "stability": 0.5}),
    ("diverges in fitness", {"quality": 1.234, "stability": 0.5, "fitness": 3.333}),
    ("accepted", {"quality": 1.234, "stability": 0.5, "fitness": 3.333}),
])
def test_each_stage_run_is_timed_in_seconds_to_the_millisecond(scripted, monkeypatch, outcome, timings):
    """A candidate's ``timings`` hold the wall seconds of each stage it reached (the search log's cost per stage),
    rounded to milliseconds; a rejected candidate keeps the accuracies measured before it failed."""
    import evonorm_suite.search.proxy as proxy

    monkeypatch.setattr(proxy, "time", SteppedClock(*CLOCK))
    monkeypatch.setattr(proxy, "worst_case_gradient_norm", lambda *args: (1e9 if outcome == "unstable" else 1.0, 1))
    ScriptedTraining.ACCURACY = {(a, s): 0.5 for a in ANCHORS3 for s in (10, 30)}
    ScriptedTraining.ACCURACY[("mobilenetv2_cifar", 10)] = 0.1 if outcome == "below the threshold" else 0.5
    ScriptedTraining.DIVERGES = {"diverges in quality": {("resnet50_cifar", 10)},
                                 "diverges in fitness": {("efficientnet_cifar", 30)}}.get(outcome, set())
    result = ProxyEvaluator(scripted_proxy(stability_steps=1))(parse("tanh(x)").to_dict())
    assert result.timings == timings
    if outcome == "diverges in fitness":
        assert result.stage is Stage.FITNESS and result.accuracies == {
            "resnet50_cifar": 0.5, "mobilenetv2_cifar": 0.5, "efficientnet_cifar": 0.5}


def test_an_evaluator_trains_from_seed_0_on_one_thread_by_default(scripted, monkeypatch):
    """``ProxyEvaluator(config)`` trains every candidate from seed 0 with one torch thread (the search's workers
    each take a core)."""
    import evonorm_suite.search.proxy as proxy

    seeds = []

    class SeedRecorder(ScriptedTraining):
        def __init__(self, model, config, data, seed):
            super().__init__(model, config, data, seed)
            seeds.append(seed)

    monkeypatch.setattr(proxy, "_AnchorTraining", SeedRecorder)
    ScriptedTraining.ACCURACY = {(a, s): 0.5 for a in ANCHORS3 for s in (10, 30)}
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert ProxyEvaluator(scripted_proxy())(parse("tanh(x)").to_dict()).accepted
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert seeds == [0, 0, 0]


def test_an_evaluator_builds_its_anchors_at_the_configured_depth_and_momentum():
    """``build`` without a depth makes the anchor at ``anchor_depth``; its searched layers average with
    ``bn_momentum``."""
    from evonorm_core.search import GraphLayer

    config = ProxyConfig(anchors=("resnet50_cifar",), anchor_depth=0.34, bn_momentum=0.3)
    model = ProxyEvaluator(config).build("resnet50_cifar", parse(BASELINES["bn_relu"]))
    reference = build_anchor("resnet50_cifar", genome_norm_act(parse(BASELINES["bn_relu"])), depth_multiplier=0.34)
    assert [name for name, _ in model.named_parameters()] == [name for name, _ in reference.named_parameters()]
    momenta = {m.momentum for m in model.modules() if isinstance(m, GraphLayer)}
    assert momenta == {0.3}


def test_an_evaluator_reads_the_configured_data_folder_and_holdout(tmp_path, monkeypatch):
    """``data()`` is ``load_data`` of the config: CIFAR-10 from ``data_dir``, and with ``holdout`` the tenth of
    the training set kept out (reranking) in place of the validation set."""
    write_fake_cifar(tmp_path / "cifar-10-batches-py", monkeypatch)
    got = ProxyEvaluator(ProxyConfig(data="cifar10", data_dir=str(tmp_path), image_size=32, crop_size=24,
                                       batch_size=16, stability_batch_size=16)).data()
    for a, b in zip(got, load_cifar10(tmp_path)):
        assert torch.equal(a, b)
    got = ProxyEvaluator(ProxyConfig(data="digits", image_size=8, crop_size=8, holdout=True)).data()
    for a, b in zip(got, load_data("digits", None, 8, holdout=True)):
        assert torch.equal(a, b)


def test_anchor_training_stops_at_the_first_non_finite_loss():
    """``train_to`` reports a diverged run (False) at the first batch whose loss is not finite, trains no further
    and counts no step for it."""
    from evonorm_suite.search.proxy import _AnchorTraining

    config = ProxyConfig(image_size=16, crop_size=12, batch_size=4, train_steps=5, quality_steps=2)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 10, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    with torch.no_grad():
        model[0].bias.fill_(float("nan"))
    data = (torch.randn(20, 3, 16, 16), torch.arange(20) % 10)
    run = _AnchorTraining(model, config, (*data, *data), seed=0)
    forwards = []
    model.register_forward_hook(lambda *args: forwards.append(1))
    assert run.train_to(5) is False and run.trainer.steps == 0 and len(forwards) == 1


@pytest.mark.parametrize("stability_anchors, tested", [(None, ANCHORS3), (ANCHORS3[:1], ANCHORS3[:1]),
                                                       (ANCHORS3[:2], ANCHORS3[:2]), (ANCHORS3[1:2], ANCHORS3[1:2])])
def test_stability_runs_on_the_named_anchors_on_crops_and_its_threshold(scripted, monkeypatch, stability_anchors,
                                                                       tested):
    """The stability test ascends each of the ``stability_anchors`` anchors (none: all, the paper) on a batch of
    ``stability_batch_size`` training crops of ``crop_size``, with the configured steps, lr and threshold; a norm
    above the threshold on any of them rejects the layer, keeping its quality accuracies."""
    import evonorm_suite.search.proxy as proxy

    calls = []

    def fake_norm(model, loss_fn, steps, lr, threshold):
        loss_fn(model)
        calls.append((model.anchor, model.depth, model.shapes[-1], steps, lr, threshold))
        return (5e8 if model.anchor == "mobilenetv2_cifar" else 1e8), 1  # 1e8: not above

    monkeypatch.setattr(proxy, "worst_case_gradient_norm", fake_norm)
    ScriptedTraining.ACCURACY = {(a, s): 0.5 for a in ANCHORS3 for s in (10, 30)}
    config = scripted_proxy(stability_steps=7, stability_lr=0.02, stability_threshold=1e8, stability_batch_size=5,
                            stability_anchors=stability_anchors, stability_depth=0.5)
    result = ProxyEvaluator(config)(parse("tanh(x)").to_dict())
    expected = [(a, 0.5, (5, 3, 12, 12), 7, 0.02, 1e8) for a in tested]
    if "mobilenetv2_cifar" in tested:
        expected = expected[:tested.index("mobilenetv2_cifar") + 1]  # the first failure stops the test
        assert result.stage is Stage.STABILITY and "on mobilenetv2_cifar" in result.reason
        assert result.accuracies == {a: 0.5 for a in ANCHORS3}
    else:
        assert result.accepted
    assert calls == expected


def test_cifar10_is_resized_to_the_image_size_by_bilinear_halving(tmp_path, monkeypatch):
    """The paper's proxy is CIFAR-10 at 32 px; a smaller ``image_size`` resizes the images (both splits).
    Halving bilinearly (no corner alignment) averages each 2x2 block: the closed form checked here."""
    write_fake_cifar(tmp_path / "cifar-10-batches-py", monkeypatch)
    full = load_cifar10(tmp_path)
    half = load_data("cifar10", str(tmp_path), 16)
    assert half[0].shape == (20, 3, 16, 16) and half[2].shape == (4, 3, 16, 16)
    torch.testing.assert_close(half[0], F.avg_pool2d(full[0], 2))
    torch.testing.assert_close(half[2], F.avg_pool2d(full[2], 2))
    assert torch.equal(half[1], full[1]) and torch.equal(half[3], full[3])
    same = load_data("cifar10", str(tmp_path), 32)
    assert torch.equal(same[0], full[0])


def test_rerank_holdout_is_a_tenth_of_the_training_set_kept_out_of_training():
    """Appendix C, reranking: "trained using 90% of the ImageNet training set and evaluated over the rest of
    the 10%": the two parts split the training images (the validation set is not used)."""
    train_x = load_digits_proxy(8)[0]
    fit_x, _, held_x, _ = load_data("digits", None, 8, holdout=True)
    assert len(held_x) == round(0.1 * len(train_x)) and len(fit_x) + len(held_x) == len(train_x)
    rows = lambda t: sorted(tuple(r) for r in t.flatten(1).tolist())  # noqa: E731
    assert rows(torch.cat([fit_x, held_x])) == rows(train_x)  # each training image in exactly one part


def test_anchor_training_crops_for_training_and_validates_on_full_images():
    """Appendix C: "24 x 24 random crops ... for training, and use the original 32 x 32 image ... for
    validation": training batches are ``batch_size`` crops of ``crop_size``, recalibration batches full images."""
    from evonorm_suite.search.proxy import _AnchorTraining

    config = ProxyConfig(image_size=16, crop_size=12, batch_size=6, train_steps=4, quality_steps=2,
                         recalibration_batches=3)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(4, 10))
    images, labels = torch.randn(30, 3, 16, 16), torch.arange(30) % 10
    run = _AnchorTraining(model, config, (images, labels, images[:7], labels[:7]), seed=0)
    batch, targets = next(run.batches)
    assert batch.shape == (6, 3, 12, 12) and targets.shape == (6,)
    assert run.validation_batch().shape == (6, 3, 16, 16)
    seen = []
    model[0].register_forward_hook(lambda m, inputs, out: seen.append(inputs[0].shape[-1]))
    assert run.train_to(2) and run.trainer.steps == 2 and seen == [12, 12]
    seen.clear()
    run.accuracy()
    assert seen == [16] * 4  # 3 recalibration batches, then the 7 validation images in one batch


def test_centre_validation_frames_validation_and_recalibration_as_the_crops():
    """``validation="centre"``: the validation images and every recalibration batch are the centre
    ``crop_size`` crop of the full images (the training crops' framing), the same pixels, not a resize."""
    from evonorm_suite.search.proxy import ProxyEvaluator, _AnchorTraining

    config = ProxyConfig(data="mnist", image_size=28, crop_size=24, validation="centre", batch_size=5,
                         recalibration_batches=2)
    full = ProxyEvaluator(ProxyConfig(data="mnist", image_size=28)).data()
    train_x, train_y, val_x, val_y = ProxyEvaluator(config).data()
    assert torch.equal(val_x, full[2][..., 2:26, 2:26]) and torch.equal(val_y, full[3])
    assert torch.equal(train_x, full[0])  # training images stay whole: the random crops are taken per batch
    run = _AnchorTraining(torch.nn.Conv2d(1, 1, 1), config, (train_x, train_y, val_x, val_y), seed=0)
    batch = run.validation_batch()
    assert batch.shape[-2:] == (24, 24)
    whole = [image for image in train_x if torch.equal(image[..., 2:26, 2:26], batch[0])]
    assert whole, "a recalibration image is the centre crop of a training image"


@pytest.mark.parametrize("expression, reason", [
    ("x * 0", "output does not depend on x"), ("x / 0", "non-finite output on random input"),
    ("x + sqrt(x * 0)", "non-finite gradient on random input"),
])
def test_static_rejection_reasons_are_whole_sentences(expression, reason):
    """The reason is recorded in the search log and the report as it is: the whole sentence, not a word of it."""
    assert static_rejection(parse(expression)) == reason


def test_static_rejection_tells_dependence_on_x_within_rtol_1e6_and_atol_1e9():
    """Two different random inputs giving outputs equal within a relative 1e-6 (and an absolute 1e-9) mean the
    output does not depend on x. Constants built from the zero node, computed by hand: K = exp(exp(exp(1))) =
    3.81e6 and K exp(exp(1)) = 5.78e7; channel_rms(0) = sqrt(eps), so eps^2 e^2 = 7.39e-10. The probe's inputs
    (2 randn + 0.5) differ by up to about 10 between its two batches, so:

    * K + x moves by up to ~2.6e-6 of its value: above rtol 1e-6, it depends on x (it would not under 1e-5);
    * K exp(e) + x moves by up to ~1.7e-7 of its value: below 1e-6, it does not;
    * 7.39e-10 x moves by up to ~7e-9 absolute around values near 0: above atol 1e-9 (below 1e-8), it depends.
    """
    large, larger = "exp(exp(exp(exp(0))))", "exp(exp(exp(exp(0)))) * exp(exp(exp(0)))"
    tiny = "x * square(channel_rms(0)) * square(channel_rms(0)) * exp(exp(0) + exp(0))"
    first, second, _ = probe_outputs(parse(f"{large} + x"))
    assert 1e-6 < ((first - second).abs() / second.abs()).max() < 1e-5  # the premise, from the probe itself
    first, second, _ = probe_outputs(parse(f"{larger} + x"))
    assert ((first - second).abs() / second.abs()).max() < 1e-6
    first, second, _ = probe_outputs(parse(tiny))
    assert 1e-9 < (first - second).abs().max() < 1e-8 and second.abs().max() < 1e-8
    assert static_rejection(parse(f"{large} + x")) is None
    assert static_rejection(parse(f"{larger} + x")) == "output does not depend on x"
    assert static_rejection(parse(tiny)) is None


def test_the_gradient_check_runs_the_layer_the_output_check_probed(monkeypatch):
    """The gradient stage evaluates the genome as the probe does (``FINGERPRINT_SHAPE``: 8 channels in 4 groups
    of 2), so a layer is judged in one configuration. ``sqrt(group_mean(x) - instance_mean(x))``: with 4 groups
    of 2 channels the two means differ, the output and its gradient are finite; with one channel per group (8
    groups, the default for 8 channels) the difference is exactly 0, where the signed sqrt's gradient is NaN."""
    from evonorm_core.search import GraphLayer, rejection

    assert static_rejection(parse("x + sqrt(group_mean(x) - instance_mean(x))")) is None
    seen = []

    class Recorder(GraphLayer):
        def __init__(self, genome, num_channels, **kwargs):
            super().__init__(genome, num_channels, **kwargs)
            seen.append(("layer", num_channels, self.groups))

        def forward(self, x):
            seen.append(("input", tuple(x.shape)))
            return super().forward(x)

    monkeypatch.setattr(rejection, "GraphLayer", Recorder)
    assert static_rejection(parse("x * sigmoid(x)")) is None
    assert seen == [("layer", FINGERPRINT_SHAPE[1], 4), ("input", FINGERPRINT_SHAPE)]


def one_conv(weight: float) -> torch.nn.Conv2d:
    conv = torch.nn.Conv2d(1, 1, 1, bias=False).double()
    with torch.no_grad():
        conv.weight.fill_(weight)
    return conv


def test_stability_defaults_are_the_papers_100_steps_lr_0_01_and_threshold_1e8():
    """Section 4.4: 100 ascent steps, rejected above 1e8; ascent rate 0.01. On the 1x1 conv model of the tests
    above (L = (w s)^2 / 2, norm |w| s^2, each step adds lr s^2 to w): with s = 3, w0 = 0.5 the 100th (last,
    largest) norm is (0.5 + 99 * 0.01 * 9) * 9 = 84.69; with s = 1 and w0 = 1e8 + 0.5 the first norm is
    already above 1e8 and the test stops at step 1."""
    x3, x1 = (torch.full((1, 1, 1, 1), s, dtype=torch.float64) for s in (3.0, 1.0))
    worst, steps = worst_case_gradient_norm(one_conv(0.5), lambda m: m(x3).square().sum() / 2)
    assert steps == 100 and worst == pytest.approx((0.5 + 99 * 0.01 * 9) * 9, rel=1e-12)
    worst, steps = worst_case_gradient_norm(one_conv(1e8 + 0.5), lambda m: m(x1).square().sum() / 2)
    assert steps == 1 and worst == pytest.approx(1e8 + 0.5, rel=1e-15)


def test_stability_edge_cases_counted_by_hand():
    """No step: nothing seen, (0, 0). Norms below 1: the largest is returned as it is (0.1 with s = 1, w = 0.1,
    lr 0). A loss no conv weight influences: its gradient norm is 0 and there is nothing to ascend, so the test
    stops after the first step with (0, 1). A conv the loss does not use (a second, dead branch) is skipped both
    in the norm and in the ascent: the result is the one-conv model's and the unused weight is left as it was.
    A model without convolutions has nothing to test."""
    x = torch.full((1, 1, 1, 1), 1.0, dtype=torch.float64)
    assert worst_case_gradient_norm(one_conv(0.1), lambda m: m(x).square().sum() / 2, steps=0) == (0.0, 0)
    assert worst_case_gradient_norm(one_conv(0.1), lambda m: m(x).square().sum() / 2, steps=2, lr=0.0) == (
        pytest.approx(0.1, rel=1e-15), 2)

    class WithScale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.scale = one_conv(0.5), torch.nn.Parameter(torch.tensor(2.0, dtype=torch.float64))

    model = WithScale()
    assert worst_case_gradient_norm(model, lambda m: (m.scale * 3).square(), steps=5) == (0.0, 1)

    class DeadBranch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = one_conv(0.5), one_conv(-2.0)

    model, s, lr = DeadBranch(), 3.0, 0.01
    x3 = torch.full((1, 1, 1, 1), s, dtype=torch.float64)
    worst, steps = worst_case_gradient_norm(model, lambda m: m.used(x3).square().sum() / 2, steps=3, lr=lr)
    assert steps == 3 and worst == pytest.approx((0.5 + 2 * lr * s ** 2) * s ** 2, rel=1e-12)
    assert model.unused.weight.item() == -2.0 and model.used.weight.item() == pytest.approx(0.5 + 3 * lr * s ** 2)
    with pytest.raises(ValueError, match=r"^the stability test needs a model with convolutions$"):
        worst_case_gradient_norm(torch.nn.Linear(2, 2), lambda m: m.weight.sum())


def test_training_validation_and_stability_batches_follow_the_evaluator_s_seed_not_the_global_generator(monkeypatch):
    """The training batches, the recalibration batch and the stability test's batch are drawn from generators
    seeded by the run's seed: the same whatever torch's global generator holds (so equal layers get equal scores)
    and not the same under another seed, any image eligible (a one-image training set works), and the stability
    test runs from its first ascent step on."""
    from evonorm_suite.search import proxy
    from evonorm_suite.search.proxy import _AnchorTraining

    config = ProxyConfig(image_size=16, crop_size=12, batch_size=4, stability_steps=1, stability_batch_size=3,
                         anchors=("resnet50_cifar",), anchor_depth=0.34)
    one = (torch.randn(1, 3, 16, 16), torch.tensor([3]))
    data = (torch.randn(20, 3, 16, 16), torch.arange(20) % 10)
    seen = []

    def record(model, loss, steps, lr, threshold):  # the ascent's loss closes over the stability batch
        seen.append([cell.cell_contents for cell in loss.__closure__])
        return 0.0, steps

    monkeypatch.setattr(proxy, "worst_case_gradient_norm", record)
    evaluator = ProxyEvaluator(config, seed=5, threads=1)
    genome = parse(BASELINES["bn_relu"])
    batches = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        run = _AnchorTraining(torch.nn.Conv2d(3, 3, 1), config, (*data, *data), seed=5)
        batches.append((run.validation_batch(), *next(run.batches)))
        assert evaluator.stability_failure(genome, data) is None
    assert all(torch.equal(a, b) for a, b in zip(*batches))
    other = _AnchorTraining(torch.nn.Conv2d(3, 3, 1), config, (*data, *data), seed=6)
    assert not torch.equal(next(other.batches)[0], batches[0][1])  # another seed, other training crops
    assert len(seen) == 2 and all(torch.equal(a, b) for a, b in zip(*seen))
    assert _AnchorTraining(torch.nn.Conv2d(3, 3, 1), config, (*one, *one), seed=5).validation_batch().shape[0] == 4
    assert evaluator.stability_failure(genome, one) is None and len(seen) == 3
