"""evonorm_core.classifiers.trainer: the one training loop of the classification launcher and the search proxy,
in optimizer steps at an absolute learning rate."""
import copy
import math

import pytest
import torch
from torch import nn

from evonorm_core import build_norm_act
from evonorm_core.classifiers.optimizer import OptimizerSettings
from evonorm_core.classifiers.schedule import ScheduleSettings
from evonorm_core.classifiers.trainer import TensorBatches, Trainer, centre_crops, evaluate, random_crops
from evonorm_core.search import GraphLayer, parse

CONSTANT = ScheduleSettings("constant", total_steps=1)


def test_random_crops_are_the_slices_they_claim():
    images = torch.arange(2 * 3 * 7 * 6, dtype=torch.float32).view(2, 3, 7, 6)
    generator = torch.Generator().manual_seed(3)
    crops = random_crops(images, 4, generator)
    replay = torch.Generator().manual_seed(3)
    top = torch.randint(0, 4, (2,), generator=replay)
    left = torch.randint(0, 3, (2,), generator=replay)
    for i in range(2):
        assert torch.equal(crops[i], images[i, :, top[i]:top[i] + 4, left[i]:left[i] + 4])


def test_tensor_batches_are_seeded_and_flip_mirrors():
    """Batches are drawn with replacement from every image; ``flip`` mirrors each image left-right (its last
    dimension, not its channels) with probability 1/2, and without ``flip`` no image is mirrored."""
    images, labels = torch.randn(10, 3, 5, 5), torch.arange(10)
    a = next(TensorBatches(images, labels, 4, crop=3, flip=True, generator=torch.Generator().manual_seed(0)))
    b = next(TensorBatches(images, labels, 4, crop=3, flip=True, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[0].shape == (4, 3, 3, 3)
    flipped = next(TensorBatches(images, labels, 400, flip=True, generator=torch.Generator().manual_seed(1)))
    mirrored = []
    for image, label in zip(*flipped):
        assert torch.equal(image, images[label]) or torch.equal(image, images[label].flip(-1))
        mirrored.append(not torch.equal(image, images[label]))
    assert 160 <= sum(mirrored) <= 240  # Binomial(400, 1/2): 200 +- 20 (4 standard deviations)
    assert set(flipped[1].tolist()) == set(range(10))  # every image eligible, the first and last included
    plain = next(TensorBatches(images, labels, 400, generator=torch.Generator().manual_seed(1)))
    assert all(torch.equal(image, images[label]) for image, label in zip(*plain))
    with pytest.raises(ValueError, match=r"^crop must be in 1\.\.5 \(the images are 5 x 5\), got 6$"):
        TensorBatches(images, labels, 4, crop=6)


def test_tensor_batches_accept_the_bounds_of_crop_and_batch_size():
    """A crop of 1 pixel and of the whole image are valid (the whole image: the batches of no crop, draw for
    draw), a batch of one image is; a crop of 0, one larger than the shorter side of non-square images and an
    empty batch are refused, naming the value. Without a generator the batches are those of seed 0."""
    images, labels = torch.randn(10, 3, 5, 5), torch.arange(10)
    seeded = lambda **kwargs: TensorBatches(images, labels, 4, generator=torch.Generator().manual_seed(3), **kwargs)  # noqa: E731
    assert next(seeded(crop=1))[0].shape == (4, 3, 1, 1) and next(TensorBatches(images, labels, 1))[0].shape[0] == 1
    whole, uncropped = seeded(crop=5, flip=True), seeded(flip=True)
    for _ in range(3):
        assert torch.equal(next(whole)[0], next(uncropped)[0])
    default, zero = TensorBatches(images, labels, 4), TensorBatches(images, labels, 4, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(next(default), next(zero)))
    assert next(TensorBatches(torch.randn(10, 3, 4, 6), labels, 2, crop=4))[0].shape == (2, 3, 4, 4)
    for crop, (h, w) in ((0, (5, 5)), (5, (4, 6))):
        with pytest.raises(ValueError, match=rf"^crop must be in 1\.\.{min(h, w)} \(the images are {h} x {w}\), got {crop}$"):
            TensorBatches(torch.randn(10, 3, h, w), labels, 4, crop=crop)
    with pytest.raises(ValueError, match=r"^batch_size must be positive, got 0$"):
        TensorBatches(images, labels, 0)


def test_centre_crops_take_the_middle_rows_and_columns_of_a_non_square_image():
    """Rows and columns each from their own size (a 6 x 9 image's 4 x 4 centre: rows 1-4, columns 3-6; the
    lower-right middle when the margin is odd)."""
    images = torch.arange(2 * 6 * 9.0).view(1, 2, 6, 9)
    assert torch.equal(centre_crops(images, 4), images[..., 1:5, 3:7])


def tiny_model():
    return nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(36, 3))


def test_every_setting_reaches_the_optimizer_and_schedule():
    model = tiny_model()
    trainer = Trainer(model, OptimizerSettings("sgd", lr=0.1, weight_decay=0.05),
                      ScheduleSettings("multistep", total_steps=6, milestones=(2, 4)), label_smoothing=0.1)
    assert trainer.lr == 0.1 and trainer.label_smoothing == 0.1
    decayed = {id(p) for g in trainer.optimizer.param_groups if g["weight_decay"] == 0.05 for p in g["params"]}
    assert decayed == {id(model[0].weight), id(model[4].weight)}  # conv and linear weights only
    x, y = torch.randn(8, 1, 5, 5), torch.randint(0, 3, (8,))
    used, lrs = [], []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: used.append(opt.param_groups[0]["lr"]))
    for _ in range(5):
        trainer.step(x, y)
        lrs.append(trainer.lr)
    assert lrs == pytest.approx([0.1, 0.01, 0.01, 0.001, 0.001])  # 10x at steps 2 and 4
    assert used == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001])  # update k runs at step k's LR


@pytest.mark.parametrize("optimizer", ["sgd", "rmsprop"])
def test_weight_decay_spares_every_norm_act_vector_and_every_bias(optimizer):
    """Only convolution and linear weights decay; gamma, beta, v0 and v1 of every norm-act layer (a
    registered one, FRN's threshold, a searched layer as the proxy builds it) and every bias do not."""
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, bias=False), build_norm_act("evonorm_s0", 4, groups=2),
        nn.Conv2d(4, 4, 1), build_norm_act("frn", 4),
        nn.Conv2d(4, 4, 1, bias=False), GraphLayer(parse("max(x * v1, v0)"), 4),
        nn.Flatten(), nn.Linear(36, 3),
    )
    trainer = Trainer(model, OptimizerSettings(optimizer, lr=0.1, weight_decay=0.05), CONSTANT)
    decay_of = {id(p): g["weight_decay"] for g in trainer.optimizer.param_groups for p in g["params"]}
    names = {name: decay_of[id(p)] for name, p in model.named_parameters()}
    assert {n for n, d in names.items() if d == 0.05} == {"0.weight", "2.weight", "4.weight", "7.weight"}
    assert {n for n, d in names.items() if d == 0.0} == {
        "1.weight", "1.bias", "1.v1", "2.bias", "3.weight", "3.bias", "3.v0", "5.weight", "5.bias", "5.v0", "5.v1",
        "7.bias"}


def test_optimizers_are_those_of_the_cited_recipes():
    """SGD with Nesterov momentum 0.9 (the paper's proxy task, Appendix C); RMSProp with decay 0.9,
    momentum 0.9 and epsilon 1e-3, the official EfficientNet training whose LR 0.016 the paper uses."""
    sgd = Trainer(tiny_model(), OptimizerSettings("sgd", lr=0.1), CONSTANT).optimizer
    assert isinstance(sgd, torch.optim.SGD)
    assert {(g["momentum"], g["nesterov"], g["dampening"]) for g in sgd.param_groups} == {(0.9, True, 0)}
    rms = Trainer(tiny_model(), OptimizerSettings("rmsprop", lr=0.016), CONSTANT).optimizer
    assert isinstance(rms, torch.optim.RMSprop)
    assert {(g["alpha"], g["momentum"], g["eps"]) for g in rms.param_groups} == {(0.9, 0.9, 1e-3)}


def test_non_finite_loss_is_reported_and_changes_nothing():
    model = tiny_model()
    trainer = Trainer(model, OptimizerSettings(lr=0.1), CONSTANT)
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.full((8, 1, 5, 5), float("nan"))
    assert math.isnan(trainer.step(x, torch.zeros(8, dtype=torch.long)))
    assert trainer.steps == 0 and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_training_learns_and_evaluation_recalibrates():
    torch.manual_seed(0)
    images = torch.randn(90, 1, 5, 5)
    labels = torch.arange(90) % 3
    images += labels.view(-1, 1, 1, 1).float()  # separable classes
    model = tiny_model()
    trainer = Trainer(model, OptimizerSettings(lr=0.05), ScheduleSettings("cosine", total_steps=60))
    start = evaluate(model, images, labels)
    for (x, y), _ in zip(TensorBatches(images, labels, 32), range(60)):
        trainer.step(x, y)
    model[1].running_mean.fill_(100.0)  # stale moving averages ...
    stale = evaluate(model, images, labels)
    fresh = evaluate(model, images, labels, recalibration_batches=[images[:45], images[45:]])
    assert fresh["accuracy"] > max(0.9, start["accuracy"]) and fresh["accuracy"] > stale["accuracy"]
    assert torch.allclose(model[1].running_mean, model[1].running_mean.new_zeros(4), atol=5)  # ... recomputed


def _smoothed_cross_entropy(logits, labels, smoothing):
    """Label-smoothed cross-entropy by hand (Szegedy et al., 2016): the target puts 1 - smoothing on the
    label and smoothing / K on every class, float64."""
    log_p = torch.log_softmax(logits.double(), dim=1)
    target = torch.full_like(log_p, smoothing / logits.shape[1])
    target[torch.arange(len(labels)), labels] += 1 - smoothing
    return -(target * log_p).sum(1).mean().item()


def test_step_trains_on_the_given_label_smoothing():
    """EfficientNet's recipe smooths labels by 0.1; the loss a step reports (and differentiates) is the
    smoothed cross-entropy of the model's logits before the update."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(25, 4))  # no batch statistics: the logits are reproducible
    x, y = torch.randn(8, 1, 5, 5), torch.randint(0, 4, (8,))
    for smoothing in (0.0, 0.1, 0.4):
        trainer = Trainer(model, OptimizerSettings(lr=0.1), CONSTANT, label_smoothing=smoothing)
        with torch.no_grad():
            expected = _smoothed_cross_entropy(model(x), y, smoothing)
        assert trainer.step(x, y) == pytest.approx(expected, rel=1e-5)


def test_evaluate_reports_accuracy_and_mean_loss_over_every_image():
    """Accuracy and mean cross-entropy over all images, by hand in float64, with batches that do not
    divide the image count (10 images in batches of 4)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(25, 3))
    x, y = torch.randn(10, 1, 5, 5), torch.randint(0, 3, (10,))
    with torch.no_grad():
        logits = model(x).double()
    loss = -torch.log_softmax(logits, 1)[torch.arange(10), y].mean().item()
    accuracy = (logits.argmax(1) == y).double().mean().item()
    result = evaluate(model, x, y, batch_size=4)
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["accuracy"] == pytest.approx(accuracy)


@pytest.mark.parametrize("training", [True, False])
def test_evaluate_restores_the_models_mode(training):
    """``evaluate`` runs the model in eval mode and hands it back in the mode it was given: a
    training loop that evaluates between epochs keeps training with batch statistics and dropout."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Dropout(0.5), nn.Flatten(), nn.Linear(36, 3))
    model.train(training)
    evaluate(model, torch.randn(6, 1, 5, 5), torch.randint(0, 3, (6,)), batch_size=4)
    assert all(m.training == training for m in model.modules())


def test_trainer_state_restores_schedule_momentum_and_step_count():
    """A trainer rebuilt from ``state_dict`` continues exactly: the LR schedule's position (a 10x decay at
    step 2), SGD's momentum buffers and the step count; the next update matches the original's."""
    torch.manual_seed(0)
    optimizer = OptimizerSettings(lr=0.2, weight_decay=0.0)
    schedule = ScheduleSettings("multistep", total_steps=6, milestones=(2,))
    x, y = torch.randn(8, 1, 5, 5), torch.randint(0, 3, (8,))
    model = nn.Sequential(nn.Flatten(), nn.Linear(25, 3))
    trainer = Trainer(model, optimizer, schedule)
    for _ in range(3):
        trainer.step(x, y)
    twin = nn.Sequential(nn.Flatten(), nn.Linear(25, 3))
    twin.load_state_dict(model.state_dict())
    resumed = Trainer(twin, optimizer, schedule)
    resumed.load_state_dict(copy.deepcopy(trainer.state_dict()))  # as through a checkpoint file: no shared buffers
    assert resumed.steps == 3 and resumed.lr == pytest.approx(0.02)
    trainer.step(x, y)
    resumed.step(x, y)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert resumed.lr == trainer.lr and resumed.steps == trainer.steps == 4


def test_evaluate_counts_ties_as_the_first_class_and_returns_a_fraction():
    """Accuracy is a fraction (the search's quality threshold is 0.2, not 20): with tied logits argmax takes
    the first class, so 2 of 5 are right here whatever the batch split."""
    logits = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 2.0, 2.0], [0.0, 2.0, 2.0], [3.0, 0.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 2, 1])
    for batch_size in (1, 2, 5, 512):
        result = evaluate(nn.Identity(), logits, labels, batch_size=batch_size)
        assert result["accuracy"] == pytest.approx(0.4)


def test_the_schedule_is_in_steps_warmup_included():
    """Linear warmup from 0 over ``warmup_steps``, then the decay over the whole ``total_steps`` (warmup
    included, as Goyal et al.), clamped at its end; multi-step decays 10x at each milestone step."""
    cosine = ScheduleSettings("cosine", total_steps=20, warmup_steps=4)
    assert [cosine.multiplier(s) for s in (0, 1, 2)] == pytest.approx([0.0, 0.25, 0.5])
    assert cosine.multiplier(4) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 20)))
    assert cosine.multiplier(20) == cosine.multiplier(30) == pytest.approx(0.0, abs=1e-12)
    polynomial = ScheduleSettings("polynomial", total_steps=8, poly_power=3.0)
    assert polynomial.multiplier(4) == pytest.approx(0.125) and polynomial.multiplier(9) == 0.0
    multistep = ScheduleSettings("multistep", total_steps=10, milestones=(3, 6))
    assert [multistep.multiplier(s) for s in (2, 3, 5, 6, 10)] == pytest.approx([1, 0.1, 0.1, 0.01, 0.01])
    assert ScheduleSettings("constant", total_steps=5).multiplier(100) == 1.0


def test_the_bounds_of_label_smoothing_and_workers_are_accepted():
    """label_smoothing 0 and 1 (uniform targets) are both in [0, 1]; one worker is a worker."""
    for smoothing in (0.0, 1.0):
        assert Trainer(tiny_model(), OptimizerSettings(), CONSTANT, label_smoothing=smoothing).label_smoothing == smoothing
    assert Trainer(tiny_model(), OptimizerSettings(), CONSTANT, workers=1).workers == 1


@pytest.mark.parametrize("build,message", [
    (lambda: OptimizerSettings("adam"), "unknown optimizer 'adam'; accepted: sgd, rmsprop"),
    (lambda: OptimizerSettings(lr=0.0), "lr must be positive, got 0.0"),
    (lambda: OptimizerSettings(weight_decay=-1e-4), "weight_decay must be >= 0, got -0.0001"),
    (lambda: ScheduleSettings("step", 10), "unknown schedule 'step'; accepted: multistep, cosine, polynomial, constant"),
    (lambda: ScheduleSettings("cosine", 0), "total_steps must be positive and warmup_steps >= 0, got 0 and 0.0"),
    (lambda: ScheduleSettings("cosine", 10, warmup_steps=-1), "warmup_steps >= 0, got 10 and -1"),
    (lambda: Trainer(tiny_model(), OptimizerSettings(), CONSTANT, label_smoothing=1.5),
     r"label_smoothing must be in \[0, 1\], got 1.5"),
    (lambda: Trainer(tiny_model(), OptimizerSettings(), CONSTANT, workers=0), "workers must be a positive int, got 0"),
    (lambda: Trainer(tiny_model(), OptimizerSettings(), CONSTANT, workers=True),
     "workers must be a positive int, got True"),
    (lambda: Trainer(tiny_model(), OptimizerSettings(), CONSTANT, workers=3).step(
        torch.randn(8, 1, 5, 5), torch.zeros(8, dtype=torch.long)),
     "a batch of 8 images does not split into 3 workers: give a multiple of 3"),
])
def test_bad_settings_name_the_value_and_what_is_accepted(build, message):
    with pytest.raises(ValueError, match=message):
        build()



def ghost_batch_model():
    """Two batch-statistics layers (BN-ReLU and EvoNorm-B0) between convolutions, float64."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, bias=False), build_norm_act("bn_relu", 4), nn.Conv2d(4, 4, 1, bias=False),
        build_norm_act("evonorm_b0", 4, impl="reference"), nn.Flatten(), nn.Linear(36, 3),
    ).double()


def test_ghost_batches_are_the_workers_run_apart_with_one_whole_batch_gradient():
    """workers=3: every batch-statistics layer sees one worker's images (per-chunk statistics: its output over
    a worker's images is the layer applied to those images alone); the update is SGD on the whole batch's mean
    loss, i.e. the mean of the three workers' gradients; the moving averages take one update per worker, in
    worker order."""
    images, labels = torch.randn(12, 2, 5, 5, dtype=torch.float64) * 2 + 1, torch.arange(12) % 3
    model, twin = ghost_batch_model(), ghost_batch_model()
    seen = []
    model[1].register_forward_hook(lambda module, args, out: seen.append(out.detach().clone()))
    trainer = Trainer(model, OptimizerSettings(lr=0.1, weight_decay=0.0), CONSTANT, workers=3)
    assert trainer.ghost_batches
    loss = trainer.step(images, labels)

    parts = list(zip(images.chunk(3), labels.chunk(3)))
    worker_losses = [nn.functional.cross_entropy(twin(x), y) for x, y in parts]  # one worker at a time
    gradients = torch.autograd.grad(sum(worker_losses) / 3, list(twin.parameters()))
    assert loss == pytest.approx(sum(part.item() for part in worker_losses) / 3, rel=1e-12)
    for (name, updated), before, gradient in zip(model.named_parameters(), twin.parameters(), gradients):
        nesterov_first_step = 0.1 * (1 + 0.9) * gradient  # the momentum buffer starts at the gradient
        torch.testing.assert_close(updated, before - nesterov_first_step, rtol=1e-12, atol=1e-12, msg=name)
    for name, buffer in twin.named_buffers():
        torch.testing.assert_close(model.get_buffer(name), buffer, rtol=1e-12, atol=1e-12, msg=name)
    assert int(model[1].num_batches_tracked) == 3
    for (x, _), out in zip(parts, seen):  # BN-ReLU's statistics are the worker's own
        alone = build_norm_act("bn_relu", 4).double()
        torch.testing.assert_close(out, alone(twin[0](x)), rtol=1e-12, atol=1e-12)


def test_ghost_batches_change_nothing_without_batch_statistics():
    """A model whose layers use no batch statistics gives the same step with any number of workers, in one pass."""
    def model():
        torch.manual_seed(1)
        return nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), build_norm_act("gn_relu", 4, groups=2),
                             nn.Flatten(), nn.Linear(36, 3)).double()

    images, labels = torch.randn(8, 1, 5, 5, dtype=torch.float64), torch.arange(8) % 3
    one, four = model(), model()
    calls = []
    four[1].register_forward_hook(lambda *args: calls.append(1))
    trainers = [Trainer(m, OptimizerSettings(lr=0.1), CONSTANT, workers=w) for m, w in ((one, 1), (four, 4))]
    assert not trainers[1].ghost_batches
    assert trainers[0].step(images, labels) == pytest.approx(trainers[1].step(images, labels), rel=1e-12)
    assert len(calls) == 1
    for a, b in zip(one.parameters(), four.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
