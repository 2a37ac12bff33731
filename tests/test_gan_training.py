"""BigGAN-deep training on the built-in digits: losses by hand, D/G steps, EMA, standing statistics,
paper settings, owned run folders, resume (also after kill -9), the command line."""
import copy
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from evonorm_core.experiment.config import ConfigError
from evonorm_core.experiment.distributed import DistributedContext
from evonorm_core.experiment.files import load_checkpoint
from evonorm_core.experiment.rundir import RunDirError, open_run
from evonorm_core.running_stats import batch_statistics_layers
from evonorm_suite.gan import metrics, train_biggan
from evonorm_suite.gan import trainer as trainer_module
from evonorm_suite.gan.checkpoint import RUN_KIND, build_discriminator, build_generator, load_ema_generator
from evonorm_suite.gan.config import PRESET_OF_DATASET, PRESETS, preset
from evonorm_suite.gan.data import digits_dataset
from evonorm_suite.gan.ema import EMA
from evonorm_suite.gan.layers import SelfAttention
from evonorm_suite.gan.losses import discriminator_hinge_loss, generator_hinge_loss
from evonorm_suite.gan.sampling import grid_latents, sample_latents, save_sample_grid, standing_statistics
from evonorm_suite.gan.train_biggan import SeedRun
from evonorm_suite.gan.trainer import Trainer, infinite_batches, sync_on_last

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(channels=8, dim_z=8, shared_dim=8, depth=1, micro_batch=8, batch_size=8, total_steps=2, ema_start=0,
            ema_decay=0.5, log_every=1, sample_every=2, save_every=1, eval_every=0)


@pytest.fixture(scope="module")
def digits():
    return digits_dataset(16)


def tiny_config(norm="evonorm_b0", **overrides):
    return replace(PRESETS["digits"], norm=norm, **{**TINY, **overrides})


def tiny_trainer(run_dir, dataset, norm="evonorm_b0", resume=False, **overrides):
    return Trainer(tiny_config(norm, **overrides), dataset, run_dir, resume=resume)


def parameters(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_digits_are_real_greyscale_images(digits):
    images, labels = digits.tensors
    assert images.shape == (1438, 1, 16, 16) and images.min() >= -1 and images.max() <= 1
    assert sorted(labels.unique().tolist()) == list(range(10))
    assert len(digits_dataset(16, "val")) == 359


def test_hinge_losses_by_hand():
    real, fake = torch.tensor([2.0, 0.5]), torch.tensor([-2.0, 0.0])
    assert discriminator_hinge_loss(real, fake).item() == pytest.approx((0 + 0.5) / 2 + (0 + 1) / 2)
    assert generator_hinge_loss(fake).item() == pytest.approx(1.0)


def test_paper_preset_is_biggan_deep_as_the_paper_trains_it():
    """BigGAN-deep 128 (Brock et al. 2019) as the paper trains it: values typed from the BigGAN paper and
    BigGAN-PyTorch's launch_BigGAN_deep.sh, not from this code's defaults."""
    paper = PRESETS["imagenet128"]
    assert (paper.resolution, paper.channels, paper.depth, paper.attention) == (128, 128, 2, (64,))
    assert (paper.g_lr, paper.d_lr, tuple(paper.betas), paper.adam_eps) == (5e-5, 2e-4, (0.0, 0.999), 1e-6)
    assert (paper.d_steps, paper.batch_size, paper.dim_z, paper.shared_dim) == (2, 2048, 128, 128)
    assert (paper.ema_decay, paper.ema_start) == (0.9999, 20_000)
    assert paper.sync_batch_stats and paper.image_channels == 3  # cross-replica BN, as BigGAN
    assert replace(paper, norm="evonorm_b0").norm_options == {"sync": True}
    assert replace(paper, norm="evonorm_s0").norm_options == {}  # sync only for batch-statistics layers
    assert replace(paper, norm="gn_relu").norm_options == {"groups": 16}  # Table 5: GN with 16 groups


def test_discriminator_step_follows_the_hinge_loss_computed_by_hand(tmp_path, digits):
    """A D step's loss and gradient are those of mean(relu(1 - D(x))) + mean(relu(1 + D(G(z)))) on the
    very logits it saw; swapping real and fake (or the signs) fails this."""
    trainer = tiny_trainer(tmp_path, digits, "bn_relu")
    seen = {}
    handles = [
        trainer.discriminator.register_forward_hook(
            lambda m, args, out: seen.update(logits=out.detach(), labels=args[1])),
        trainer.generator.register_forward_hook(lambda m, args, out: seen.update(fake_labels=args[1])),
    ]
    reference = {n: p.detach().clone() for n, p in trainer.discriminator.named_parameters()}
    scalars = trainer.discriminator_step()
    for handle in handles:
        handle.remove()
    assert torch.equal(seen["labels"][8:], seen["fake_labels"])  # each fake is judged as the class G drew it for
    real, fake = seen["logits"].view(-1).split(8)
    expected = F.relu(1 - real).mean() + F.relu(1 + fake).mean()
    assert scalars["loss_d"] == pytest.approx(expected.item(), rel=1e-5)
    assert scalars["d_real"] == pytest.approx(real.mean().item(), rel=1e-5)
    assert scalars["d_fake"] == pytest.approx(fake.mean().item(), rel=1e-5)
    moved = [not torch.equal(reference[n], p) for n, p in trainer.discriminator.named_parameters()]
    assert sum(moved) > len(moved) // 2


def test_generator_step_pushes_the_discriminator_score_up(tmp_path, digits):
    trainer = tiny_trainer(tmp_path, digits, "evonorm_s0", g_lr=1e-2)
    d_before = parameters(trainer.discriminator)
    z, y = sample_latents(64, 8, 10, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = trainer.discriminator(trainer.generator(z, y), y).mean()
    trainer.generator_step()
    with torch.no_grad():
        after = trainer.discriminator(trainer.generator(z, y), y).mean()
    assert after > before  # the G loss is -D(G(z)): a G step raises D's score of the fakes
    assert all(torch.equal(a, b) for a, b in zip(d_before, trainer.discriminator.parameters()))


def test_gradient_accumulation_splits_the_batch(tmp_path, digits):
    trainer = tiny_trainer(tmp_path, digits, batch_size=16, micro_batch=8)
    assert trainer.accumulation == 2
    with pytest.raises(ConfigError, match="--batch-size 12 is not a multiple of --micro-batch x processes = 8 x 1"):
        tiny_config(batch_size=12, micro_batch=8).accumulation(1)


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
    generator = tiny_trainer(tmp_path / "a", digits, norm="bn_relu").generator.eval()
    conditional = generator.blocks[0].norm1
    layer = conditional.norm
    inputs = []
    handle = conditional.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach().double()))
    assert standing_statistics(generator, num_batches=3, batch_size=4, seed=5) == len(batch_statistics_layers(generator))
    handle.remove()
    assert len(inputs) == 3 and not generator.training  # mode restored
    expected_var = torch.stack([x.var(dim=(0, 2, 3), unbiased=True) for x in inputs]).mean(0)
    expected_mean = torch.stack([x.mean(dim=(0, 2, 3)) for x in inputs]).mean(0)
    torch.testing.assert_close(layer.running_var.double(), expected_var, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(layer.running_mean.double(), expected_mean, rtol=1e-4, atol=1e-6)
    assert layer.momentum == 0.1  # restored
    assert standing_statistics(tiny_trainer(tmp_path / "b", digits, norm="evonorm_s0").generator, 3, 4) == 0


def test_run_folder_checkpoint_and_resume(tmp_path, digits):
    trainer = tiny_trainer(tmp_path, digits)
    trainer.train()
    for name in ("checkpoints/last.pt", "samples/step_0000002.png", "config.json", "log.jsonl", "curves.png"):
        assert (tmp_path / name).is_file(), name
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "tb"))
    state = load_checkpoint(tmp_path / "checkpoints" / "last.pt")  # plain data: weights_only loads it
    assert state["step"] == 2 and state["config"]["norm"] == "evonorm_b0"
    with pytest.raises(RunDirError, match="is not empty"):
        tiny_trainer(tmp_path, digits)
    resumed = tiny_trainer(tmp_path, digits, total_steps=3, resume=True)
    assert resumed.step == 2
    for a, b in zip(trainer.generator.state_dict().values(), resumed.generator.state_dict().values()):
        torch.testing.assert_close(a, b)
    for a, b in zip(trainer.ema.model.state_dict().values(), resumed.ema.model.state_dict().values()):
        torch.testing.assert_close(a, b)
    assert resumed.opt_g.state_dict()["state"][0]["step"] == trainer.opt_g.state_dict()["state"][0]["step"]
    # the latent stream continues: a resumed run does not replay the latents a fresh run draws at step 0
    fresh = tiny_trainer(tmp_path / "fresh", digits)
    assert not torch.equal(resumed._latents()[0], fresh._latents()[0])
    resumed.train()
    assert resumed.step == 3
    with pytest.raises(ConfigError, match="--channels cannot change when resuming: the run was started with 8, got 16"):
        tiny_trainer(tmp_path, digits, channels=16, resume=True)
    with pytest.raises(RunDirError, match="no run of gan/train_biggan.py in .*: the folder does not exist"):
        tiny_trainer(tmp_path / "none", digits, resume=True)


def test_resume_without_last_pt_continues_from_the_newest_kept_snapshot(tmp_path, digits, capsys):
    """last.pt deleted (its load named it damaged and said to): the run continues from step_N.pt, not step 0."""
    tiny_trainer(tmp_path, digits, total_steps=5, keep_every=2).train()
    (tmp_path / "checkpoints" / "last.pt").unlink()
    capsys.readouterr()
    resumed = tiny_trainer(tmp_path, digits, total_steps=5, keep_every=2, resume=True)
    assert resumed.step == 4
    assert (f"resumed {tmp_path} at step 4 from its kept snapshot step_0000004.pt (it has no last.pt)"
            in capsys.readouterr().out)


def test_resume_without_a_checkpoint_trains_from_step_0_and_says_so(tmp_path, digits, capsys):
    tiny_trainer(tmp_path, digits).train()
    (tmp_path / "checkpoints" / "last.pt").unlink()  # as on a clone that kept the run's metrics only
    capsys.readouterr()
    resumed = tiny_trainer(tmp_path, digits, resume=True)
    assert resumed.step == 0
    assert f"{tmp_path} holds no checkpoints/last.pt to resume from: training from step 0" in capsys.readouterr().out
    resumed.train()
    assert resumed.step == 2 and (tmp_path / "checkpoints" / "last.pt").is_file()


@pytest.mark.slow
def test_cli_trains_resumes_keeps_settings_and_refuses_to_overwrite(tmp_path, capsys):
    args = ["--run-dir", str(tmp_path), "--norm", "evonorm_s0", "--channels", "8", "--batch-size", "8",
            "--micro-batch", "8", "--total-steps", "2", "--sample-every", "1", "--eval-every", "0", "--threads", "1"]
    assert train_biggan.main(args) == 0
    out = capsys.readouterr().out
    assert "built-in demo" in out and "2/2 steps" in out
    assert train_biggan.main(["--run-dir", str(tmp_path), "--total-steps", "3", "--resume", "--eval-every", "0"]) == 0
    assert "resumed" in capsys.readouterr().out
    state = load_checkpoint(tmp_path / "seed0" / "checkpoints" / "last.pt")
    assert state["step"] == 3 and state["config"]["channels"] == 8  # the run's own settings, not the preset's
    with pytest.raises(SystemExit, match="is not empty"):
        train_biggan.main(args)
    with pytest.raises(SystemExit, match="--norm cannot change when resuming: the run was started with evonorm_s0"):
        train_biggan.main(["--run-dir", str(tmp_path), "--resume", "--norm", "bn_relu"])


@pytest.mark.parametrize("argv,message", [
    (["--norm", "bn_tanh"], "valid names"),
    (["--total-steps", "-5"], "--total-steps must be >= 1, got -5"),
    (["--g-lr", "0"], "--g-lr must be > 0, got 0.0"),
    (["--ema-decay", "1"], "--ema-decay must be >= 0 and < 1, got 1.0"),
    (["--resolution", "48"], "--resolution must be one of 16, 32, 64, 128, got 48"),
    (["--channels", "12"], "--channels must be a multiple of 8"),
])
def test_bad_flags_are_clear_errors(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        train_biggan.main([*argv, "--run-dir", str(tmp_path)])
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="--data-root"):
        train_biggan.main(["--dataset", "cifar10", "--run-dir", str(tmp_path / "c")])


@pytest.mark.slow
def test_kill_and_resume_loses_nothing(tmp_path):
    """A run killed with SIGKILL mid-way resumes from its last checkpoint and ends at the same step
    with the same settings; checkpoints are written atomically, so the last one is never torn."""
    run = tmp_path / "run"
    args = [sys.executable, "-m", "evonorm_suite.gan.train_biggan", "--run-dir", str(run), "--norm", "evonorm_b0", "--channels", "8",
            "--batch-size", "8", "--micro-batch", "8", "--total-steps", "400", "--save-every", "1", "--eval-every", "0",
            "--sample-every", "1000", "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = run / "seed0" / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (checkpoint.exists() and load_checkpoint(checkpoint)["step"] >= 3):
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = load_checkpoint(checkpoint)["step"]
    assert 3 <= killed_at < 400
    done = subprocess.run([*args[:3], "--run-dir", str(run), "--resume", "--total-steps", str(killed_at + 2),
                           "--eval-every", "0", "--threads", "1"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed {run / 'seed0'} at step {killed_at}" in done.stdout
    state = load_checkpoint(checkpoint)
    assert state["step"] == killed_at + 2 and state["config"]["norm"] == "evonorm_b0"


def test_latents():
    z, y = sample_latents(5, 3, 4, generator=torch.Generator().manual_seed(0))
    assert z.shape == (5, 3) and y.dtype == torch.long and 0 <= int(y.min()) and int(y.max()) < 4
    _, y = sample_latents(4000, 1, 4, generator=torch.Generator().manual_seed(1))
    assert torch.bincount(y, minlength=4).tolist() == pytest.approx([1000] * 4, abs=100)  # every class, uniformly


def test_train_step_makes_d_steps_discriminator_steps_then_one_generator_step(tmp_path, digits):
    """BigGAN-deep: ``d_steps`` (paper preset 2) D updates per G update, then the EMA."""
    trainer = tiny_trainer(tmp_path, digits, "bn_relu", d_steps=3)
    calls = []
    for name in ("discriminator_step", "generator_step"):
        method = getattr(trainer, name)
        setattr(trainer, name, lambda method=method, name=name: calls.append(name) or method())
    trainer.train_step()
    assert calls == ["discriminator_step"] * 3 + ["generator_step"] and trainer.step == 1


def test_ema_copies_buffers_at_every_update():
    """Moving statistics and spectral-norm vectors are copied from the trained model, not averaged
    and not kept from the first copy."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ema = EMA(model, decay=0.9, start=0)
    model(torch.randn(16, 3))  # training mode: the running statistics move
    ema.update(model, step=1)
    for average, current in zip(ema.model.buffers(), model.buffers()):
        assert torch.equal(average, current)


def test_sample_grid_has_one_row_per_class():
    z, y = grid_latents(dim_z=4, num_classes=10, per_class=8)
    assert z.shape == (80, 4)
    assert y.view(10, 8).tolist() == [[c] * 8 for c in range(10)]  # row r: eight samples of class r


def test_ema_generator_is_in_eval_mode():
    """The averaged generator (BigGAN's ``G_ema``) only samples: in eval mode, so its batch-norm
    layers use their moving statistics and do not update them, whatever mode the trained
    generator is in."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).train()
    ema = EMA(model)
    assert model.training  # the trained model is left as it was
    assert not any(m.training for m in ema.model.modules())
    before = ema.model[1].running_mean.clone()
    with torch.no_grad():
        ema.model(torch.randn(8, 3) + 5)
    torch.testing.assert_close(ema.model[1].running_mean, before)


def test_each_optimizer_gets_its_own_models_parameters_and_learning_rate(tmp_path, digits):
    """BigGAN-deep trains G and D with different learning rates (paper: 5e-5 and 2e-4): opt_g must hold
    exactly G's parameters with ``g_lr``, opt_d exactly D's with ``d_lr``, both with the configured
    Adam betas and eps; swapping the rates or the models fails this."""
    trainer = tiny_trainer(tmp_path, digits, g_lr=3e-4, d_lr=7e-4, betas=(0.25, 0.5), adam_eps=1e-7)
    for optimizer, model, lr in ((trainer.opt_g, trainer.generator, 3e-4), (trainer.opt_d, trainer.discriminator, 7e-4)):
        (group,) = optimizer.param_groups
        assert group["lr"] == lr and tuple(group["betas"]) == (0.25, 0.5) and group["eps"] == 1e-7
        assert {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}


def test_discriminator_step_leaves_the_generator_and_generator_step_leaves_the_discriminator(tmp_path, digits):
    """A D update changes only D's weights, a G update only G's (D's weights and Adam state stay as
    they were: D is frozen while G learns through it; its spectral-norm vectors may move, as in BigGAN)."""
    trainer = tiny_trainer(tmp_path, digits, "evonorm_s0")
    g_before, d_before = parameters(trainer.generator), parameters(trainer.discriminator)
    trainer.discriminator_step()
    assert all(torch.equal(a, b) for a, b in zip(g_before, trainer.generator.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(d_before, trainer.discriminator.parameters()))
    assert not trainer.opt_g.state  # G's optimizer has not stepped
    d_after = {n: p.detach().clone() for n, p in trainer.discriminator.named_parameters()}
    d_opt_steps = [s["step"].item() for s in trainer.opt_d.state.values()]
    trainer.generator_step()
    for name, value in trainer.discriminator.named_parameters():
        assert torch.equal(value, d_after[name]), name
    assert [s["step"].item() for s in trainer.opt_d.state.values()] == d_opt_steps
    assert not all(torch.equal(a, b) for a, b in zip(g_before, trainer.generator.parameters()))
    assert all(p.requires_grad for p in trainer.discriminator.parameters())  # unfrozen again for the next D step


def test_generator_step_judges_each_fake_as_the_class_it_was_drawn_for(tmp_path, digits):
    """The conditional G loss feeds D the same labels G generated from, and the logged loss_g is
    -mean(D(G(z, y), y)) on exactly those logits."""
    trainer = tiny_trainer(tmp_path, digits, "evonorm_s0")
    seen = {}
    handles = [
        trainer.discriminator.register_forward_hook(lambda m, args, out: seen.update(logits=out.detach(), labels=args[1])),
        trainer.generator.register_forward_hook(lambda m, args, out: seen.update(fake_labels=args[1])),
    ]
    scalars = trainer.generator_step()
    for handle in handles:
        handle.remove()
    assert torch.equal(seen["labels"], seen["fake_labels"])
    assert scalars["loss_g"] == pytest.approx(-seen["logits"].mean().item(), rel=1e-5)


def test_checkpoint_holds_and_resume_restores_the_discriminator_and_its_optimizer(tmp_path, digits):
    """The checkpoint holds D, G, G_ema, both optimizers, the step and the class count; resume restores
    D's weights and Adam moments exactly (not only G's and opt_g's step count, which the test above checks)."""
    trainer = tiny_trainer(tmp_path, digits, "bn_relu")
    trainer.train_step()
    trainer.save()
    trainer.run.close()  # as train() does when it ends
    state = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert {"config", "num_classes", "step", "G", "D", "G_ema", "opt_g", "opt_d"} <= set(state)
    assert state["num_classes"] == 10 and state["step"] == 1
    for key, value in trainer.discriminator.state_dict().items():
        assert torch.equal(state["D"][key], value), key
    resumed = tiny_trainer(tmp_path, digits, "bn_relu", total_steps=3, resume=True)
    for key, value in trainer.discriminator.state_dict().items():
        assert torch.equal(resumed.discriminator.state_dict()[key], value), key
    original, restored = trainer.opt_d.state_dict()["state"], resumed.opt_d.state_dict()["state"]
    assert set(original) == set(restored)
    for index in original:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(original[index][name], restored[index][name]), (index, name)



# ---------------------------------------------------------------- presets, seeds, EMA timing, step plumbing


def test_cifar10_and_digits_presets_as_documented():
    """docs/gan.md "Presets": cifar10 keeps BigGAN-deep's recipe (lr 5e-5/2e-4, betas (0, 0.999), eps 1e-6,
    2 D steps, dim_z/shared_dim 128, depth 2, EMA 0.9999) at 32 px, width 64, batch 256 (64), 100k steps, no
    attention, EMA from step 1000; digits: 16 px greyscale, width 16, batch 64 (64), 2000 steps, lr 2e-4/2e-4,
    2 D steps, dim_z 64, shared_dim 64, EMA 0.99 from step 50. Values typed from the docs table."""
    cifar = PRESETS["cifar10"]
    assert (cifar.dataset, cifar.resolution, cifar.image_channels, cifar.channels, cifar.attention) == (
        "cifar10", 32, 3, 64, ())
    assert (cifar.batch_size, cifar.micro_batch, cifar.total_steps, cifar.ema_start) == (256, 64, 100_000, 1_000)
    assert (cifar.g_lr, cifar.d_lr, tuple(cifar.betas), cifar.adam_eps, cifar.d_steps) == (5e-5, 2e-4, (0.0, 0.999),
                                                                                         1e-6, 2)
    assert (cifar.dim_z, cifar.shared_dim, cifar.depth, cifar.ema_decay, cifar.norm) == (128, 128, 2, 0.9999, "bn_relu")
    digits = PRESETS["digits"]
    assert (digits.dataset, digits.resolution, digits.image_channels, digits.channels, digits.attention) == (
        "digits", 16, 1, 16, ())
    assert (digits.batch_size, digits.micro_batch, digits.total_steps) == (64, 64, 2000)
    assert (digits.g_lr, digits.d_lr, digits.d_steps, digits.dim_z, digits.shared_dim) == (2e-4, 2e-4, 2, 64, 64)
    assert (digits.ema_decay, digits.ema_start, tuple(digits.betas), digits.depth) == (0.99, 50, (0.0, 0.999), 2)
    assert PRESETS["imagenet128"].norm == "bn_relu" and PRESETS["imagenet128"].micro_batch == 256  # 8 GPUs x 256


def test_preset_of_each_dataset_and_unknown_presets():
    assert PRESET_OF_DATASET == {"digits": "digits", "cifar10": "cifar10", "imagenet": "imagenet128",
                                 "array": "imagenet128"}  # array: BigGAN-PyTorch's prepared ImageNet file
    assert preset("cifar10") is PRESETS["cifar10"]
    with pytest.raises(ConfigError, match="unknown preset 'mnist'"):
        preset("mnist")


def test_norm_options_honour_explicit_groups_and_sync_only_when_asked():
    digits = PRESETS["digits"]
    assert replace(digits, norm="bn_relu").norm_options == {}  # no --sync-batch-stats: no sync
    assert replace(digits, norm="gn_relu", groups=8).norm_options == {"groups": 8}  # the GN sweep's 8 groups
    assert replace(digits, norm="evonorm_s0", groups=4).norm_options == {"groups": 4}
    synced = replace(digits, norm="evonorm_b0", sync_batch_stats=True, groups=2)
    assert synced.norm_options == {"sync": True}  # EvoNorm-B0 has no groups: they are not passed to it


def test_trainer_ema_copies_until_its_start_step_then_averages(tmp_path, digits):
    """Steps count from 1 (the first train_step is step 1): with ema_start 2 and decay 0.5, after step 1 G_ema is
    G's copy and after step 2 it is 0.5 * G(step 1) + 0.5 * G(step 2)."""
    trainer = tiny_trainer(tmp_path, digits, "evonorm_s0", ema_start=2, ema_decay=0.5)
    assert (trainer.ema.decay, trainer.ema.start) == (0.5, 2)
    trainer.train_step()
    first = parameters(trainer.generator)
    for average, current in zip(trainer.ema.model.parameters(), first):
        assert torch.equal(average, current)
    trainer.train_step()
    for average, before, now in zip(trainer.ema.model.parameters(), first, trainer.generator.parameters()):
        torch.testing.assert_close(average, 0.5 * before + 0.5 * now)
    assert trainer.ema.model is not trainer.generator


def test_ema_decay_range_and_default():
    assert EMA(nn.Linear(2, 2)).decay == 0.9999 and EMA(nn.Linear(2, 2)).start == 0  # BigGAN's ema_decay
    EMA(nn.Linear(2, 2), decay=0.0)  # 0: the average is the model itself
    with pytest.raises(ValueError, match="decay"):
        EMA(nn.Linear(2, 2), decay=-0.1)


def test_train_step_trains_g_and_d_in_training_mode(tmp_path, digits):
    """Sampling leaves models in eval mode; every train step puts both back in training mode (batch
    statistics while learning), whatever mode they were left in."""
    trainer = tiny_trainer(tmp_path, digits, "bn_relu")
    trainer.generator.eval()
    trainer.discriminator.eval()
    modes = []
    hook = trainer.generator.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    trainer.train_step()
    hook.remove()
    assert modes and all(modes) and trainer.generator.training and trainer.discriminator.training


def test_non_finite_losses_stop_training(tmp_path, digits):
    trainer = tiny_trainer(tmp_path, digits)
    trainer.discriminator_step = lambda: {"loss_d": float("nan"), "d_real": 0.0, "d_fake": 0.0}
    with pytest.raises(FloatingPointError, match="non-finite loss at step 1"):
        trainer.train_step()


def test_seed_sets_initialization_and_latents_distinct_per_process(tmp_path, digits):
    a, b, c = (tiny_trainer(tmp_path / name, digits, seed=seed) for name, seed in (("a", 3), ("b", 3), ("c", 4)))
    assert all(torch.equal(p, q) for p, q in zip(a.generator.parameters(), b.generator.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.generator.parameters(), c.generator.parameters()))
    assert torch.equal(a._latents()[0], b._latents()[0]) and not torch.equal(a._latents()[0], c._latents()[0])
    a._seed_latents()
    rank0 = a._latents()[0]
    a.ctx = DistributedContext(rank=1, world_size=2)
    a._seed_latents()
    assert not torch.equal(a._latents()[0], rank0)  # each process draws its own latents


def _dataset_of_indices(count):
    images = torch.arange(count).float().view(count, 1)
    return torch.utils.data.TensorDataset(images, torch.zeros(count, dtype=torch.long))


def test_infinite_batches_are_full_shuffled_micro_batches_reshuffled_every_epoch():
    config = tiny_config(micro_batch=4, num_workers=0)
    stream = infinite_batches(_dataset_of_indices(10), config, DistributedContext())
    batches = [next(stream)[0].view(-1).long().tolist() for _ in range(4)]
    assert all(len(b) == 4 for b in batches)  # drop_last: 10 images give two full micro-batches per epoch
    for epoch in (batches[:2], batches[2:]):
        assert len(set(epoch[0] + epoch[1])) == 8
    assert batches[0] + batches[1] != list(range(8))  # shuffled
    # two processes: disjoint shards of one seeded permutation, a new permutation each epoch
    shards = []
    for rank in (0, 1):
        stream = infinite_batches(_dataset_of_indices(10), config, DistributedContext(rank=rank, world_size=2))
        shards.append([next(stream)[0].view(-1).long().tolist() for _ in range(3)])
    assert not set(shards[0][0]) & set(shards[1][0])
    assert shards[0][0] != shards[0][1] or shards[0][1] != shards[0][2]  # set_epoch reshuffles
    with pytest.raises(ConfigError, match=r"--micro-batch 4 is more than the dataset \(3 images of digits\)"):
        infinite_batches(_dataset_of_indices(3), config, DistributedContext())  # now, not at the first batch
    with pytest.raises(ConfigError, match="more than the 2 images each of 2 processes gets"):
        infinite_batches(_dataset_of_indices(5), config, DistributedContext(rank=0, world_size=2))


def test_gradients_are_all_reduced_on_the_last_micro_batch_only():
    class FakeDDP(DistributedDataParallel):
        def __init__(self):
            nn.Module.__init__(self)

        def no_sync(self):
            return "no_sync"

    model = FakeDDP()
    assert [sync_on_last(model, i, 3) for i in range(2)] == ["no_sync", "no_sync"]
    assert isinstance(sync_on_last(model, 2, 3), nullcontext) and isinstance(sync_on_last(model, 0, 1), nullcontext)
    assert isinstance(sync_on_last(nn.Linear(1, 1), 0, 3), nullcontext)


def inputs_during(module, step):
    """``(the positional inputs of each call of module, step's result)`` for one ``step()``."""
    inputs = []
    hook = module.register_forward_pre_hook(lambda module, args: inputs.append(args))
    try:
        return inputs, step()
    finally:
        hook.remove()


def test_accumulated_steps_average_the_micro_batch_gradients_and_losses(tmp_path, digits):
    """With 2 micro-batches per step, D's and G's gradients are the mean of the micro-batch hinge-loss gradients
    (replayed on copies of the models from the inputs they saw), freshly zeroed each step; the logged losses are
    the means of the micro-batch losses; a D step leaves no gradient on G."""
    trainer = tiny_trainer(tmp_path, digits, "bn_relu", batch_size=16, micro_batch=8)
    trainer.discriminator_step()  # a first step: its gradients must not leak into the next one
    reference = copy.deepcopy(trainer.discriminator)
    seen, scalars = inputs_during(trainer.discriminator, trainer.discriminator_step)
    assert len(seen) == 2 and all(len(images) == 16 for images, _ in seen)  # 8 real + 8 fake per micro-batch
    losses = []
    for images, labels in seen:
        real, fake = reference(images, labels).split(8)
        loss = discriminator_hinge_loss(real, fake)
        (loss / 2).backward()
        losses.append(loss.item())
    for got, want in zip(trainer.discriminator.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad)
    assert scalars["loss_d"] == pytest.approx(sum(losses) / 2, rel=1e-5)
    assert all(p.grad is None for p in trainer.generator.parameters())
    # the G step, replayed the same way after a first one
    trainer.generator_step()
    g_reference, d_reference = copy.deepcopy(trainer.generator), copy.deepcopy(trainer.discriminator)
    inputs, scalars = inputs_during(trainer.generator, trainer.generator_step)
    assert len(inputs) == 2
    losses = []
    for z, y in inputs:
        loss = generator_hinge_loss(d_reference(g_reference(z, y), y))
        (loss / 2).backward()
        losses.append(loss.item())
    for got, want in zip(trainer.generator.parameters(), g_reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad)
    assert scalars["loss_g"] == pytest.approx(sum(losses) / 2, rel=1e-5)


# ---------------------------------------------------------------- the training loop's schedule, resume, sampling


class RecordingWriter:
    """A TensorBoard writer that records what it is given."""

    def __init__(self):
        self.scalars, self.images, self.closed = [], [], False

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, step))

    def add_image(self, tag, image, step):
        self.images.append((tag, step, tuple(image.shape)))

    def close(self):
        self.closed = True


def quiet_trainer(monkeypatch, run_dir, dataset, **overrides):
    """A tiny trainer writing to a :class:`RecordingWriter` and drawing no curves (fast)."""
    monkeypatch.setattr(trainer_module, "plot_curves", lambda run_dir: None)
    trainer = tiny_trainer(run_dir, dataset, **overrides)
    trainer.writer = RecordingWriter()
    trainer._writer = lambda: trainer.writer
    return trainer


def test_train_logs_samples_evaluates_and_saves_on_their_steps_and_at_the_end(tmp_path, digits, monkeypatch):
    """total 5 steps, log every 2, sample every 3, evaluate every 4, save every 2, keep every 3: logs at 2, 4, 5
    (the last step always), grids at 3, 5, evaluations at 4, 5 (with eval_samples), last.pt at step 5, a kept
    snapshot at 3 only (kept although no save is due there)."""
    trainer = quiet_trainer(monkeypatch, tmp_path, digits, total_steps=5, log_every=2, sample_every=3, eval_every=4,
                            eval_samples=17, save_every=2, keep_every=3)
    evaluated = []
    trainer.evaluate = lambda num: evaluated.append((trainer.step, num)) or {"fid": float(trainer.step)}
    scalars = trainer.train()
    assert trainer.step == 5 and scalars["fid"] == 5.0
    assert evaluated == [(4, 17), (5, 17)]
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4, 5]
    assert "fid" not in records[0] and records[1]["fid"] == 4.0 and records[2]["fid"] == 5.0
    assert {"loss_d", "loss_g", "d_real", "d_fake"} <= set(records[0])
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["step_0000003.png", "step_0000005.png"]
    assert [(tag, step) for tag, step, _ in trainer.writer.images] == [("samples/G_ema", 3), ("samples/G_ema", 5)]
    assert ("train/loss_d", 2) in trainer.writer.scalars and ("eval/fid", 4) in trainer.writer.scalars
    assert ("train/loss_g", 3) not in trainer.writer.scalars and trainer.writer.closed
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.pt", "step_0000003.pt"]
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["step"] == 5
    assert load_checkpoint(tmp_path / "checkpoints" / "step_0000003.pt")["step"] == 3


def test_resume_drops_the_log_lines_written_after_its_checkpoint(tmp_path, digits, monkeypatch):
    """A run killed after logging steps 3 and 4 but saving only step 2 continues from step 2: its log keeps
    lines 1 and 2 and gets a new line 3."""
    quiet_trainer(monkeypatch, tmp_path, digits, total_steps=2, log_every=1, save_every=2).train()
    with open(tmp_path / "log.jsonl", "a") as log:
        log.write('{"step": 3, "stale": 1}\n{"step": 4, "stale": 1}\n')
    quiet_trainer(monkeypatch, tmp_path, digits, total_steps=3, log_every=1, save_every=2, resume=True).train()
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and "stale" not in records[2] and "loss_d" in records[2]


def test_sampling_generator_is_an_eval_copy_of_g_ema_with_standing_statistics(tmp_path, digits):
    """Grids and in-training IS/FID sample G_ema (not G), from a copy whose standing statistics are recomputed in
    this process alone (no synchronization), leaving G_ema's own statistics and sync flags as they were."""
    trainer = tiny_trainer(tmp_path, digits, "bn_relu", sync_batch_stats=True, ema_start=0, ema_decay=0.5)
    for _ in range(2):
        trainer.train_step()
    ema_state = {k: v.clone() for k, v in trainer.ema.model.state_dict().items()}
    sampler = trainer.sampling_generator()
    assert sampler is not trainer.ema.model and not sampler.training
    named = dict(trainer.generator.named_parameters())
    assert any(not torch.equal(p, named[n]) for n, p in sampler.named_parameters())  # not G ...
    for name, value in trainer.ema.model.named_parameters():  # ... but G_ema
        assert torch.equal(dict(sampler.named_parameters())[name], value), name
    for key, value in trainer.ema.model.state_dict().items():
        assert torch.equal(value, ema_state[key]), key  # G_ema untouched
    moving = [k for k in ema_state if k.endswith("running_mean")]
    assert moving and any(not torch.equal(sampler.state_dict()[k], ema_state[k]) for k in moving)  # recomputed
    synced = [m for m in trainer.ema.model.modules() if getattr(m, "sync", False)]
    assert synced and not any(getattr(m, "sync", False) for m in sampler.modules())


def test_in_training_evaluation_measures_the_sampling_generator_of_the_digits_only(tmp_path, digits, monkeypatch):
    calls = []
    monkeypatch.setattr(metrics, "digits_fidelity", lambda generator, resolution, num, seed: calls.append(
        (generator.training, resolution, num, seed)) or {"fid": 1.0})
    trainer = tiny_trainer(tmp_path / "d", digits)
    trainer.train_step()
    assert trainer.evaluate(23) == {"fid": 1.0} and calls == [(False, 16, 23, 1)]
    other = Trainer(tiny_config(dataset="cifar10"), digits, tmp_path / "c")  # not the digits: no digits classifier
    assert other.evaluate(23) == {} and len(calls) == 1


def test_latents_are_standard_normal_and_reproducible():
    """BigGAN samples z ~ N(0, I) (not uniform), labels uniform; both from the given generator only."""
    z, y = sample_latents(20_000, 4, 7, generator=torch.Generator().manual_seed(2))
    assert abs(z.mean().item()) < 0.02 and z.std().item() == pytest.approx(1.0, abs=0.02) and (z < -1).any()
    z2, y2 = sample_latents(20_000, 4, 7, generator=torch.Generator().manual_seed(2))
    assert torch.equal(z, z2) and torch.equal(y, y2) and int(y.max()) == 6


def test_sample_grid_classes_spread_over_many_classes():
    """Up to 10 rows, evenly spread over the classes (ImageNet: 0, 111, ..., 999); fewer classes: one row each;
    fixed standard-normal latents per seed."""
    _, y = grid_latents(dim_z=2, num_classes=1000, per_class=2)
    assert y.tolist() == [c for c in range(0, 1000, 111) for _ in range(2)]
    z, y = grid_latents(dim_z=3, num_classes=3, per_class=4, seed=1)
    assert y.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and z.shape == (12, 3)
    assert torch.equal(z, grid_latents(3, 3, 4, seed=1)[0]) and not torch.equal(z, grid_latents(3, 3, 4, seed=2)[0])


class ClassShade(nn.Module):
    """A 'generator' whose 4x4 image of class k is flat at -1 + 2k/9 (class 0 black, class 9 white);
    records its mode."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.modes = []

    def forward(self, z, y):
        self.modes.append(self.training)
        return (-1 + 2 * y.float() / 9).view(-1, 1, 1, 1).expand(-1, 1, 4, 4) + 0 * self.weight


def test_sample_grid_has_a_row_per_class_mapped_from_minus_one_one_to_black_white(tmp_path):
    """One row per class, per_row samples per row; [-1, 1] shown as [0, 1] (make_grid's padding 2); generated in
    eval mode and the mode restored; the PNG holds the grid."""
    generator = ClassShade().train()
    z, y = grid_latents(dim_z=2, num_classes=10, per_class=3)
    grid = save_sample_grid(generator, str(tmp_path / "g" / "grid.png"), z, y, per_row=3)
    assert generator.modes == [False] and generator.training
    assert grid.shape == (3, 10 * 6 + 2, 3 * 6 + 2)
    for row in range(10):
        for column in range(3):
            tile = grid[:, 2 + 6 * row: 6 + 6 * row, 2 + 6 * column: 6 + 6 * column]
            torch.testing.assert_close(tile, torch.full_like(tile, row / 9))
    png = torch.from_numpy(np.array(Image.open(tmp_path / "g" / "grid.png"))).permute(2, 0, 1)
    torch.testing.assert_close(png, (grid * 255 + 0.5).clamp(0, 255).to(torch.uint8))


def test_standing_statistics_use_the_requested_batches_and_none_skips(tmp_path, digits):
    generator = tiny_trainer(tmp_path, digits, norm="bn_relu").generator.eval()
    layer = generator.blocks[0].norm1.norm
    before = layer.running_mean.clone()
    assert standing_statistics(generator, num_batches=0, batch_size=4) == 0
    assert torch.equal(layer.running_mean, before)
    sizes = []
    handle = generator.register_forward_pre_hook(lambda module, args: sizes.append(len(args[0])))
    standing_statistics(generator, num_batches=2, batch_size=5)
    handle.remove()
    assert sizes == [5, 5]


# ---------------------------------------------------------------- models from configs, checkpoints, command line


def test_models_are_built_from_every_size_in_the_config():
    config = tiny_config("evonorm_s0", dim_z=6, shared_dim=10, depth=3, channels=16, attention=(16,), image_channels=1)
    generator = build_generator(config, 7)
    assert (generator.spec.dim_z, generator.spec.shared_dim, generator.spec.num_classes) == (6, 10, 7)
    assert generator.shared.embedding_dim == 10 and generator.linear.in_features == 16
    assert (generator.spec.depth, generator.spec.attention, generator.spec.image_channels) == (3, (16,), 1)
    assert generator.spec.resolution == 16 and generator.spec.channels == 16
    assert sum(isinstance(block, SelfAttention) for block in generator.blocks) == 1
    discriminator = build_discriminator(config, 7)
    assert discriminator.input_conv.in_channels == 1 and discriminator.embed.num_embeddings == 7
    assert len(discriminator.blocks) == 2 * 3  # depth 3 in each of its two stages (16 -> 8 -> 8 px: no 16 px map)
    assert discriminator.input_conv.out_channels == 4 * 16


def test_evaluation_loads_g_ema_not_g(tmp_path, digits):
    trainer = tiny_trainer(tmp_path, digits, "evonorm_s0", ema_start=0, ema_decay=0.5)
    trainer.train_step()
    trainer.train_step()
    trainer.save()
    generator, config, meta = load_ema_generator(tmp_path)
    assert not generator.training and meta == {"step": 2, "num_classes": 10} and config == trainer.config
    for name, value in generator.state_dict().items():
        assert torch.equal(value, trainer.ema.model.state_dict()[name]), name
    assert any(not torch.equal(a, b) for a, b in zip(generator.parameters(), trainer.generator.parameters()))


def test_resume_may_change_only_how_long_and_how_it_reports(tmp_path):
    saved = tiny_config("evonorm_s0", seed=4)
    open_run(tmp_path / "seed4", RUN_KIND, saved).close()
    reporting = dict(total_steps=9, num_workers=1, log_every=3, sample_every=4, eval_every=5, eval_samples=20,
                     save_every=6, keep_every=7, data_root="elsewhere")
    resumed = train_biggan.seed_runs_to_train(tmp_path, [4], PRESETS["digits"], reporting, resume=True)
    assert resumed == [SeedRun(tmp_path / "seed4", replace(saved, **reporting), True)]  # the run's settings
    for name, value in (("g_lr", 1e-3), ("ema_decay", 0.9), ("d_steps", 1), ("batch_size", 16), ("channels", 16),
                        ("ema_start", 7), ("betas", (0.5, 0.9))):
        with pytest.raises(ConfigError, match="cannot change when resuming"):
            train_biggan.seed_runs_to_train(tmp_path, [4], PRESETS["digits"], {name: value}, resume=True)
    with pytest.raises(RunDirError, match="no run of gan/train_biggan.py in .*new' to resume: none of seed2 has "
                       "started"):
        train_biggan.seed_runs_to_train(tmp_path / "new", [2], PRESETS["digits"], {"g_lr": 1e-3}, resume=True)
    # without --resume the saved settings are not read: the preset and the flags; a folder holding files is refused
    assert train_biggan.seed_runs_to_train(tmp_path, [5], PRESETS["digits"], {}, resume=False) == [
        SeedRun(tmp_path / "seed5", replace(PRESETS["digits"], seed=5), False)]
    with pytest.raises(RunDirError, match="seed4' is not empty"):
        train_biggan.seed_runs_to_train(tmp_path, [5, 4], PRESETS["digits"], {}, resume=False)


def test_resume_starts_the_seeds_a_stopped_job_had_not_reached_with_its_settings(tmp_path):
    """A --seeds 3 job stopped during seed 4: seed4 continues, seeds 5 and 6 start with seed 4's settings (and
    the flags given now), not the preset's; the stop line's command names the seeds so that they are resumed."""
    saved = tiny_config("evonorm_s0", seed=4)
    open_run(tmp_path / "seed4", RUN_KIND, saved).close()
    runs = train_biggan.seed_runs_to_train(tmp_path, [4, 5, 6], PRESETS["digits"], {"total_steps": 9}, resume=True)
    assert runs == [SeedRun(tmp_path / "seed4", replace(saved, total_steps=9), True),
                    SeedRun(tmp_path / "seed5", replace(saved, total_steps=9, seed=5), False),
                    SeedRun(tmp_path / "seed6", replace(saved, total_steps=9, seed=6), False)]
    assert train_biggan.resume_command(tmp_path, {"seed": 4}, 3) == (
        f"python gan/train_biggan.py --resume --run-dir {tmp_path} --seed 4 --seeds 3")
    assert train_biggan.resume_command(tmp_path, {}, None) == f"python gan/train_biggan.py --resume --run-dir {tmp_path}"


def test_cli_trains_consecutive_seeds_from_the_dataset_preset(tmp_path, monkeypatch):
    """--seeds 2 --seed 5: runs seed5 and seed6 with seeds 5 and 6; the preset follows --dataset (cifar10 ->
    cifar10, array -> imagenet128), --preset overrides it; default run folder runs/gan/<preset>_<norm>."""
    runs = []

    class Recorder:
        def __init__(self, config, dataset, run_dir, ctx, resume=False):
            runs.append((config, Path(run_dir), resume))

        def train(self):
            return {}

    monkeypatch.setattr(train_biggan, "Trainer", Recorder)
    monkeypatch.setattr(train_biggan, "build_dataset", lambda name, root, resolution: None)
    assert train_biggan.main(["--seeds", "2", "--seed", "5", "--run-dir", str(tmp_path), "--norm", "evonorm_s0"]) == 0
    assert [(c.seed, d, r) for c, d, r in runs] == [(5, tmp_path / "seed5", False), (6, tmp_path / "seed6", False)]
    assert runs[0][0] == replace(PRESETS["digits"], norm="evonorm_s0", seed=5)
    runs.clear()
    (tmp_path / "b" / "seed1").mkdir(parents=True)
    (tmp_path / "b" / "seed1" / "stray.txt").write_text("")
    with pytest.raises(SystemExit, match="seed1' is not empty"):  # every seed's folder is checked before seed 0 trains
        train_biggan.main(["--seeds", "2", "--run-dir", str(tmp_path / "b")])
    assert runs == []
    train_biggan.main(["--dataset", "cifar10", "--data-root", "x", "--run-dir", str(tmp_path / "c")])
    assert runs[0][0] == replace(PRESETS["cifar10"], data_root="x")
    runs.clear()
    train_biggan.main(["--dataset", "array", "--data-root", "x", "--run-dir", str(tmp_path / "a")])
    assert runs[0][0] == replace(PRESETS["imagenet128"], dataset="array", data_root="x")
    runs.clear()
    train_biggan.main(["--preset", "cifar10", "--dataset", "imagenet", "--data-root", "x", "--run-dir", str(tmp_path)])
    assert runs[0][0] == replace(PRESETS["cifar10"], dataset="imagenet", data_root="x")
    runs.clear()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="no run of gan/train_biggan.py in 'runs/gan/digits_bn_relu' to resume: it "
                       "holds no seed<k> run folder"):
        train_biggan.main(["--resume"])
    open_run("runs/gan/digits_bn_relu/seed5", RUN_KIND, replace(PRESETS["digits"], seed=5)).close()
    train_biggan.main(["--resume"])  # the run's own seed, not the preset's seed 0
    assert runs == [(replace(PRESETS["digits"], seed=5), Path("runs/gan/digits_bn_relu/seed5"), True)]
