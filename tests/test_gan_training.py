"""A few CPU training steps on the built-in digits, EMA, standing statistics, checkpoint/resume, CLI."""
import os

import pytest
import torch
from torch import nn

from gan.config import make_config
from gan.data import digits_dataset
from gan.ema import EMA
from gan.losses import discriminator_hinge_loss, generator_hinge_loss
from gan.sampling import batch_stat_layers, sample_latents, standing_statistics
from gan.trainer import Trainer
from gan import train_biggan

TINY = dict(channels=4, dim_z=8, shared_dim=8, depth=1, micro_batch=8, batch_size=8, total_steps=2, ema_start=0,
            ema_decay=0.5, log_every=1, sample_every=2, save_every=1)


@pytest.fixture(scope="module")
def digits():
    return digits_dataset(32)


def tiny_trainer(run_dir, dataset, norm="evonorm_b0", **overrides):
    return Trainer(make_config("digits", norm=norm, **{**TINY, **overrides}), dataset, str(run_dir))


def parameters(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_digits_are_real_32px_images(digits):
    images, labels = digits.tensors
    assert images.shape == (1797, 3, 32, 32) and images.min() >= -1 and images.max() <= 1
    assert sorted(labels.unique().tolist()) == list(range(10))


def test_hinge_losses():
    real, fake = torch.tensor([2.0, 0.5]), torch.tensor([-2.0, 0.0])
    assert discriminator_hinge_loss(real, fake).item() == pytest.approx((0 + 0.5) / 2 + (0 + 1) / 2)
    assert generator_hinge_loss(fake).item() == pytest.approx(1.0)


@pytest.mark.parametrize("norm", ["evonorm_b0", "evonorm_s0"])
def test_training_steps_are_finite_and_update_weights(tmp_path, digits, norm):
    trainer = tiny_trainer(tmp_path, digits, norm)
    g_before, d_before = parameters(trainer.generator), parameters(trainer.discriminator)
    for _ in range(2):
        scalars = trainer.train_step()
    assert all(torch.isfinite(torch.tensor(v)) for v in scalars.values())
    assert set(scalars) == {"loss_d", "d_real", "d_fake", "loss_g"}
    for before, model in ((g_before, trainer.generator), (d_before, trainer.discriminator)):
        changed = [not torch.equal(b, a) for b, a in zip(before, model.parameters())]
        assert sum(changed) > len(changed) // 2
    assert trainer.step == 2


def test_gradient_accumulation_splits_the_batch(tmp_path, digits):
    trainer = tiny_trainer(tmp_path, digits, batch_size=16, micro_batch=8)
    assert trainer.accumulation == 2
    with pytest.raises(ValueError, match="multiple of micro_batch"):
        make_config("digits", batch_size=12, micro_batch=8).accumulation(1)


def test_ema_update():
    model = nn.Linear(3, 2)
    ema = EMA(model, decay=0.75, start=2)
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(model, step=1)  # before start: a copy
    torch.testing.assert_close(ema.model.weight, model.weight)
    old = ema.model.weight.clone()
    with torch.no_grad():
        model.weight.mul_(3.0)
    ema.update(model, step=2)
    torch.testing.assert_close(ema.model.weight, 0.75 * old + 0.25 * model.weight)
    assert not any(p.requires_grad for p in ema.model.parameters())
    with pytest.raises(ValueError, match="decay"):
        EMA(model, decay=1.0)


def test_standing_statistics_average_batch_statistics(tmp_path, digits):
    generator = tiny_trainer(tmp_path, digits, norm="bn_relu").generator.eval()
    conditional = generator.blocks[0].norm1
    layer = conditional.norm
    inputs = []
    handle = conditional.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach().double()))
    assert standing_statistics(generator, num_batches=3, batch_size=4, seed=5) == len(batch_stat_layers(generator))
    handle.remove()
    assert len(inputs) == 3 and not generator.training  # mode restored
    expected_var = torch.stack([x.var(dim=(0, 2, 3), unbiased=True) for x in inputs]).mean(0)
    expected_mean = torch.stack([x.mean(dim=(0, 2, 3)) for x in inputs]).mean(0)
    torch.testing.assert_close(layer.running_var.double(), expected_var, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(layer.running_mean.double(), expected_mean, rtol=1e-4, atol=1e-6)
    assert layer.momentum == 0.1  # restored
    assert standing_statistics(tiny_trainer(tmp_path, digits, norm="evonorm_s0").generator, 3, 4) == 0


def test_checkpoint_resume(tmp_path, digits):
    trainer = tiny_trainer(tmp_path, digits)
    trainer.train()
    assert os.path.isfile(tmp_path / "checkpoints" / "last.pt")
    assert os.path.isfile(tmp_path / "samples" / "step_0000002.png")
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "tb"))

    resumed = tiny_trainer(tmp_path, digits, total_steps=3)
    assert resumed.resume() and resumed.step == 2
    for a, b in zip(trainer.generator.state_dict().values(), resumed.generator.state_dict().values()):
        torch.testing.assert_close(a, b)
    for a, b in zip(trainer.ema.model.state_dict().values(), resumed.ema.model.state_dict().values()):
        torch.testing.assert_close(a, b)
    assert resumed.opt_g.state_dict()["state"][0]["step"] == trainer.opt_g.state_dict()["state"][0]["step"]
    resumed.train()
    assert resumed.step == 3


@pytest.mark.slow
def test_cli_trains_resumes_and_refuses_to_overwrite(tmp_path, capsys):
    args = ["--run-dir", str(tmp_path), "--norm", "evonorm_s0", "--channels", "4", "--batch-size", "8",
            "--micro-batch", "8", "--steps", "1", "--sample-every", "1", "--threads", "1"]
    train_biggan.main(args)
    out = capsys.readouterr().out
    assert "built-in demo" in out and "step 1/1" in out
    train_biggan.main(args[:-6] + ["--steps", "2", "--resume"])
    assert "resumed" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--resume"):
        train_biggan.main(args)
    with pytest.raises(SystemExit, match="valid names"):
        train_biggan.main(["--norm", "bn_tanh"])
    with pytest.raises(SystemExit, match="--data-root"):
        train_biggan.main(["--dataset", "cifar10", "--run-dir", str(tmp_path / "c")])


def test_latents():
    z, y = sample_latents(5, 3, 4, generator=torch.Generator().manual_seed(0))
    assert z.shape == (5, 3) and y.dtype == torch.long and 0 <= int(y.min()) and int(y.max()) < 4


def test_eta_format_counts_days():
    from gan.trainer import format_duration

    assert format_duration(3725) == "01:02:05" and format_duration(2 * 86_400 + 61) == "2d 00:01:01"
