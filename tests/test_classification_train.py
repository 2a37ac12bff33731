"""Training: recipes against the paper, loss goes down, checkpoint/resume is exact, CLI errors."""
import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

from classification.data import load_digits_proxy
from classification.recipes import RecipeLR, lr_multiplier, recipe_for, scaled_lr
from classification.train import TrainConfig, config_from_argv, evaluate, main, train
from evonorm_core.experiment.distributed import DistributedContext
from evonorm_core.experiment.config import ConfigError
from evonorm_core.experiment.files import load_checkpoint
from evonorm_core import build_norm_act


# These models see tiny batches: a second intra-op thread only adds contention.
pytestmark = pytest.mark.usefixtures("one_thread")


def test_paper_base_learning_rates_and_batches():
    for model in ("resnet50", "resnet101", "mobilenetv2", "mnasnet_b1"):
        assert recipe_for(model).base_lr == 0.1
    for model in ("efficientnet_b0", "efficientnet_b5"):
        assert recipe_for(model).base_lr == 0.016
    assert recipe_for("mobilenetv2", "evonorm_s0").base_lr == 0.03
    assert recipe_for("mobilenetv2", "gn_relu").base_lr == 0.03
    assert recipe_for("mobilenetv2", "evonorm_b0").base_lr == 0.1
    assert recipe_for("resnet50", "evonorm_s0").base_lr == 0.1
    b5 = recipe_for("efficientnet_b5")
    assert (b5.batch_per_worker, b5.resolution) == (64, 456)
    assert (recipe_for("resnet50").batch_per_worker, recipe_for("resnet50").resolution) == (128, 224)
    assert recipe_for("resnet50").workers == 8 and recipe_for("mobilenetv2").workers == 32
    assert [recipe_for(m).schedule for m in ("resnet50", "mobilenetv2", "mnasnet_b1", "efficientnet_b0")] == [
        "multistep", "cosine", "cosine", "polynomial"]


def test_linear_lr_scaling_over_table3_batches():
    # ResNet-50, 8 workers: 1024 images -> 0.4, 32 images -> 0.0125
    assert scaled_lr(0.1, 8 * 128) == pytest.approx(0.4)
    assert scaled_lr(0.1, 8 * 4) == pytest.approx(0.0125)
    assert recipe_for("mobilenetv2", "frn").peak_lr(32 * 128) == pytest.approx(0.48)


def test_schedules_warmup_and_decay():
    resnet = recipe_for("resnet50")
    assert lr_multiplier(resnet, 0.0) == 0.0
    assert lr_multiplier(resnet, 2.5) == pytest.approx(0.5)
    assert [lr_multiplier(resnet, e) for e in (10, 30, 60, 85)] == pytest.approx([1, 0.1, 0.01, 0.001])
    cosine = recipe_for("mobilenetv2", epochs=100, warmup_epochs=0)
    assert lr_multiplier(cosine, 50) == pytest.approx(0.5)
    assert lr_multiplier(cosine, 100) == pytest.approx(0.0)
    poly = recipe_for("efficientnet_b0", epochs=100, warmup_epochs=0, poly_power=2.0)
    assert lr_multiplier(poly, 50) == pytest.approx(0.25)
    # after a warmup the decay still spans the whole run (Goyal et al.: warmup is part of it) and ends at 0
    warm = recipe_for("mobilenetv2", epochs=100, warmup_epochs=5)
    assert lr_multiplier(warm, 5) == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 100)))
    assert lr_multiplier(warm, 100) == pytest.approx(0.0, abs=1e-12)
    warm_poly = recipe_for("efficientnet_b0", epochs=100, warmup_epochs=5)
    assert lr_multiplier(warm_poly, 100) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="accepted: multistep"):
        recipe_for("resnet50", schedule="step")
    with pytest.raises(ValueError, match="no recipe for model"):
        recipe_for("vgg16")


def test_scheduler_is_per_step():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = RecipeLR(opt, recipe_for("resnet50"), steps_per_epoch=10)
    lrs = []
    for _ in range(30):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 0.0 and lrs[10] == pytest.approx(0.2) and lrs[25] == pytest.approx(0.5)


def quick_config(tmp_path, **overrides):
    config = TrainConfig(model="mobilenetv2_cifar", norm_act="evonorm_s0", image_size=8, train_subset=64,
                         batch_size=16, epochs=2, base_lr=0.4, warmup_epochs=0, output_dir=str(tmp_path / "run"),
                         progress=False)
    return dataclasses.replace(config, **overrides)


def loss_on(model, images, labels):
    model.eval()
    with torch.no_grad():
        return F.cross_entropy(model(images), labels).item()


@pytest.mark.slow
def test_few_steps_reduce_the_training_loss(tmp_path):
    """Ten SGD steps on 32 digits lower the loss on those digits (a batch-independent layer, so
    eval mode computes what training saw)."""
    from classification.anchors import build_anchor

    config = quick_config(tmp_path, model="resnet50_cifar", train_subset=32, batch_size=32, epochs=10,
                          base_lr=0.1, schedule="constant")
    train_x, train_y, _, _ = load_digits_proxy(8)
    images, labels = train_x[:32], train_y[:32]
    torch.manual_seed(config.seed)
    initial = loss_on(build_anchor(config.model, config.norm_act), images, labels)
    result = train(config)
    trained = build_anchor(config.model, config.norm_act)
    trained.load_state_dict(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["model"])
    assert result["steps"] == 10
    assert loss_on(trained, images, labels) < initial - 0.3


@pytest.mark.slow
def test_resume_continues_schedule_and_weights_exactly(tmp_path):
    straight = train(quick_config(tmp_path / "a", schedule="cosine"))
    train(quick_config(tmp_path / "b", schedule="cosine", max_steps=4))
    state = load_checkpoint(tmp_path / "b" / "run" / "checkpoint.pt")
    assert state["step"] == 4 and state["trainer"]["scheduler"]["last_epoch"] == 4
    resumed = train(quick_config(tmp_path / "b", schedule="cosine", resume=True))
    assert resumed["steps"] == straight["steps"] == 8
    a = load_checkpoint(tmp_path / "a" / "run" / "checkpoint.pt")
    b = load_checkpoint(tmp_path / "b" / "run" / "checkpoint.pt")
    assert a["trainer"]["optimizer"]["param_groups"][0]["lr"] == b["trainer"]["optimizer"]["param_groups"][0]["lr"]
    assert math.isclose(a["trainer"]["optimizer"]["param_groups"][0]["lr"], 0.4 * 16 / 256 * 0.5 * (1 + math.cos(math.pi * 8 / 8)),
                        abs_tol=1e-12)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert json.loads((tmp_path / "b" / "run" / "result.json").read_text())["history"] == resumed["history"]


def test_cli_defaults_to_digits_and_explains(capsys, tmp_path):
    config = config_from_argv(["--epochs", "1", "--output-dir", str(tmp_path / "o")])
    assert config.data == "digits" and "embedded digits" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--train-subset", "0"], "--train-subset must be >= 1, got 0"),
    (["--epochs", "-1"], "--epochs must be > 0, got -1.0"),
    (["--norm-act", "bn_tanh"], "valid names"),
    (["--data", "cifar10"], "--data cifar10 needs --data-dir"),
    (["--model", "resnet50_cifar", "--width-multiplier", "2"], "fixed by the paper for anchors"),
    (["--model", "resnet50", "--table", "table13"], "table13 has no 'resnet50' column"),
])
def test_cli_errors_name_the_bad_value(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([*argv, "--output-dir", str(tmp_path / "o")])
    assert message in capsys.readouterr().err


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="cifar-10-batches-py"):
        main(["--data", "cifar10", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "o")])


def test_an_earlier_run_is_neither_overwritten_nor_resumed_with_other_settings(tmp_path, capsys):
    train(quick_config(tmp_path, max_steps=2))
    before = (tmp_path / "run" / "checkpoint.pt").read_bytes()
    with pytest.raises(SystemExit, match="is not empty .*pass --resume"):
        main(["--output-dir", str(tmp_path / "run"), "--image-size", "8"])
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == before
    with pytest.raises(SystemExit):
        main(["--resume", "--output-dir", str(tmp_path / "run"), "--norm-act", "bn_relu"])
    assert "--norm-act cannot change when resuming" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"cannot resume .*config.json: it was started with different \['norm_act'\]"):
        train(quick_config(tmp_path, norm_act="gn_relu", resume=True))


def test_resume_from_the_command_line_keeps_the_runs_settings(tmp_path):
    train(quick_config(tmp_path, max_steps=2))
    config = config_from_argv(["--resume", "--output-dir", str(tmp_path / "run"), "--max-steps", "3"])
    assert config == quick_config(tmp_path, max_steps=3, resume=True)


def test_corrupt_or_foreign_checkpoints_are_named(tmp_path):
    train(quick_config(tmp_path, max_steps=2))
    path = tmp_path / "run" / "checkpoint.pt"
    state = load_checkpoint(path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(SystemExit, match=r"checkpoint.pt' is truncated"):
        main(["--resume", "--output-dir", str(tmp_path / "run")])
    state["model"] = {k: v[:1] for k, v in state["model"].items()}
    torch.save(state, path)
    with pytest.raises(SystemExit, match=r"checkpoint.pt' does not fit this run"):
        main(["--resume", "--output-dir", str(tmp_path / "run")])


def test_evaluation_reports_top1_in_percent_and_the_mean_loss():
    """3 of 4 images right (the paper's tables are in %): top-1 75.0; loss is the mean cross-entropy."""
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0]])
    labels = torch.tensor([0, 1, 0, 1])
    model = torch.nn.Identity()  # the "images" are the logits
    metrics = evaluate(model, [(logits[:3], labels[:3]), (logits[3:], labels[3:])], DistributedContext())
    assert metrics["top1"] == 75.0
    assert metrics["loss"] == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-6)


# The values the paper leaves to the cited original setups (recipes.py marks them "not in the paper"):
# ResNet as Goyal et al. (weight decay 1e-4, 5 warmup epochs), MobileNetV2/MnasNet as Sandler et al.
# (weight decay 4e-5), EfficientNet as Tan & Le's official training (RMSProp, weight decay 1e-5, label
# smoothing 0.1); every schedule warms up linearly for 5 epochs (section 5.1: "a linear warmup phase").
CITED_SETUP = {
    "resnet50": dict(weight_decay=1e-4, optimizer="sgd", label_smoothing=0.0),
    "resnet101": dict(weight_decay=1e-4, optimizer="sgd", label_smoothing=0.0),
    "mobilenetv2": dict(weight_decay=4e-5, optimizer="sgd", label_smoothing=0.0),
    "mnasnet_b1": dict(weight_decay=4e-5, optimizer="sgd", label_smoothing=0.0),
    "efficientnet_b0": dict(weight_decay=1e-5, optimizer="rmsprop", label_smoothing=0.1, poly_power=2.0),
    "efficientnet_b5": dict(weight_decay=1e-5, optimizer="rmsprop", label_smoothing=0.1, poly_power=2.0),
}


@pytest.mark.parametrize("model", sorted(CITED_SETUP))
def test_recipe_values_from_the_cited_setups(model):
    recipe = recipe_for(model)
    for field, value in {"warmup_epochs": 5.0, "randaugment": False, **CITED_SETUP[model]}.items():
        assert getattr(recipe, field) == value, (model, field)


def test_only_mobilenetv2_lowers_its_lr_for_batch_free_layers():
    """Section 5.1 lowers the base LR to 0.03 for MobileNetV2 alone; MnasNet and EfficientNet keep theirs
    with a batch-independent layer, and a table override of another field keeps the lowered LR."""
    assert recipe_for("mnasnet_b1", "evonorm_s0").base_lr == 0.1
    assert recipe_for("efficientnet_b0", "gn_relu").base_lr == 0.016
    assert recipe_for("mobilenetv2", "frn", epochs=10).base_lr == 0.03
    assert recipe_for("mobilenetv2", "bn_swish").base_lr == 0.1


def test_decay_schedules_stay_at_their_end_after_the_last_epoch():
    """Past ``epochs`` the cosine and polynomial factors stay at 0 (the progress is clamped): cosine would
    rise again and (1 - progress)^2 would turn positive; multistep stays at its last stage."""
    cosine = recipe_for("mobilenetv2", epochs=100, warmup_epochs=0)
    poly = recipe_for("efficientnet_b0", epochs=100, warmup_epochs=0)
    for epoch in (100, 120, 150, 200):
        assert lr_multiplier(cosine, epoch) == pytest.approx(0.0, abs=1e-12)
        assert lr_multiplier(poly, epoch) == pytest.approx(0.0, abs=1e-12)
    assert lr_multiplier(poly, 25) == pytest.approx(0.75 ** 2)
    cubic = recipe_for("efficientnet_b0", epochs=100, warmup_epochs=0, poly_power=3.0)
    assert lr_multiplier(cubic, 50) == pytest.approx(0.125)
    assert lr_multiplier(recipe_for("resnet50"), 120) == pytest.approx(0.001)
    assert lr_multiplier(recipe_for("resnet50"), 29.99) == 1.0  # the first decay is at epoch 30, not before
    assert lr_multiplier(recipe_for("resnet50", schedule="constant"), 70) == 1.0


def test_warmup_is_linear_from_zero_for_every_schedule():
    for model in ("resnet50", "mobilenetv2", "efficientnet_b0"):
        recipe = recipe_for(model, warmup_epochs=4)
        assert [lr_multiplier(recipe, e) for e in (0, 1, 2, 3)] == pytest.approx([0, 0.25, 0.5, 0.75])


@pytest.mark.parametrize("overrides,message", [
    ({"base_lr": 0.0}, "base_lr and epochs must be positive"),
    ({"epochs": 0}, "base_lr and epochs must be positive"),
    ({"warmup_epochs": -1.0}, "warmup_epochs >= 0"),
    ({"optimizer": "adam"}, "unknown optimizer 'adam'; accepted: sgd, rmsprop"),
    ({"lr": 0.1}, r"unknown recipe field\(s\) \['lr'\]"),
])
def test_bad_recipe_overrides_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        recipe_for("resnet50", **overrides)


def test_proxy_recipe_of_the_anchors_is_the_papers_proxy_task():
    """Appendix C, proxy task: batch 128, "SGD with learning rate 0.1, Nesterov momentum 0.9 and weight
    decay 1e-4" (the LR at 128 images, i.e. 0.2 per 256), no warmup, one worker at 32x32."""
    from classification.train import PROXY_RECIPE, resolve_recipe

    assert PROXY_RECIPE.peak_lr(128) == pytest.approx(0.1)
    assert (PROXY_RECIPE.batch_per_worker, PROXY_RECIPE.workers, PROXY_RECIPE.resolution) == (128, 1, 32)
    assert (PROXY_RECIPE.optimizer, PROXY_RECIPE.weight_decay, PROXY_RECIPE.warmup_epochs) == ("sgd", 1e-4, 0.0)
    assert PROXY_RECIPE.label_smoothing == 0.0
    for anchor in ("resnet50_cifar", "mobilenetv2_cifar", "efficientnet_cifar"):
        assert resolve_recipe(TrainConfig(model=anchor)) == PROXY_RECIPE
    overridden = resolve_recipe(TrainConfig(model="resnet50_cifar", base_lr=0.4, batch_size=32, epochs=3,
                                            schedule="constant", warmup_epochs=1, randaugment=True))
    assert (overridden.base_lr, overridden.batch_per_worker, overridden.epochs, overridden.schedule,
            overridden.warmup_epochs, overridden.randaugment) == (0.4, 32, 3, "constant", 1, True)
