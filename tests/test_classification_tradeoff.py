"""Fig. 11 support: exact inference folding and fvcore FLOP counts."""
import json

import pytest
import torch
import torchvision
from fvcore.nn import FlopCountAnalysis

from evonorm_core.classifiers.models import build_model
from evonorm_suite.classification.paper_tables import TABLES
from evonorm_suite.classification.tradeoff import (
    PAPER_TOP1,
    SplitAffine,
    count_flops,
    fold_for_inference,
    main,
    measured_top1,
)

# These models see tiny batches: a second intra-op thread only adds contention.
pytestmark = pytest.mark.usefixtures("one_thread")


def randomize_norm_acts(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if not hasattr(m, "num_channels"):
                continue
            m.weight.uniform_(0.5, 1.5, generator=g)
            m.bias.normal_(0, 0.3, generator=g)
            if hasattr(m, "v1"):
                m.v1.uniform_(0.5, 1.5, generator=g)
            if hasattr(m, "running_var"):
                m.running_var.uniform_(0.5, 2.0, generator=g)
            if hasattr(m, "running_mean"):
                m.running_mean.normal_(0, 0.5, generator=g)
    return model


@pytest.mark.parametrize("layer", ["bn_relu", "evonorm_b0"])
def test_folding_is_exact_in_float64(layer):
    model = randomize_norm_acts(build_model("mobilenetv2", layer, num_classes=10, width_multiplier=0.5)).double().eval()
    folded = fold_for_inference(model)
    x = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    torch.testing.assert_close(folded(x), model(x), rtol=1e-10, atol=1e-10)
    inside_split = {id(m.norm) for m in folded.modules() if isinstance(m, SplitAffine)}
    remaining = [m for m in folded.modules() if hasattr(m, "num_channels") and id(m) not in inside_split]
    assert remaining == []  # every BN and every affine-only B0 folded; B0's statistics left without affine
    if layer == "evonorm_b0":
        b0 = [m for m in folded.modules() if isinstance(m, SplitAffine)]
        assert len(b0) == 2 + 17 * 2 - 1  # stem, head, two per block but the t=1 block's one
        assert sum(not m.has_gamma for m in b0) == len(b0) - 2  # all but stem and head fold gamma forward
        assert sum(not m.has_beta for m in b0) == 17  # the depthwise ones, followed by a 1x1 projection


def test_folded_bn_relu_flops_match_torchvision_convolutions():
    ours = count_flops(fold_for_inference(build_model("mobilenetv2", "bn_relu")), 64)
    reference = FlopCountAnalysis(torchvision.models.mobilenet_v2().eval(), torch.zeros(1, 3, 64, 64))
    reference.unsupported_ops_warnings(False)
    by_op = reference.by_operator()
    macs = by_op["conv"] + by_op["linear"] + by_op["adaptive_avg_pool2d"]
    model = build_model("mobilenetv2", "bn_relu").eval()
    relus = _outputs(model, 64, lambda m: getattr(m, "activation", None) == "relu")
    residual_adds = _outputs(model, 64, lambda m: getattr(m, "use_residual", False))
    assert ours == macs + sum(o.numel() for o in relus + residual_adds)


def _outputs(model, size, select):
    outputs = []
    hooks = [m.register_forward_hook(lambda m, i, o: outputs.append(o)) for m in model.modules() if select(m)]
    with torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    for h in hooks:
        h.remove()
    return outputs


def test_evonorm_b0_costs_more_flops_than_bn_relu_and_grows_with_width(capsys):
    main(["count", "--resolution", "32"])
    out = capsys.readouterr().out
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| bn_relu") or line.startswith("| evonorm_b0")]
    flops = {(r[1].strip(), float(r[2])): float(r[4]) for r in rows}
    assert len(flops) == 6
    assert flops[("bn_relu", 0.9)] < flops[("bn_relu", 1.0)] < flops[("bn_relu", 1.1)]
    for width in (0.9, 1.0, 1.1):
        assert flops[("bn_relu", width)] < flops[("evonorm_b0", width)]
        # params (M) of the training model: BN-ReLU's are torchvision's MobileNetV2 at that width; B0 adds v1
        reference = sum(p.numel() for p in torchvision.models.mobilenet_v2(width_mult=width).parameters()) / 1e6
        params = {r[1].strip(): float(r[3]) for r in rows if float(r[2]) == width}
        assert params["bn_relu"] == pytest.approx(reference, abs=5e-4) and params["evonorm_b0"] > params["bn_relu"]
    # Table 2's MobileNetV2 column is Fig. 11's 1.0x point; the other widths have no number in the paper
    assert [r[5].strip() for r in rows] == ["-", "73.1", "-", "-", "75.1", "-"]
    # one ImageNet run per point on 32 workers (4 nodes x 8, section 5.1's worker count for MobileNetV2)
    commands = [line for line in out.splitlines() if line.startswith("torchrun")]
    assert len(commands) == 6 and all("--nnodes=4 --nproc_per_node=8" in c and "--model mobilenetv2" in c
                                      for c in commands)
    assert any("--norm-act evonorm_b0 --width-multiplier 0.9" in c and "runs/fig11/evonorm_b0/w0.9" in c
               for c in commands)


def test_paper_points_are_table2s_mobilenetv2_column():
    table2 = TABLES["table2"]
    assert PAPER_TOP1 == {("bn_relu", 1.0): table2.paper_value("mobilenetv2", "BN-ReLU"),
                          ("evonorm_b0", 1.0): table2.paper_value("mobilenetv2", "EvoNorm-B0")} == {
        ("bn_relu", 1.0): 73.1, ("evonorm_b0", 1.0): 75.1}


def test_measured_points_are_keyed_by_layer_and_width(tmp_path):
    for layer, width, top1 in (("bn_relu", 0.9, 70.5), ("evonorm_b0", 1.1, 74.0)):
        folder = tmp_path / layer / f"w{width}"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps(
            {"config": {"norm_act": layer, "width_multiplier": width}, "final_top1": top1, "best_top1": 99.0}))
    assert measured_top1(tmp_path) == {("bn_relu", 0.9): 70.5, ("evonorm_b0", 1.1): 74.0}
