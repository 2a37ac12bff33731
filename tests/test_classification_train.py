"""Training: recipes against the paper, loss goes down, checkpoint/resume is exact, CLI errors."""
import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

from classification.data import load_digits_proxy
from classification.recipes import RecipeLR, lr_multiplier, recipe_for, scaled_lr
from classification.train import TrainConfig, main, parse_args, train
from evonorm_core import build_norm_act


# These models see tiny batches: a second intra-op thread only adds contention.
pytestmark = pytest.mark.usefixtures("one_thread")


def test_paper_base_learning_rates_and_batches():
    for model in ("resnet50", "resnet101", "mobilenetv2", "mnasnet_b1"):
        assert recipe_for(model).base_lr == 0.1
    for model in ("efficientnet_b0", "efficientnet_b5"):
        assert recipe_for(model).base_lr == 0.016
    assert recipe_for("mobilenetv2", build_norm_act("evonorm_s0", 32)).base_lr == 0.03
    assert recipe_for("mobilenetv2", build_norm_act("gn_relu", 32)).base_lr == 0.03
    assert recipe_for("mobilenetv2", build_norm_act("evonorm_b0", 32)).base_lr == 0.1
    assert recipe_for("resnet50", build_norm_act("evonorm_s0", 32)).base_lr == 0.1
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
    assert recipe_for("mobilenetv2", build_norm_act("frn", 32)).peak_lr(32 * 128) == pytest.approx(0.48)


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
    trained.load_state_dict(torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["model"])
    assert result["steps"] == 10
    assert loss_on(trained, images, labels) < initial - 0.3


@pytest.mark.slow
def test_resume_continues_schedule_and_weights_exactly(tmp_path):
    straight = train(quick_config(tmp_path / "a", schedule="cosine"))
    train(quick_config(tmp_path / "b", schedule="cosine", max_steps=4))
    state = torch.load(tmp_path / "b" / "run" / "checkpoint.pt", weights_only=False)
    assert state["step"] == 4 and state["trainer"]["scheduler"]["last_epoch"] == 4
    resumed = train(quick_config(tmp_path / "b", schedule="cosine", resume=True))
    assert resumed["steps"] == straight["steps"] == 8
    a = torch.load(tmp_path / "a" / "run" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "run" / "checkpoint.pt", weights_only=False)
    assert a["trainer"]["optimizer"]["param_groups"][0]["lr"] == b["trainer"]["optimizer"]["param_groups"][0]["lr"]
    assert math.isclose(a["trainer"]["optimizer"]["param_groups"][0]["lr"], 0.4 * 16 / 256 * 0.5 * (1 + math.cos(math.pi * 8 / 8)),
                        abs_tol=1e-12)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert json.loads((tmp_path / "b" / "run" / "result.json").read_text())["history"] == resumed["history"]


def test_cli_defaults_to_digits_and_explains(capsys):
    config = parse_args(["--epochs", "1"])
    assert config.data == "digits" and "embedded digits" in capsys.readouterr().out


def test_cli_errors_name_the_bad_value(tmp_path):
    with pytest.raises(SystemExit, match="cifar-10-batches-py"):
        main(["--data", "cifar10", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="train-subset must be in"):
        main(["--train-subset", "0", "--output-dir", str(tmp_path / "o"), "--image-size", "8"])
    with pytest.raises(SystemExit, match="valid names"):
        main(["--norm-act", "bn_tanh", "--output-dir", str(tmp_path / "o")])
