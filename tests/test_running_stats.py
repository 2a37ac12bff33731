"""evonorm_core.running_stats: the one moving-average rule, and recalibration of whole models."""
import pytest
import torch
from torch import nn

import evonorm_core
from evonorm_core import running_stats
from evonorm_core.search import GraphLayer, parse


def test_momentum_factor_and_counting():
    assert running_stats.momentum_factor(0.25, 7) == 0.25
    assert running_stats.momentum_factor(None, 4) == 0.25  # cumulative: 1 / batches counted
    tracked = torch.tensor(2)
    assert running_stats.count_batch_(tracked, None) == pytest.approx(1 / 3) and int(tracked) == 3
    assert running_stats.count_batch_(None, 0.1) == 0.1


def test_update_running_is_batchnorms_rule():
    running = torch.tensor([1.0, 2.0], dtype=torch.float64)
    running_stats.update_running_(running, torch.tensor([3.0, 6.0]), 0.25, count=5)
    torch.testing.assert_close(running, torch.tensor([0.75 * 1 + 0.25 * 3 * 5 / 4, 0.75 * 2 + 0.25 * 6 * 5 / 4], dtype=torch.float64))
    running_stats.update_running_(running, torch.tensor([0.0, 0.0]), 1.0)  # no count: stored as is
    torch.testing.assert_close(running, torch.zeros(2, dtype=torch.float64))


def model_with_every_kind(dropout=0.5):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        evonorm_core.build_norm_act("evonorm_b0", 8),
        nn.Dropout(dropout),
        nn.Conv2d(8, 8, 1),
        nn.BatchNorm2d(8),
        GraphLayer(parse("x / batch_rms(x)"), 8),
        evonorm_core.build_norm_act("evonorm_s0", 8, groups=4),
    )


def test_recalibrate_is_the_plain_average_over_the_batches():
    model = model_with_every_kind().train()
    model(torch.randn(4, 3, 6, 6) * 5)  # moving averages away from their start
    model.eval()
    batches = [torch.randn(4, 3, 6, 6) * s for s in (0.5, 1.0, 2.0)]
    assert running_stats.recalibrate(model, batches) == 3  # B0, BatchNorm2d, the searched layer
    # the first layer sees the conv's output directly: its average is the plain mean of the
    # unbiased batch variances, whatever its momentum
    with torch.no_grad():
        inputs = [model[0](b) for b in batches]
    expected = torch.stack([h.var(dim=(0, 2, 3), unbiased=True) for h in inputs]).mean(0)
    torch.testing.assert_close(model[1].running_var, expected, rtol=1e-5, atol=1e-6)
    assert int(model[1].num_batches_tracked) == 3 and int(model[5].num_batches_tracked) == 3
    assert model[1].momentum == 0.1 and model[4].momentum == 0.1 and model[5].momentum == 0.1  # restored
    assert not any(m.training for m in model.modules())  # modes restored


def test_recalibrate_runs_only_batch_layers_in_train_mode():
    model = model_with_every_kind(dropout=1.0)  # in train mode dropout would zero everything after it
    model.train()
    seen = []
    model[4].register_forward_pre_hook(lambda m, args: seen.append(args[0].abs().sum().item()))
    running_stats.recalibrate(model, [torch.randn(2, 3, 5, 5)])
    assert seen and seen[0] > 0  # dropout stayed in eval
    assert all(m.training for m in model.modules())  # the model's own mode is back


def test_recalibrate_averages_batches_passed_with_dropout_in_eval():
    """A training-mode model with dropout before its BatchNorm: recalibration must average the
    statistics of the batches as the eval-mode model sees them (dropout off, the identity), by hand:
    running_mean = mean of the per-batch channel means, running_var = mean of the unbiased
    per-batch variances of the conv's output."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.Dropout(0.5), nn.BatchNorm2d(4)).train()
    batches = [torch.randn(4, 3, 5, 5) * s + 1 for s in (0.5, 1.0, 2.0)]
    running_stats.recalibrate(model, batches)
    with torch.no_grad():
        hidden = [model[0](b).double() for b in batches]
    mean = torch.stack([h.mean(dim=(0, 2, 3)) for h in hidden]).mean(0)
    var = torch.stack([h.var(dim=(0, 2, 3), unbiased=True) for h in hidden]).mean(0)
    torch.testing.assert_close(model[2].running_mean.double(), mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model[2].running_var.double(), var, rtol=1e-5, atol=1e-6)
    assert all(m.training for m in model.modules())


def test_a_model_without_batch_statistics_is_not_run():
    model = nn.Sequential(nn.Conv2d(3, 8, 1), evonorm_core.build_norm_act("evonorm_s0", 8))
    calls = []
    assert running_stats.recalibrate(model, [torch.randn(1, 3, 2, 2)], forward=lambda m, b: calls.append(b)) == 0
    assert calls == []
    assert running_stats.batch_statistics_layers(model) == []


def test_batch_statistics_layers_finds_every_kind():
    model = model_with_every_kind()
    found = running_stats.batch_statistics_layers(model)
    assert [type(m).__name__ for m in found] == ["EvoNormB0", "BatchNorm2d", "GraphLayer"]
    untracked = nn.BatchNorm2d(8, track_running_stats=False)
    assert running_stats.batch_statistics_layers(untracked) == []


@pytest.mark.parametrize("momentum,expected", [(1, 1.0), (1.0, 1.0), (0.5, 0.5), (1e-6, 1e-6), (None, None)])
def test_check_momentum_accepts_the_half_open_interval(momentum, expected):
    value = running_stats.check_momentum(momentum)
    assert value == expected and (value is None or type(value) is float)


@pytest.mark.parametrize("momentum", [0, 0.0, -0.1, 1.0000001, True, "0.1", float("nan")])
def test_check_momentum_refuses_the_rest(momentum):
    with pytest.raises(ValueError, match=r"momentum must be in \(0, 1\] or None"):
        running_stats.check_momentum(momentum)


def test_first_cumulative_batch_and_the_unbiased_correction_edges():
    """momentum=None: the first batch replaces the initial averages (factor 1, nn.BatchNorm2d's rule);
    a variance over one element is stored as it is (no division by n - 1 = 0)."""
    tracked = torch.tensor(0)
    assert running_stats.count_batch_(tracked, None) == 1.0 and int(tracked) == 1
    assert running_stats.momentum_factor(None, None) == 1.0 and running_stats.momentum_factor(None, 0) == 1.0
    running = torch.tensor([4.0])
    running_stats.update_running_(running, torch.tensor([2.0]), 0.5, count=1)
    assert running.item() == 3.0
    running_stats.update_running_(running, torch.tensor([1.0]), 0.5, count=2)  # 1 * 2 / 1 = 2
    assert running.item() == 2.5
    half = torch.tensor([1.0], dtype=torch.float16)
    running_stats.update_running_(half, torch.tensor([3.0], dtype=torch.float64), 0.25)
    assert half.dtype == torch.float16 and half.item() == 1.5  # in place, in the buffer's dtype


def test_recalibrate_restores_each_layers_own_momentum_and_uses_the_given_forward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4, momentum=0.3), evonorm_core.build_norm_act("bn_relu", 4, momentum=None))
    seen = []

    def forward(m, batch):
        seen.append(batch["image"].shape[0])
        return m(batch["image"])

    batches = [{"image": torch.randn(n, 3, 4, 4)} for n in (2, 3)]
    assert running_stats.recalibrate(model, batches, forward=forward) == 2
    assert seen == [2, 3]
    assert model[1].momentum == 0.3 and model[2].momentum is None
    assert int(model[1].num_batches_tracked) == 2 and int(model[2].num_batches_tracked) == 2
    with torch.no_grad():
        hidden = [model[0](b["image"]) for b in batches]
    torch.testing.assert_close(model[1].running_mean, torch.stack([h.mean(dim=(0, 2, 3)) for h in hidden]).mean(0))


def test_recalibrate_restores_modes_and_momenta_when_a_batch_fails():
    model = nn.Sequential(nn.BatchNorm2d(4, momentum=0.2)).eval()

    def broken():
        yield torch.randn(2, 4, 3, 3)
        raise RuntimeError("loader died")

    with pytest.raises(RuntimeError, match="loader died"):
        running_stats.recalibrate(model, broken())
    assert model[0].momentum == 0.2 and not model[0].training and not model.training
